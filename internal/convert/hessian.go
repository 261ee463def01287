package convert

import (
	"fmt"
	"slices"
	"sync"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/rotate"
	"github.com/tq-project/tq/quant"
)

// HessianSource supplies the input Gram matrices a calibration collected (tq calibrate's
// hessians/, docs/calibration.md): H = XᵀX/n of the input of matrix m of a tensor (m = 0 for a
// 2-D weight, the expert index for stacked experts), row-major n×n with n the row length. ok is
// false when the calibration holds only a diagonal for that input (the importance then serves).
// Implementations must be safe for concurrent use, and the matrix Gram returns is handed over:
// the conversion keeps it as the Hessian's storage (quant.AdoptGram), so the source must not
// change it afterwards.
type HessianSource interface {
	Gram(tensor string, m int) (gram []float64, n int, ok bool, err error)
}

// GramKeyer is a HessianSource that also names the matrix behind Gram(tensor, m): equal
// non-empty keys mean the same matrix (the q/k/v projections of a block read one input, and so
// do gate and up), so a conversion factorises it once for all of them (hessianPool).
type GramKeyer interface {
	GramKey(tensor string, m int) string
}

// hessianPool shares factorised Hessians between the tensors of one conversion whose matrices
// have the same key. An entry stays while a tensor not yet written will ask for its key (refs,
// counted when the jobs are attached), but at most limit entries, the most recently used, so
// the routed experts' matrices (gate and up each read all of a layer's, one tensor after the
// other) are not all held between the two; what a job's own cache holds stays alive through
// it until its tensor is written.
type hessianPool struct {
	mu    sync.Mutex
	limit int
	order []string
	hs    map[string]*hessianEntry
	refs  map[string]int
}

func newHessianPool() *hessianPool {
	return &hessianPool{limit: 2, hs: map[string]*hessianEntry{}, refs: map[string]int{}}
}

// use counts one more tensor that will ask for key.
func (p *hessianPool) use(key string) {
	p.mu.Lock()
	p.refs[key]++
	p.mu.Unlock()
}

// release is called when a tensor that used keys is written: an entry no later tensor asks
// for is dropped.
func (p *hessianPool) release(keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range keys {
		if p.refs[k]--; p.refs[k] > 0 {
			continue
		}
		delete(p.refs, k)
		delete(p.hs, k)
		p.unorder(k)
	}
}

// unorder removes key from the recency order; the lock is held.
func (p *hessianPool) unorder(key string) {
	if i := slices.Index(p.order, key); i >= 0 {
		p.order = slices.Delete(p.order, i, i+1)
	}
}

