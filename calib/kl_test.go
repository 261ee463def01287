package calib

import (
	"math"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/fixtures"
)

// quantizedCopy returns a source whose searched tensors are replaced by their quantize-
// dequantize round trip (the container calibration chose), with or without
// importance weights.
func quantizedCopy(t testing.TB, ms *metaSource, res *Result, weighted bool) *metaSource {
	t.Helper()
	out := &metaSource{md: ms.md, tensors: map[string]*infer.Tensor{}}
	for name, tt := range ms.tensors {
		ch, ok := res.Config.Tensors[name]
		if !ok {
			out.tensors[name] = tt
			continue
		}
		typ, err := gguf.ParseType(ch.Type)
		if err != nil {
			t.Fatal(err)
		}
		src := bytesAsF32(tt.Data)
		cols, rows := int(tt.Dims[0]), int(tt.Dims[1])
		nmat := 1
		if len(tt.Dims) > 2 {
			nmat = int(tt.Dims[2])
		}
		deq := make([]float32, len(src))
		for e := 0; e < nmat; e++ {
			var imp []float32
			if weighted {
				imp, _ = res.Stats.Importance(name, e)
			}
			x := src[e*rows*cols : (e+1)*rows*cols]
			if _, err := quantizeRows(typ, x, rows, cols, imp, 0, name, nil, deq[e*rows*cols:(e+1)*rows*cols]); err != nil {
				t.Fatal(err)
			}
		}
		out.tensors[name] = &infer.Tensor{Name: name, Type: gguf.TypeF32, Dims: tt.Dims, Data: f32Bytes(deq)}
	}
	return out
}

func bytesAsF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	copy(f32Bytes(out), b)
	return out
}

// meanKL is the mean over positions of KL(P_ref || P_q) of next-token distributions.
func meanKL(t testing.TB, ref, q *infer.Model, seqs []Sequence) float64 {
	t.Helper()
	var sum float64
	var n int
	for _, s := range seqs {
		toks := s.Tokens[:s.Valid]
		lr := evalAll(t, ref, toks)
		lq := evalAll(t, q, toks)
		for i := range lr {
			sum += klLogits(lr[i], lq[i])
			n++
		}
	}
	return sum / float64(n)
}

func evalAll(t testing.TB, m *infer.Model, toks []int32) [][]float32 {
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Eval(toks, infer.LogitsAll)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func logSoftmax(l []float32) []float64 {
	mx := math.Inf(-1)
	for _, v := range l {
		mx = math.Max(mx, float64(v))
	}
	var z float64
	for _, v := range l {
		z += math.Exp(float64(v) - mx)
	}
	lz := mx + math.Log(z)
	out := make([]float64, len(l))
	for i, v := range l {
		out[i] = float64(v) - lz
	}
	return out
}

func klLogits(p, q []float32) float64 {
	lp, lq := logSoftmax(p), logSoftmax(q)
	var kl float64
	for i := range lp {
		kl += math.Exp(lp[i]) * (lp[i] - lq[i])
	}
	return kl
}

// TestImportanceLowersKL is the acceptance check of the weighted search: on held-out
// sequences, the model whose linear layers were quantized (int4, groups of 128, symmetric)
// with the calibration importance has a lower mean KL divergence from the full-precision model
// than the same containers quantized without it. Every linear layer is quantized, o_proj and
// down_proj included (the default config keeps those in F16): their inputs are the
// heavy-tailed ones, where weighting matters most. On these random fixture models int4 moves
// the output distribution a lot (KL of nats), and with only the default layers the comparison
// is dominated by chaotic noise (weighted won 7 of 9 model/seed cases when measured); with all
// layers it won 12 of 12, by 1-25 %.
func TestImportanceLowersKL(t *testing.T) {
	for _, arch := range []string{"qwen3", "qwen3moe", "llama"} {
		t.Run(arch, func(t *testing.T) {
			dir := genModel(t, fixtures.Preset(arch))
			vocab := vocabOf(t, dir)
			calSeqs := randSeqs(11, 8, vocab, 100, 192, 64)
			held := randSeqs(12345, 4, vocab, 96, 128, 64)
			res := calibrate(t, dir, Options{Sequences: calSeqs, Threads: 2, NoBaseline: true, NoSensitivity: true,
				LayersToQuantize: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, SkipLayers: []string{"lm_head"}})
			ms := fullSource(t, dir)
			load := func(s infer.Source) *infer.Model {
				m, err := infer.Load(s, infer.Options{Threads: 2, CtxSize: 256, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true})
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			ref := load(ms)
			defer ref.Close()
			w := load(quantizedCopy(t, ms, res, true))
			defer w.Close()
			u := load(quantizedCopy(t, ms, res, false))
			defer u.Close()
			klW := meanKL(t, ref, w, held)
			klU := meanKL(t, ref, u, held)
			t.Logf("%s: mean KL on held-out tokens: importance-weighted %.6g, unweighted %.6g (ratio %.3f)", arch, klW, klU, klW/klU)
			if !(klW < klU) {
				t.Fatalf("importance weighting did not lower the KL divergence: %.6g vs %.6g", klW, klU)
			}
		})
	}
}
