package infer

import (
	"math"
	"sort"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/internal/testmodel"
)

var fuzzBase *MapSource

// fuzzSource returns a mutable copy of a tiny qwen3moe model (one layer, hidden 256, 4 experts).
func fuzzSource(t testing.TB) *MapSource {
	if fuzzBase == nil {
		spec := testmodel.Default("qwen3moe")
		spec.Layers, spec.Experts, spec.ExpertsUsed, spec.Vocab = 1, 4, 2, 300
		spec.Types = map[string]gguf.GGMLType{"default": gguf.TypeQ8_0, "attn_v": gguf.TypeQ4_K, "ffn_down_exps": gguf.TypeQ6_K}
		fuzzBase = buildSource(t, spec)
	}
	s := NewMapSource()
	for k, v := range fuzzBase.Metadata {
		s.Metadata[k] = v
	}
	for k, v := range fuzzBase.Tensors {
		c := *v
		c.Dims = append([]int64(nil), v.Dims...)
		s.Tensors[k] = &c
	}
	return s
}

var fuzzValues = []any{
	uint32(0), uint32(1), uint32(2), uint32(3), uint32(64), uint32(256), uint32(1 << 31), uint64(1 << 62),
	int32(-1), int64(-5), float32(0), float32(math.NaN()), float32(math.Inf(1)), float32(1e-6), float64(1e30),
	"yarn", "linear", "none", "qwen3", "llama", "bogus", true, []int32{2, 2}, []uint32{1, 2}, []any{"x"}, nil,
}

var fuzzTypes = []gguf.GGMLType{gguf.TypeF32, gguf.TypeF16, gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeIQ2_XXS,
	gguf.TypeQ8_K, gguf.TypeI32, gguf.GGMLType(999), gguf.TypeBF16, gguf.TypeQ4_1}

// FuzzLoad mutates the metadata and tensors of a valid model; Load must return an error or a
// model that evaluates without panicking.
func FuzzLoad(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{0, 5, 4, 1, 3, 1, 2, 7, 2})
	f.Add([]byte{0, 9, 10, 0, 11, 22, 3, 4, 0})
	f.Add([]byte{4, 1, 0, 5, 2, 0, 1, 0, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		src := fuzzSource(t)
		keys := make([]string, 0, len(src.Metadata))
		for k := range src.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		names := src.TensorNames()
		for i := 0; i+2 < len(ops) && i < 30; i += 3 {
			op, a, b := ops[i]%6, int(ops[i+1]), int(ops[i+2])
			tn := src.Tensors[names[a%len(names)]]
			switch op {
			case 0:
				if v := fuzzValues[b%len(fuzzValues)]; v == nil {
					delete(src.Metadata, keys[a%len(keys)])
				} else {
					src.Metadata[keys[a%len(keys)]] = v
				}
			case 1:
				if tn != nil && len(tn.Dims) > 0 {
					d := b % len(tn.Dims)
					tn.Dims[d] = []int64{0, 1, tn.Dims[d] + 1, tn.Dims[d] - 1, 1 << 40, -3}[b%6]
				}
			case 2:
				if tn != nil {
					tn.Type = fuzzTypes[b%len(fuzzTypes)]
				}
			case 3:
				if tn != nil {
					tn.Data = tn.Data[:len(tn.Data)*(b%4)/4]
				}
			case 4:
				delete(src.Tensors, names[a%len(names)])
			case 5:
				src.Add(&Tensor{Name: "blk.0.extra", Type: gguf.TypeF32, Dims: []int64{4}, Data: make([]byte, 16)})
			}
		}
		m, err := Load(src, Options{Threads: 1, CtxSize: 16})
		if err != nil {
			return
		}
		defer m.Close()
		s, err := m.NewSession()
		if err != nil {
			return
		}
		if _, err := s.Eval([]int32{1, 2, 3}, LogitsAll); err != nil {
			t.Fatalf("a model that loaded failed to evaluate: %v", err)
		}
	})
}

// FuzzReadConfig feeds arbitrary values to every hyperparameter key.
func FuzzReadConfig(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(1), uint8(2))
	f.Add(uint8(3), uint8(7), uint8(9), uint8(11))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 uint8) {
		src := fuzzSource(t)
		keys := make([]string, 0)
		for k := range src.Metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		src.Metadata[keys[int(k1)%len(keys)]] = fuzzValues[int(v1)%len(fuzzValues)]
		src.Metadata[keys[int(k2)%len(keys)]] = fuzzValues[int(v2)%len(fuzzValues)]
		c, err := ReadConfig(src)
		if err != nil {
			return
		}
		if c.NLayer <= 0 || c.NHead <= 0 || c.NHead%c.NHeadKV != 0 || c.NRot > c.HeadDim || c.RMSEps <= 0 {
			t.Fatalf("invalid config accepted: %+v", c)
		}
	})
}
