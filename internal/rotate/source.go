package rotate

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/modelsrc"
)

// Kind is what the rotation does to one tensor.
type Kind int

const (
	Pass   Kind = iota // unchanged
	Reader             // rows (inputs from a normalised residual): w ← (w ⊙ g)·Q
	Writer             // outputs into the residual: W ← Qᵀ·W (every column rotated)
	Embed              // rows are residual vectors: e ← e·Q (token embedding, writers' biases)
	One                // a residual norm's weight, folded into its readers: all ones
)

// archs are the architectures whose every tensor's role the tables below cover, with the name
// of the norm in front of the FFN.
var archs = map[string]string{"llama": "ffn_norm", "qwen2": "ffn_norm", "qwen3": "ffn_norm", "qwen3moe": "ffn_norm",
	"qwen35": "post_attention_norm", "qwen35moe": "post_attention_norm"}

// attnReaders and ffnReaders read the attention and FFN norm outputs; writers add into the
// residual; passRoles never touch it (per-head norms, the DeltaNet's internals, projections'
// biases on the output side).
var (
	attnReaders = []string{"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_qkv.weight", "attn_gate.weight",
		"ssm_beta.weight", "ssm_alpha.weight"}
	ffnReaders = []string{"ffn_gate.weight", "ffn_up.weight", "ffn_gate_inp.weight", "ffn_gate_exps.weight",
		"ffn_up_exps.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_gate_inp_shexp.weight"}
	writers    = []string{"attn_output.weight", "ssm_out.weight", "ffn_down.weight", "ffn_down_exps.weight", "ffn_down_shexp.weight"}
	writerBias = []string{"attn_output.bias", "ffn_down.bias"}
	passRoles  = []string{"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_q_norm.weight", "attn_k_norm.weight",
		"ssm_conv1d.weight", "ssm_a", "ssm_dt.bias", "ssm_norm.weight", "exp_probs_b.bias"}
)

type plan struct {
	kind Kind
	norm string // Reader: the norm tensor whose weight is folded
}

// Source is a modelsrc.TensorSource whose residual stream is rotated (see the package
// comment). It is safe for concurrent reads.
type Source struct {
	src   modelsrc.TensorSource
	rot   *Rotation
	md    gguf.Metadata
	descs []modelsrc.TensorDesc
	shape map[string][]int64
	plans map[string]plan
	norms map[string][]float32

	mu    sync.Mutex
	cache []*cached // the last writer matrices rotated (a tensor is read in row chunks)
}

// cached is one rotated writer matrix; the first reader computes it, concurrent readers of
// the same matrix wait for it instead of rotating it again.
type cached struct {
	name  string
	mat   int64
	bytes int64
	once  sync.Once
	data  []float32
	err   error
}

// cacheBytes bounds the rotated writer matrices kept (the newest is always kept).
const cacheBytes = 256 << 20

var _ modelsrc.TensorSource = (*Source)(nil)

// ErrNotApplicable wraps the reasons a model cannot be rotated exactly.
var ErrNotApplicable = errors.New("rotate: the residual stream of this model cannot be rotated exactly")

