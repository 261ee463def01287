package infer

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/internal/testmodel"
	"github.com/tq-project/tq/quant"
)

func heavyRow(seed uint64, n int, scale float64) []float32 {
	r := rand.New(rand.NewPCG(seed, 5))
	x := make([]float32, n)
	for i := range x {
		z := r.NormFloat64()
		u := (1 - r.Float64()) * (1 - r.Float64())
		x[i] = float32(scale * z / math.Sqrt(-2*math.Log(u)/4))
	}
	return x
}

// The q4_0 KV cache conversion is ggml's reference quantizer: bit-exact with package quant.
func TestQuantizeQ4_0MatchesQuant(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		x := heavyRow(seed, 256, math.Pow(10, float64(seed%7)-3))
		if seed == 3 {
			clear(x[32:64]) // an all-zero block
		}
		got := make([]byte, 8*blockQ4_0)
		quantizeQ4_0(got, x)
		want := make([]byte, 8*blockQ4_0)
		if err := quant.Quantize(gguf.TypeQ4_0, want, x, 1, 256, &quant.Options{Threads: 1}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d: q4_0 bytes differ from package quant", seed)
		}
	}
}

// roundTrip must give exactly the values the integer kernels multiply with.
func TestRoundTrip(t *testing.T) {
	x := heavyRow(1, 512, 3)
	for _, a := range []actType{actQ8_0, actQ8_K} {
		got := make([]float32, 512)
		a.roundTrip(got, x)
		qt, bs := gguf.TypeQ8_0, 512/32*blockQ8_0
		buf := make([]byte, bs)
		if a == actQ8_K {
			qt, bs = gguf.TypeQ8_K, 2*blockQ8_K
			buf = make([]byte, bs)
			kQuantQ8_K(buf, x)
		} else {
			kQuantQ8_0(buf, x)
		}
		want := make([]float32, 512)
		if err := quant.Dequantize(qt, want, buf); err != nil {
			t.Fatal(err)
		}
		var maxRel float64
		for i := range x {
			if got[i] != want[i] {
				t.Fatalf("%v: element %d: %v != %v", a, i, got[i], want[i])
			}
			maxRel = math.Max(maxRel, math.Abs(float64(got[i]-x[i])))
		}
		if maxRel == 0 {
			t.Fatalf("%v: round trip changed nothing: not quantized", a)
		}
	}
	h := make([]float32, 512)
	actF16.roundTrip(h, x)
	for i := range x {
		if h[i] != h2f(f2h(x[i])) {
			t.Fatal("f16 round trip")
		}
	}
}

// Types without an integer kernel (dequantize + f32 dot) follow the reference: exactly (to
// float rounding) with FullPrecision, and within activation-rounding noise by default.
func TestGenericTypesMatchReference(t *testing.T) {
	spec := testmodel.Default("qwen3")
	spec.Types = map[string]gguf.GGMLType{"default": gguf.TypeQ5_0, "attn_k": gguf.TypeQ3_K, "attn_v": gguf.TypeIQ4_XS,
		"ffn_up": gguf.TypeBF16, "ffn_gate": gguf.TypeQ4_1, "ffn_down": gguf.TypeQ2_K, "attn_output": gguf.TypeIQ4_NL,
		"output": gguf.TypeQ5_1}
	src := buildSource(t, spec)
	ref, err := NewReference(src)
	if err != nil {
		t.Fatal(err)
	}
	toks := randTokens(11, 12, spec.Vocab)
	want, _ := ref.Logits(toks)
	for _, fp := range []bool{true, false} {
		got := evalIn(t, src, Options{Threads: 2, CtxSize: 32, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: fp}, toks, !fp)
		var worstL, worstP float64
		for i := range toks {
			l, p := logitErr(got[i], want[i])
			worstL, worstP = math.Max(worstL, l), math.Max(worstP, p)
		}
		t.Logf("full precision %v: max rel logit err %.2e, max |dp| %.2e", fp, worstL, worstP)
		if fp && worstL > 1e-4 {
			t.Errorf("full precision: rel logit error %.3e", worstL)
		}
		if !fp && worstP > 3e-2 {
			t.Errorf("default rounding: max |dp| %.3e", worstP)
		}
	}
}

// q4_1/q5_1 dots: against a float64 evaluation of ggml's formula on the dequantized blocks,
// with the min term using the q8_1 block's fp16 sum.
func TestDotQ41Q51(t *testing.T) {
	const n = 256
	x := heavyRow(7, n, 2)
	a := make([]byte, n/32*blockQ8_1)
	quant.QuantizeRowQ8_1(a, x)
	for _, wt := range []gguf.GGMLType{gguf.TypeQ4_1, gguf.TypeQ5_1} {
		wv := heavyRow(8, n, 0.5)
		rs, _ := quant.RowSize(wt, n)
		w := make([]byte, rs)
		if err := quant.Quantize(wt, w, wv, 1, n, &quant.Options{Threads: 1}); err != nil {
			t.Fatal(err)
		}
		k, err := kernelFor(wt)
		if err != nil || k.act != actQ8_1 {
			t.Fatalf("%s: kernel %v, %v", wt, k, err)
		}
		got := k.dot(w, a, n, nil)
		deq := make([]float32, n)
		if err := quant.Dequantize(wt, deq, w); err != nil {
			t.Fatal(err)
		}
		bs := rs / (n / 32)
		var want, absSum float64
		for b := 0; b < n/32; b++ {
			mw := float64(h2f(uint16(w[b*bs+2]) | uint16(w[b*bs+3])<<8))
			dw := float64(h2f(uint16(w[b*bs]) | uint16(w[b*bs+1])<<8))
			da := float64(h2f(uint16(a[b*blockQ8_1]) | uint16(a[b*blockQ8_1+1])<<8))
			sa := float64(h2f(uint16(a[b*blockQ8_1+2]) | uint16(a[b*blockQ8_1+3])<<8))
			for j := 0; j < 32; j++ {
				qw := (float64(deq[b*32+j]) - mw) / dw // the integer weight level
				qa := float64(int8(a[b*blockQ8_1+4+j]))
				want += dw * da * math.Round(qw) * qa
				absSum += math.Abs(dw * da * qw * qa)
			}
			want += mw * sa
			absSum += math.Abs(mw * sa)
		}
		if math.Abs(float64(got)-want) > 1e-5*absSum {
			t.Errorf("%s: dot %v, want %v (scale %v)", wt, got, want, absSum)
		}
	}
}
