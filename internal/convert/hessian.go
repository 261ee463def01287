package convert

import (
	"fmt"
	"sync"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/rotate"
	"github.com/tq-project/tq/quant"
)

// HessianSource supplies the input Gram matrices a calibration collected (tq calibrate's
// hessians/, docs/calibration.md): H = XᵀX/n of the input of matrix m of a tensor (m = 0 for a
// 2-D weight, the expert index for stacked experts), row-major n×n with n the row length. ok is
// false when the calibration holds only a diagonal for that input (the importance then serves).
// Implementations must be safe for concurrent use.
type HessianSource interface {
	Gram(tensor string, m int) (gram []float64, n int, ok bool, err error)
}

// hessianCache hands out quant.Hessians for one tensor's matrices. The factorisation
// QuantizeGPTQ caches inside a Hessian is the expensive part, so work items (row chunks) of the
// same matrix share one; at most keep matrices stay alive (the engine works through the
// matrices of a tensor in order, a few chunks at a time; writePlan sizes keep by its threads).
type hessianCache struct {
	src  HessianSource
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
// where the calibration has a full Gram matrix of the tensor's input. Types GPTQ does not
// handle, and F16/BF16/F32, keep the plain search.
func attachHessian(j *job, src HessianSource) {
	if src == nil || !gptqType(j.typ) {
		return
	}
	c := &hessianCache{src: src, name: j.name, cols: j.cols, keep: 2, hs: map[int64]*hessianEntry{}}
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

// drop forgets every Hessian of the cache (the tensor is written).
func (c *hessianCache) drop() {
	c.mu.Lock()
	c.hs, c.order = map[int64]*hessianEntry{}, nil
	c.mu.Unlock()
}

// get returns the Hessian of matrix m, nil when the calibration has none for it.
func (c *hessianCache) get(m int64) (*quant.Hessian, error) {
	c.mu.Lock()
	e := c.hs[m]
	if e == nil {
		e = &hessianEntry{}
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
			e.h, e.err = quant.NewHessianFromGram(n, g)
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