// Wrap returns src with its residual stream rotated by the rotation of (hidden size, seed).
// It fails, wrapping ErrNotApplicable, for architectures or tensors whose role it does not know
// (multi-token-prediction layers among them) and for tied embeddings (the embedding and the
// LM head would need different rotations).
func Wrap(src modelsrc.TensorSource, seed uint64) (*Source, error) {
	md := src.Metadata()
	arch, err := md.GetString("general.architecture")
	if err != nil {
		return nil, fmt.Errorf("rotate: %w", err)
	}
	ffnNorm, ok := archs[arch]
	if !ok {
		return nil, fmt.Errorf("%w: architecture %s is not supported (%s)", ErrNotApplicable, arch, "llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe")
	}
	d, err := md.GetUint(arch + ".embedding_length")
	if err != nil {
		return nil, fmt.Errorf("rotate: %w", err)
	}
	rot, err := New(Spec{Dim: int(d), Seed: seed})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotApplicable, err)
	}
	s := &Source{src: src, rot: rot, descs: src.Tensors(), shape: map[string][]int64{}, plans: map[string]plan{},
		norms: map[string][]float32{}}
	for _, t := range s.descs {
		s.shape[t.Name] = t.Shape
	}
	if _, ok := s.shape["output.weight"]; !ok {
		return nil, fmt.Errorf("%w: the LM head is tied to the token embedding", ErrNotApplicable)
	}
	for _, t := range s.descs {
		p, err := s.classify(t, ffnNorm)
		if err != nil {
			return nil, err
		}
		s.plans[t.Name] = p
	}
	for name, p := range s.plans {
		if p.kind != Reader {
			continue
		}
		if _, done := s.norms[p.norm]; done {
			continue
		}
		sh, ok := s.shape[p.norm]
		if !ok || len(sh) != 1 || sh[0] != int64(d) {
			return nil, fmt.Errorf("%w: %s reads %s, which the model lacks or is not of %d values", ErrNotApplicable, name, p.norm, d)
		}
		g := make([]float32, d)
		if err := src.ReadFloat32(p.norm, g); err != nil {
			return nil, fmt.Errorf("rotate: %w", err)
		}
		s.norms[p.norm] = g
	}
	for name, p := range s.plans {
		if p.kind == One {
			if _, used := s.norms[name]; !used {
				return nil, fmt.Errorf("%w: norm %s is read by no known weight", ErrNotApplicable, name)
			}
		}
	}
	s.md = md.Clone()
	s.md.Set(MetaKey, gguf.String(rot.Spec().String()))
	return s, nil
}

// classify finds the plan of tensor t.
func (s *Source) classify(t modelsrc.TensorDesc, ffnNorm string) (plan, error) {
	d := int64(s.rot.Dim())
	name := t.Name
	bad := func(why string) (plan, error) {
		return plan{}, fmt.Errorf("%w: tensor %s (%v): %s", ErrNotApplicable, name, t.Shape, why)
	}
	switch name {
	case "token_embd.weight":
		if t.Shape[0] != d {
			return bad("rows are not of the hidden size")
		}
		return plan{kind: Embed}, nil
	case "output.weight":
		if t.Shape[0] != d {
			return bad("rows are not of the hidden size")
		}
		return plan{kind: Reader, norm: "output_norm.weight"}, nil
	case "output_norm.weight":
		return plan{kind: One}, nil
	case "rope_freqs.weight":
		return plan{kind: Pass}, nil
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return bad("unknown role")
	}
	i := strings.IndexByte(rest, '.')
	if i <= 0 {
		return bad("unknown role")
	}
	p, role := "blk."+rest[:i]+".", rest[i+1:]
	has := func(list []string) bool {
		for _, r := range list {
			if r == role {
				return true
			}
		}
		return false
	}
	switch {
	case role == "attn_norm.weight" || role == ffnNorm+".weight":
		return plan{kind: One}, nil
	case has(attnReaders), has(ffnReaders):
		if t.Shape[0] != d {
			return bad("a reader of the residual whose rows are not of the hidden size")
		}
		norm := p + "attn_norm.weight"
		if has(ffnReaders) {
			norm = p + ffnNorm + ".weight"
		}
		return plan{kind: Reader, norm: norm}, nil
	case has(writers):
		if len(t.Shape) < 2 || t.Shape[1] != d {
			return bad("a writer into the residual whose outputs are not of the hidden size")
		}
		return plan{kind: Writer}, nil
	case has(writerBias):
		if len(t.Shape) != 1 || t.Shape[0] != d {
			return bad("a residual bias not of the hidden size")
		}
		return plan{kind: Embed}, nil
	case has(passRoles):
		return plan{kind: Pass}, nil
	}
	return bad("unknown role (multi-token-prediction and other extra layers are not rotated)")
}

// Rotation returns the rotation.
func (s *Source) Rotation() *Rotation { return s.rot }

// Plan returns what the rotation does to tensor name and, for a Reader, the norm weight folded
// into it (nil otherwise).
func (s *Source) Plan(name string) (Kind, []float32) {
	p := s.plans[name]
	if p.kind == Reader {
		return Reader, s.norms[p.norm]
	}
	return p.kind, nil
}

// Metadata implements modelsrc.TensorSource: the source's, with MetaKey set.
func (s *Source) Metadata() gguf.Metadata { return s.md.Clone() }

// Tensors implements modelsrc.TensorSource.
func (s *Source) Tensors() []modelsrc.TensorDesc { return s.descs }

// Close implements modelsrc.TensorSource (closes the wrapped source).
func (s *Source) Close() error { return s.src.Close() }

