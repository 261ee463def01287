package verify

import (
	"fmt"
	"math"
	"os"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/quant"
)

// LogitsModel is what verify needs from a language model: a context that tokens are appended
// to and next-token logits.
type LogitsModel interface {
	// NVocab is the length of a logits row.
	NVocab() int
	// CtxSize is the most tokens the context holds.
	CtxSize() int
	// Reset empties the context.
	Reset()
	// Eval appends tokens to the context and returns the next-token logits after each of the
	// last nOut of them (0 <= nOut <= len(tokens)), in order. Rows belong to the caller.
	Eval(tokens []int32, nOut int) ([][]float32, error)
}

// inferModel adapts an infer model and one session to LogitsModel.
type inferModel struct {
	m      *infer.Model
	s      *infer.Session
	closer func() error
}

func (im *inferModel) NVocab() int  { return im.m.Config().NVocab }
func (im *inferModel) CtxSize() int { return im.s.CtxSize() }
func (im *inferModel) Reset()       { im.s.Reset() }

func (im *inferModel) Eval(tokens []int32, nOut int) ([][]float32, error) {
	if nOut < 0 || nOut > len(tokens) {
		return nil, fmt.Errorf("verify: Eval: nOut %d for %d tokens", nOut, len(tokens))
	}
	if im.s.Pos()+len(tokens) > im.s.CtxSize() {
		return nil, fmt.Errorf("context overflow: %d tokens in a context of %d", im.s.Pos()+len(tokens), im.s.CtxSize())
	}
	head := len(tokens) - nOut
	if head > 0 {
		if _, err := im.s.Eval(tokens[:head], infer.LogitsNone); err != nil {
			return nil, err
		}
	}
	if nOut == 0 {
		return nil, nil
	}
	want := infer.LogitsAll
	if nOut == 1 {
		want = infer.LogitsLast
	}
	return im.s.Eval(tokens[head:], want)
}

func (im *inferModel) Close() error {
	err := im.m.Close()
	if im.closer != nil {
		if e := im.closer(); err == nil {
			err = e
		}
	}
	return err
}

// RunOptions configure how a model is evaluated.
type RunOptions struct {
	Threads   int
	CtxSize   int
	CacheType string // KV cache type for K and V: f16 (default), f32, bf16, q8_0, q4_0
	// Reference computes every product in float32 without rounding activations to the
	// weights' dot-product type, with an f32 KV cache (closest to full precision; used for
	// reference models).
	Reference bool
}

func (o RunOptions) inferOptions() infer.Options {
	cache := o.CacheType
	if o.Reference {
		cache = "f32"
	}
	return infer.Options{Threads: o.Threads, CtxSize: o.CtxSize, CacheTypeK: cache, CacheTypeV: cache,
		FullPrecision: o.Reference}
}

func loadInfer(src infer.Source, o RunOptions, closer func() error) (*inferModel, error) {
	m, err := infer.Load(src, o.inferOptions())
	if err != nil {
		if closer != nil {
			closer()
		}
		return nil, err
	}
	s, err := m.NewSession()
	if err != nil {
		m.Close()
		if closer != nil {
			closer()
		}
		return nil, err
	}
	return &inferModel{m: m, s: s, closer: closer}, nil
}

// OpenGGUFModel loads a GGUF model (one file or the first shard of a split model) for
// evaluation.
func OpenGGUFModel(path string, o RunOptions) (LogitsModel, func() error, error) {
	src, err := infer.OpenGGUF(path)
	if err != nil {
		return nil, nil, err
	}
	im, err := loadInfer(src, o, src.Close)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return im, im.Close, nil
}

// OpenHFModel loads a Hugging Face model folder for evaluation. Weights are converted the way
// `tq convert` converts them (GGUF names, q/k permutation, expert stacking) and held in memory:
// BF16 and F16 checkpoint tensors keep their type (exact), others become F32, 1-D tensors are
// F32. Memory is therefore about the checkpoint's size (4 bytes per weight for FP8/F32
// checkpoints); use an F16/BF16 GGUF reference or --reference-logits for models that do not fit.
func OpenHFModel(dir string, o RunOptions) (LogitsModel, func() error, error) {
	hs, err := modelsrc.OpenHF(dir)
	if err != nil {
		return nil, nil, err
	}
	defer hs.Close()
	ms := infer.NewMapSource()
	for _, kv := range hs.Metadata() {
		ms.Metadata[kv.Key] = infer.MetaValue(kv.Value)
	}
	for _, d := range hs.Tensors() {
		t, err := hfTensor(hs, d)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", dir, err)
		}
		ms.Add(t)
	}
	im, err := loadInfer(ms, o, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", dir, err)
	}
	return im, im.Close, nil
}

// hfTensor reads one tensor of an HF source in row chunks and stores it as BF16, F16 or F32.
func hfTensor(hs *modelsrc.HFSource, d modelsrc.TensorDesc) (*infer.Tensor, error) {
	if len(d.Shape) == 0 {
		return nil, fmt.Errorf("tensor %q has no dimensions", d.Name)
	}
	n := int64(1)
	for _, s := range d.Shape {
		if s <= 0 || n > math.MaxInt64/s {
			return nil, fmt.Errorf("tensor %q: bad shape %v", d.Name, d.Shape)
		}
		n *= s
	}
	typ := gguf.TypeF32
	if len(d.Shape) >= 2 {
		switch d.SourceType {
		case "BF16":
			typ = gguf.TypeBF16
		case "F16":
			typ = gguf.TypeF16
		}
	}
	esize := int64(4)
	if typ != gguf.TypeF32 {
		esize = 2
	}
	data := make([]byte, n*esize)
	cols := d.Shape[0]
	rows := n / cols
	chunk := max(1, (1<<20)/cols)
	buf := make([]float32, chunk*cols)
	for r0 := int64(0); r0 < rows; r0 += chunk {
		nr := min(chunk, rows-r0)
		b := buf[:nr*cols]
		if err := hs.ReadRows(d.Name, r0, nr, b); err != nil {
			return nil, err
		}
		out := data[r0*cols*esize:]
		for i, v := range b {
			switch typ {
			case gguf.TypeBF16:
				u := quant.FP32ToBF16(v)
				out[2*i], out[2*i+1] = byte(u), byte(u>>8)
			case gguf.TypeF16:
				u := quant.FP32ToFP16(v)
				out[2*i], out[2*i+1] = byte(u), byte(u>>8)
			default:
				u := math.Float32bits(v)
				out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
			}
		}
	}
	return &infer.Tensor{Name: d.Name, Type: typ, Dims: append([]int64(nil), d.Shape...), Data: data}, nil
}

// isDir reports whether path is a directory.
func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}
