//go:build linux && amd64

package infer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref/ggml"
)

// The element-wise operations of the forward pass against the same ggml operations of
// llama.cpp's AVX2 CPU backend, bit for bit.

func oracleFloats(r *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		v := r.NormFloat64()
		if i%5 == 0 { // heavy tail
			v /= 0.05 + r.Float64()
		}
		x[i] = float32(v * scale)
	}
	return x
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	bad := 0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			if bad < 5 {
				t.Errorf("%s[%d]: ours %v, ggml %v", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d/%d values differ", what, bad, len(want))
	}
}

// TestRopeMatchesGGML runs ggml_rope_ext against ropeParams with the C library's cosf, sinf
// and logf in use (as after Load on Linux), so that every rounding is checked.
func TestRopeMatchesGGML(t *testing.T) {
	lib := ggml.Open(t)
	useSystemLibm()
	if libmName == "go" {
		t.Skip("the C library's cosf/sinf/logf could not be loaded; llama.cpp's last bits depend on them")
	}
	for _, tc := range []struct {
		mode    RopeMode
		hd, rot int
		base    float64
		scaling string
		factor  float64
	}{
		{RopeNorm, 64, 64, 10000, "none", 0},
		{RopeNeox, 128, 128, 1e6, "none", 0},
		{RopeNeox, 64, 64, 10000, "linear", 2},
		{RopeNeox, 128, 128, 1e6, "yarn", 4},
		{RopeNorm, 128, 64, 500000, "yarn", 8},
	} {
		t.Run(fmt.Sprintf("mode=%d/hd=%d/%s", tc.mode, tc.hd, tc.scaling), func(t *testing.T) {
			c := &Config{NRot: tc.rot, HeadDim: tc.hd, RopeBase: tc.base, RopeMode: tc.mode, CtxTrain: 4096,
				Rope: RopeScaling{Type: tc.scaling, Factor: tc.factor, OrigCtx: 4096, AttnFactor: 1, YarnBetaFst: 32, YarnBetaSlw: 1}}
			p := newRopeParams(c, nil)
			const heads, T = 3, 700
			r := rand.New(rand.NewPCG(uint64(tc.hd), 7))
			x := oracleFloats(r, tc.hd*heads*T, 1)
			pos := make([]int32, T)
			for i := range pos {
				pos[i] = int32(i * 47 % 40000) // positions up to a long context
			}
			ctx := lib.NewCtx(64 << 20)
			defer ctx.Free()
			a := ctx.F32(x, int64(tc.hd), heads, T)
			b := ctx.I32(pos, T)
			out := ctx.RopeExt(a, b, ggml.Tensor{}, tc.rot, int(tc.mode), 4096, float32(tc.base), p.freqScale,
				p.extFactor, p.attnFactor, 32, 1)
			want := ctx.Compute(out, 1, len(x))
			got := append([]float32(nil), x...)
			cs := make([]float32, tc.rot)
			for i := 0; i < T; i++ {
				p.cache(cs, int(pos[i]))
				for h := 0; h < heads; h++ {
					p.apply(got[(i*heads+h)*tc.hd:(i*heads+h+1)*tc.hd], cs)
				}
			}
			sameBits(t, "rope", got, want)
		})
	}
}

func TestNormSoftmaxSwigluMatchGGML(t *testing.T) {
	lib := ggml.Open(t)
	r := rand.New(rand.NewPCG(3, 9))
	ctx := lib.NewCtx(64 << 20)
	defer ctx.Free()

	// RMSNorm times the weight row, as llama.cpp's build_norm.
	const E, T = 1000, 9
	x := oracleFloats(r, E*T, 3)
	w := oracleFloats(r, E, 1)
	want := ctx.Compute(ctx.Mul(ctx.RMSNorm(ctx.F32(x, E, T), 1e-6), ctx.F32(w, E)), 1, E*T)
	got := make([]float32, E*T)
	for i := 0; i < T; i++ {
		rmsNorm(got[i*E:(i+1)*E], x[i*E:(i+1)*E], w, 1e-6)
	}
	sameBits(t, "rms_norm·w", got, want)

	// Softmax of attention scores: rows over a padded KV length of 256 with the positions
	// after the row's own masked, and router rows of exactly n_expert entries.
	const nKV, rows = 256, 40
	sc := oracleFloats(r, nKV*rows, 4)
	mask := make([]float32, nKV*rows)
	for i := 0; i < rows; i++ {
		for u := i*5 + 1; u < nKV; u++ {
			mask[i*nKV+u] = float32(math.Inf(-1))
		}
	}
	const scale = 0.125
	want = ctx.Compute(ctx.SoftMaxExt(ctx.F32(sc, nKV, rows), ctx.F32(mask, nKV, rows), scale, 0), 1, nKV*rows)
	for i := 0; i < rows; i++ {
		row := append([]float32(nil), sc[i*nKV:i*nKV+i*5+1]...)
		softmaxMasked(row, scale)
		sameBits(t, fmt.Sprintf("softmax row %d", i), row, want[i*nKV:i*nKV+len(row)])
	}
	for _, nE := range []int{8, 60, 128} {
		lg := oracleFloats(r, nE*3, 2)
		want = ctx.Compute(ctx.SoftMaxExt(ctx.F32(lg, int64(nE), 3), ggml.Tensor{}, 1, 0), 1, nE*3)
		got = append([]float32(nil), lg...)
		for i := 0; i < 3; i++ {
			softmaxInPlace(got[i*nE:(i+1)*nE], 1)
		}
		sameBits(t, fmt.Sprintf("router softmax n=%d", nE), got, want)
	}

	// SwiGLU rows (llama.cpp's build_ffn: swiglu_split(gate, up)).
	for _, n := range []int{512, 100} {
		g := oracleFloats(r, n*4, 3)
		u := oracleFloats(r, n*4, 1)
		want = ctx.Compute(ctx.SwigluSplit(ctx.F32(g, int64(n), 4), ctx.F32(u, int64(n), 4)), 1, n*4)
		got = append([]float32(nil), g...)
		swiglu(got, u, n)
		sameBits(t, fmt.Sprintf("swiglu n=%d", n), got, want)
	}
}