// ReadFloat32 implements modelsrc.TensorSource.
func (s *Source) ReadFloat32(name string, dst []float32) error {
	sh, ok := s.shape[name]
	if !ok {
		return fmt.Errorf("rotate: no tensor %q", name)
	}
	rows := int64(1)
	for _, v := range sh[1:] {
		rows *= v
	}
	if int64(len(dst)) != rows*sh[0] {
		return fmt.Errorf("tensor %s has %d elements, destination holds %d", name, rows*sh[0], len(dst))
	}
	return s.ReadRows(name, 0, rows, dst)
}

// ReadRows implements modelsrc.TensorSource.
func (s *Source) ReadRows(name string, row0, nrows int64, dst []float32) error {
	p := s.plans[name]
	sh := s.shape[name]
	switch p.kind {
	case Pass:
		return s.src.ReadRows(name, row0, nrows, dst)
	case One:
		if err := s.src.ReadRows(name, row0, nrows, dst); err != nil { // the same checks
			return err
		}
		for i := range dst[:nrows*sh[0]] {
			dst[i] = 1
		}
		return nil
	case Reader, Embed:
		if err := s.src.ReadRows(name, row0, nrows, dst); err != nil {
			return err
		}
		d := int64(s.rot.Dim())
		g := s.norms[p.norm]
		buf := make([]float64, d)
		for r := int64(0); r < nrows; r++ {
			row := dst[r*d : (r+1)*d]
			if g != nil {
				for i, w := range g {
					row[i] *= w
				}
			}
			s.rot.Apply(row, buf)
		}
		return nil
	}
	return s.readWriter(name, sh, row0, nrows, dst)
}

// readWriter serves rows of a writer: each matrix (d rows of cols) is read whole, every column
// rotated, and kept in a small cache for the next chunk.
func (s *Source) readWriter(name string, sh []int64, row0, nrows int64, dst []float32) error {
	cols, d := sh[0], sh[1]
	nmat := int64(1)
	if len(sh) > 2 {
		nmat = sh[2]
	}
	if row0 < 0 || nrows < 0 || row0+nrows > d*nmat {
		return fmt.Errorf("tensor %s: rows [%d, %d) out of range (%d rows)", name, row0, row0+nrows, d*nmat)
	}
	if int64(len(dst)) < nrows*cols {
		return fmt.Errorf("tensor %s: destination holds %d values, %d rows need %d", name, len(dst), nrows, nrows*cols)
	}
	for r := row0; r < row0+nrows; {
		m := r / d
		data, err := s.writerMatrix(name, m, cols, d)
		if err != nil {
			return err
		}
		end := min(row0+nrows, (m+1)*d)
		copy(dst[(r-row0)*cols:(end-row0)*cols], data[(r-m*d)*cols:(end-m*d)*cols])
		r = end
	}
	return nil
}

func (s *Source) writerMatrix(name string, m, cols, d int64) ([]float32, error) {
	s.mu.Lock()
	var c *cached
	for _, e := range s.cache {
		if e.name == name && e.mat == m {
			c = e
			break
		}
	}
	if c == nil {
		c = &cached{name: name, mat: m, bytes: 4 * d * cols}
		s.cache = append(s.cache, c)
		var total int64
		for _, e := range s.cache {
			total += e.bytes
		}
		for len(s.cache) > 1 && total > cacheBytes {
			total -= s.cache[0].bytes
			s.cache = s.cache[1:]
		}
	}
	s.mu.Unlock()
	c.once.Do(func() { c.data, c.err = s.rotateWriter(name, m, cols, d) })
	return c.data, c.err
}

// rotateWriter reads matrix m of writer name (d rows of cols) and returns Qᵀ·W: column c of W
// is a residual vector, rotated as a row of Wᵀ.
func (s *Source) rotateWriter(name string, m, cols, d int64) ([]float32, error) {
	w := make([]float32, d*cols)
	if err := s.src.ReadRows(name, m*d, d, w); err != nil {
		return nil, err
	}
	col := make([]float32, d)
	buf := make([]float64, d)
	for c := int64(0); c < cols; c++ {
		for i := int64(0); i < d; i++ {
			col[i] = w[i*cols+c]
		}
		s.rot.Apply(col, buf)
		for i := int64(0); i < d; i++ {
			w[i*cols+c] = col[i]
		}
	}
	return w, nil
}