// entry returns the pool's entry for key (a new one, not pooled, when key is "" or p is nil).
func (p *hessianPool) entry(key string) *hessianEntry {
	if p == nil || key == "" {
		return &hessianEntry{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.hs[key]; e != nil {
		p.unorder(key)
		p.order = append(p.order, key) // most recently used last
		return e
	}
	e := &hessianEntry{}
	p.hs[key] = e
	p.order = append(p.order, key)
	for len(p.order) > p.limit {
		delete(p.hs, p.order[0])
		p.order = p.order[1:]
	}
	return e
}

// hessianCache hands out quant.Hessians for one tensor's matrices. The factorisation
// QuantizeGPTQ caches inside a Hessian is the expensive part, so work items (row chunks) of the
// same matrix share one; at most keep matrices stay alive (the engine works through the
// matrices of a tensor in order, a few chunks at a time; writePlan sizes keep by its threads).
type hessianCache struct {
	src  HessianSource
	pool *hessianPool // matrices shared with other tensors (nil: none)
	keys []string     // the pool keys of this tensor's matrices (distinct), released by drop
	name string
	cols int64
	keep int

	mu    sync.Mutex
	order []int64
	hs    map[int64]*hessianEntry
}

type hessianEntry struct {
	once sync.Once
	h    *quant.Hessian
	err  error
}

// attachHessian makes the job quantize with the error-compensating search (quant.QuantizeGPTQ)
// where the calibration has a full Gram matrix of the tensor's input; matrices whose key a
// GramKeyer source names come from pool (nil: none shared). Types GPTQ does not handle, and
// F16/BF16/F32, keep the plain search.
func attachHessian(j *job, src HessianSource, pool *hessianPool) {
	if src == nil || !gptqType(j.typ) {
		return
	}
	c := &hessianCache{src: src, pool: pool, name: j.name, cols: j.cols, keep: 2, hs: map[int64]*hessianEntry{}}
	if k, ok := src.(GramKeyer); ok && pool != nil {
		nmat := int64(1)
		if j.rowsPerMatrix > 0 && j.rows%j.rowsPerMatrix == 0 {
			nmat = j.rows / j.rowsPerMatrix
		}
		seen := map[string]bool{}
		for m := int64(0); m < nmat; m++ {
			if key := k.GramKey(j.name, int(m)); key != "" && !seen[key] {
				seen[key] = true
				c.keys = append(c.keys, key)
				pool.use(key)
			}
		}
	}
	j.hessian = c.get
	j.hessians = c
}

func gptqType(t gguf.GGMLType) bool {
	for _, g := range quant.GPTQTypes() {
		if g == t {
			return true
		}
	}
	return false
}

// drop forgets every Hessian of the cache and releases its pool keys (the tensor is written).
func (c *hessianCache) drop() {
	c.mu.Lock()
	c.hs, c.order = map[int64]*hessianEntry{}, nil
	keys := c.keys
	c.keys = nil
	c.mu.Unlock()
	if c.pool != nil {
		c.pool.release(keys)
	}
}

// get returns the Hessian of matrix m, nil when the calibration has none for it.
func (c *hessianCache) get(m int64) (*quant.Hessian, error) {
	c.mu.Lock()
	e := c.hs[m]
	if e == nil {
		key := ""
		if k, ok := c.src.(GramKeyer); ok && c.pool != nil && len(c.keys) > 0 {
			key = k.GramKey(c.name, int(m))
		}
		e = c.pool.entry(key)
		c.hs[m] = e
		c.order = append(c.order, m)
		if len(c.order) > c.keep {
			delete(c.hs, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.mu.Unlock()
	e.once.Do(func() {
		g, n, ok, err := c.src.Gram(c.name, int(m))
		switch {
		case err != nil:
			e.err = fmt.Errorf("tensor %s matrix %d: Hessian: %w", c.name, m, err)
		case !ok:
		case int64(n) != c.cols:
			e.err = fmt.Errorf("tensor %s matrix %d: the calibration's Hessian is %d×%d, the rows have %d columns", c.name, m, n, n, c.cols)
		default:
			e.h, e.err = quant.AdoptGram(n, g)
			if e.err != nil {
				e.err = fmt.Errorf("tensor %s matrix %d: %w", c.name, m, e.err)
			}
		}
	})
	return e.h, e.err
}

// rotatedHessians serves the Gram matrices of a rotated model (TypeOptions.Rotate): a weight
// that reads the rotated residual sees x·Q where the calibration saw x·diag(g), so its matrix
// is Qᵀ·diag(1/g)·H·diag(1/g)·Q; every other weight's input is unchanged.
type rotatedHessians struct {
	src HessianSource
	rs  *rotate.Source
}

func (r rotatedHessians) Gram(tensor string, m int) ([]float64, int, bool, error) {
	g, n, ok, err := r.src.Gram(tensor, m)
	if err != nil || !ok {
		return g, n, ok, err
	}
	kind, norm := r.rs.Plan(tensor)
	if kind != rotate.Reader {
		return g, n, ok, nil
	}
	if n != r.rs.Rotation().Dim() {
		return nil, 0, false, fmt.Errorf("tensor %s: a %d×%d Gram matrix for a rotated reader of width %d", tensor, n, n, r.rs.Rotation().Dim())
	}
	h, err := r.rs.Rotation().Gram(g, norm)
	if err != nil {
		return nil, 0, false, fmt.Errorf("tensor %s: %w", tensor, err)
	}
	return h, n, true, nil
}

// GramKey passes the source's key through, with the reader's rotation (its norm's gain): the
// readers of one input fold the same norm.
func (r rotatedHessians) GramKey(tensor string, m int) string {
	k, ok := r.src.(GramKeyer)
	if !ok {
		return ""
	}
	key := k.GramKey(tensor, m)
	if key == "" {
		return ""
	}
	kind, norm := r.rs.Plan(tensor)
	if kind != rotate.Reader {
		return key
	}
	if len(norm) == 0 {
		return ""
	}
	return fmt.Sprintf("%s|rotated %p", key, &norm[0])
}

// HeadGroups passes the number of per-head matrices through.
func (r rotatedHessians) HeadGroups(layer int, entry string) int {
	if hs, ok := r.src.(HeadHessianSource); ok {
		return hs.HeadGroups(layer, entry)
	}
	return 0
}

// HeadGram rotates the per-head matrices like those of the tensor they serve.
func (r rotatedHessians) HeadGram(layer int, entry, tensor string, group int) ([]float64, int, bool, error) {
	hs, ok := r.src.(HeadHessianSource)
	if !ok {
		return nil, 0, false, nil
	}
	g, n, ok, err := hs.HeadGram(layer, entry, tensor, group)
	if err != nil || !ok {
		return g, n, ok, err
	}
	kind, norm := r.rs.Plan(tensor)
	if kind != rotate.Reader {
		return g, n, ok, nil
	}
	if n != r.rs.Rotation().Dim() {
		return nil, 0, false, fmt.Errorf("tensor %s: a %d×%d head matrix for a rotated reader of width %d", tensor, n, n, r.rs.Rotation().Dim())
	}
	h, err := r.rs.Rotation().Gram(g, norm)
	if err != nil {
		return nil, 0, false, fmt.Errorf("tensor %s: %w", tensor, err)
	}
	return h, n, true, nil
}
