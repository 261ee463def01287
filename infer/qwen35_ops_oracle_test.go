//go:build linux && amd64

package infer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref/ggml"
)

// The building blocks of the Qwen3.5 hybrid layers (qwen35, qwen35moe) against the ggml
// operations llama.cpp's graph uses for them (src/models/qwen35.cpp, qwen35moe.cpp,
// delta-net-base.cpp), computed by llama.cpp's own AVX2 CPU backend, bit for bit, on random
// data with heavy tails (oracleFloats) in the shapes of the fixtures and of the released
// models.

// openHybridOracle loads ggml and the C library's expf/logf (which llama.cpp's scalar ops
// call); without the latter the last bits cannot agree.
func openHybridOracle(t *testing.T) *ggml.Lib {
	t.Helper()
	lib := ggml.Open(t)
	useSystemLibm()
	if cExpf == nil || cLogf == nil {
		t.Skip("the C library's expf/logf could not be loaded (or TQ_LIBM=go); llama.cpp's last bits depend on them")
	}
	return lib
}

// expf32/logf32 take the C library's value without calling it where the correctly rounded
// one must equal it; they must agree with the C functions everywhere, in particular on
// inputs where glibc's expf is not correctly rounded (found by an exhaustive search over all
// floats, glibc 2.36; logged when the correctly rounded value differs here too).
func TestHybridLibmMatchesC(t *testing.T) {
	useSystemLibm()
	if cExpf == nil || cLogf == nil {
		t.Skip("the C library's expf/logf could not be loaded (or TQ_LIBM=go)")
	}
	r := rand.New(rand.NewPCG(11, 3))
	hard := []float32{0x1.fefe02p-16, 0x1.dfb8fap-14, 0x1.fbb822p-14, 0x1.9655ecp-13, 0x1.cbd318p-13, 0x1.1a2648p-12}
	notCR := 0
	for _, x := range hard {
		if cExpf(x) != float32(math.Exp(float64(x))) {
			notCR++
		}
	}
	t.Logf("glibc expf differs from the correctly rounded value on %d of %d listed inputs", notCR, len(hard))
	n := 300000
	if testing.Short() {
		n = 30000
	}
	slow := 0
	for i := 0; i < n; i++ {
		var x float32
		switch i % 4 {
		case 0:
			x = float32(r.NormFloat64() * 8)
		case 1:
			x = float32((r.Float64()*2 - 1) * 100)
		case 2:
			x = float32(studentT(r) * 1e-3)
		default:
			x = math.Float32frombits(r.Uint32()) // any float, NaN and Inf included
		}
		if i < len(hard) {
			x = hard[i]
		}
		if got, want := expf32(x), cExpf(x); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("expf32(%v) = %v, C expf %v", x, got, want)
		}
		if _, ok := nearest(math.Exp(float64(x)), expfBound); !ok {
			slow++
		}
		y := float32(math.Abs(float64(x))) + 1 // softplus's logf arguments are >= 1
		if i%4 == 3 {
			y = float32(math.Abs(float64(x)))
		}
		if got, want := logf32(y), cLogf(y); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("logf32(%v) = %v, C logf %v", y, got, want)
		}
	}
	t.Logf("%d inputs: expf32 called the C function on %.2f%%", n, 100*float64(slow)/float64(n))
}

// Element-wise ops with the C library's exp/log (sigmoid, softplus, exp) and the vector SiLU
// over rows whose lengths leave scalar tails.
func TestHybridScalarOpsMatchGGML(t *testing.T) {
	lib := openHybridOracle(t)
	ctx := lib.NewCtx(64 << 20)
	defer ctx.Free()
	r := rand.New(rand.NewPCG(5, 17))
	const n = 20000
	x := oracleFloats(r, n, 6)
	x[0], x[1], x[2], x[3] = 20, 20.000002, -90, 88 // softplus threshold, exp under/overflow
	a := ctx.F32(x, n)
	got := make([]float32, n)
	for i, v := range x {
		got[i] = sigmoid(v)
	}
	sameBits(t, "sigmoid", got, ctx.Compute(ctx.Sigmoid(a), 1, n))
	for i, v := range x {
		got[i] = softplus(v)
	}
	sameBits(t, "softplus", got, ctx.Compute(ctx.Softplus(a), 1, n))
	for i, v := range x {
		got[i] = expf32(v)
	}
	sameBits(t, "exp", got, ctx.Compute(ctx.Exp(a), 1, n))
	for _, row := range []int{64, 128, 8192, 13, 1004} {
		rows := n / row
		xs := x[:rows*row]
		got := make([]float32, len(xs))
		siluRows(got, xs, row)
		sameBits(t, fmt.Sprintf("silu rows of %d", row), got, ctx.Compute(ctx.Silu(ctx.F32(xs, int64(row), int64(rows))), 1, len(xs)))
	}
}

// ggml_ssm_conv + ggml_silu over the K−1 cached rows and T new rows (build_conv_state
// concatenates them per channel), from a non-zero state.
func TestHybridConvMatchesGGML(t *testing.T) {
	lib := openHybridOracle(t)
	for _, tc := range []struct{ C, K, T int }{
		{2*2*64 + 4*64, 4, 9},                                             // the fixtures' conv width
		{2*16*128 + 32*128, 4, 5},                                         // Qwen3.6-35B-A3B
		{1004, 4, 1},                                                      // decode, width with a SiLU tail
		{2*16*128 + 32*128, 4, 1},                                         // decode
		{300, 2, 7},                                                       // other kernel width
		{2*2*64 + 4*64, 4, 70},                                            // a longer prompt
		{2*16*128 + 48*128, 4, 3},                                         // Qwen3.5-27B-like
		{2*2*64 + 4*64 + 4, 3, 4},                                         // tail again
		{2*2*64 + 4*64, 1, 3},                                             // no state
		{700, 5, 3}, {700, 7, 2}, {700, 8, 2}, {700, 12, 2}, {700, 15, 2}, // vector and scalar parts of the sum
		{2*16*128 + 32*128 + 1, 4, 2}, // odd width
	} {
		t.Run(fmt.Sprintf("C=%d/K=%d/T=%d", tc.C, tc.K, tc.T), func(t *testing.T) {
			C, K, T := tc.C, tc.K, tc.T
			r := rand.New(rand.NewPCG(uint64(C), uint64(T)))
			x := oracleFloats(r, T*C, 2)
			state := oracleFloats(r, (K-1)*C, 2)
			w := oracleFloats(r, K*C, 0.5)
			// sx {K−1+T, C}: per channel the state rows, then the new rows
			L := K - 1 + T
			sx := make([]float32, L*C)
			for c := 0; c < C; c++ {
				for i := 0; i < K-1; i++ {
					sx[c*L+i] = state[i*C+c]
				}
				for tt := 0; tt < T; tt++ {
					sx[c*L+K-1+tt] = x[tt*C+c]
				}
			}
			ctx := lib.NewCtx(64 << 20)
			defer ctx.Free()
			want := ctx.Compute(ctx.Silu(ctx.SSMConv(ctx.F32(sx, int64(L), int64(C), 1), ctx.F32(w, int64(K), int64(C)))), 1, T*C)
			got := make([]float32, T*C)
			st := append([]float32(nil), state...)
			causalConv1d(got, x, st, w, make([]float32, (K-1)*C), T, C, K)
			sameBits(t, "ssm_conv+silu", got, want)
			// the new state is the last K−1 columns of sx
			for c := 0; c < C; c++ {
				for i := 0; i < K-1; i++ {
					if st[i*C+c] != sx[c*L+T+i] {
						t.Fatalf("state row %d channel %d: %v, want %v", i, c, st[i*C+c], sx[c*L+T+i])
					}
				}
			}
		})
	}
}

// ggml_l2_norm of the q and k heads (eps = the RMS eps), including tiny and zero heads.
func TestHybridL2NormMatchesGGML(t *testing.T) {
	lib := openHybridOracle(t)
	ctx := lib.NewCtx(64 << 20)
	defer ctx.Free()
	for _, ds := range []int{64, 128, 48} {
		const heads, T = 32, 6
		r := rand.New(rand.NewPCG(uint64(ds), 2))
		x := oracleFloats(r, ds*heads*T, 1.5)
		for i := 0; i < ds; i++ {
			x[ds+i] *= 1e-7 // below eps
			x[2*ds+i] = 0
		}
		want := ctx.Compute(ctx.L2Norm(ctx.F32(x, int64(ds), heads, T), 1e-6), 1, len(x))
		got := append([]float32(nil), x...)
		l2NormHeads(got, ds, 1e-6)
		sameBits(t, fmt.Sprintf("l2_norm ds=%d", ds), got, want)
	}
}

// β = sigmoid(b), g = softplus(a + dt_bias)·ssm_a (ggml_sigmoid; ggml_add, ggml_softplus,
// ggml_mul with the per-head vectors broadcast over tokens).
func TestHybridGatesMatchGGML(t *testing.T) {
	lib := openHybridOracle(t)
	ctx := lib.NewCtx(64 << 20)
	defer ctx.Free()
	for _, hv := range []int{4, 32, 48} {
		const T = 40
		r := rand.New(rand.NewPCG(uint64(hv), 8))
		b := oracleFloats(r, hv*T, 3)
		a := oracleFloats(r, hv*T, 4)
		dt := oracleFloats(r, hv, 2)
		ssmA := make([]float32, hv)
		for i := range ssmA {
			ssmA[i] = -float32(math.Exp(r.NormFloat64() * 1.5)) // -exp(A_log)
		}
		wantB := ctx.Compute(ctx.Sigmoid(ctx.F32(b, int64(hv), T)), 1, hv*T)
		wantG := ctx.Compute(ctx.Mul(ctx.Softplus(ctx.Add(ctx.F32(a, int64(hv), T), ctx.F32(dt, int64(hv)))), ctx.F32(ssmA, int64(hv))), 1, hv*T)
		deltaNetGates(b, a, dt, ssmA, hv)
		sameBits(t, fmt.Sprintf("beta hv=%d", hv), b, wantB)
		sameBits(t, fmt.Sprintf("gate hv=%d", hv), a, wantG)
	}
}

// The fused ggml_gated_delta_net (what llama.cpp's CPU backend runs for prompts and decode:
// cparams.fused_gdn_ar/ch resolve to true when the op is on the layer's device) against
// deltaNetHead over all value heads, with more value than key heads (head j reads key head
// j mod Hk), from a non-zero state; outputs and the final state.
func TestHybridDeltaNetMatchesGGML(t *testing.T) {
	lib := openHybridOracle(t)
	for _, tc := range []struct{ S, Hk, Hv, T int }{
		{64, 2, 4, 24},   // the fixtures
		{64, 2, 4, 1},    // decode
		{128, 16, 32, 3}, // Qwen3.6-35B-A3B
		{128, 16, 32, 1},
		{128, 2, 6, 17},
		{48, 2, 4, 5}, // head sizes that leave ggml_vec_dot_f32 leftovers
		{20, 1, 3, 4},
		{39, 1, 1, 3},
	} {
		t.Run(fmt.Sprintf("S=%d/Hk=%d/Hv=%d/T=%d", tc.S, tc.Hk, tc.Hv, tc.T), func(t *testing.T) {
			S, Hk, Hv, T := tc.S, tc.Hk, tc.Hv, tc.T
			r := rand.New(rand.NewPCG(uint64(S*Hv), uint64(T)))
			q := oracleFloats(r, S*Hk*T, 1)
			k := oracleFloats(r, S*Hk*T, 1)
			l2NormHeads(q, S, 1e-6)
			l2NormHeads(k, S, 1e-6)
			v := oracleFloats(r, S*Hv*T, 1)
			g := make([]float32, Hv*T)
			beta := make([]float32, Hv*T)
			for i := range g {
				g[i] = -float32(math.Abs(studentT(r))) * 0.3
				if i%7 == 0 {
					g[i] = -float32(r.Float64() * 1e-3) // long memory
				}
				beta[i] = sigmoid(float32(r.NormFloat64() * 2))
			}
			state := oracleFloats(r, S*S*Hv, 0.2)
			ctx := lib.NewCtx(256 << 20)
			defer ctx.Free()
			out := ctx.GatedDeltaNet(ctx.F32(q, int64(S), int64(Hk), int64(T), 1), ctx.F32(k, int64(S), int64(Hk), int64(T), 1),
				ctx.F32(v, int64(S), int64(Hv), int64(T), 1), ctx.F32(g, 1, int64(Hv), int64(T), 1),
				ctx.F32(beta, 1, int64(Hv), int64(T), 1), ctx.F32(state, int64(S), int64(S), int64(Hv), 1), 1)
			want := ctx.Compute(out, 1, S*Hv*T+S*S*Hv)
			got := make([]float32, S*Hv*T)
			st := append([]float32(nil), state...)
			delta := make([]float32, S)
			scale := 1 / float32(math.Sqrt(float64(S)))
			for j := 0; j < Hv; j++ {
				kh := j % Hk
				deltaNetHead(st[j*S*S:(j+1)*S*S], q[kh*S:], k[kh*S:], v[j*S:], g[j:], beta[j:], got[j*S:], delta,
					T, S, Hk*S, Hk*S, Hv*S, Hv, Hv*S, scale)
			}
			sameBits(t, "gated_delta_net output", got, want[:S*Hv*T])
			sameBits(t, "gated_delta_net state", st, want[S*Hv*T:])
		})
	}
}

// build_norm_gated: ggml_mul(ggml_mul(ggml_rms_norm(o), ssm_norm), ggml_silu(z)) per value
// head.
func TestHybridGatedNormMatchesGGML(t *testing.T) {
	lib := openHybridOracle(t)
	ctx := lib.NewCtx(64 << 20)
	defer ctx.Free()
	for _, tc := range []struct{ ds, hv, T int }{{64, 4, 9}, {128, 32, 3}, {20, 3, 2}} {
		r := rand.New(rand.NewPCG(uint64(tc.ds), uint64(tc.hv)))
		n := tc.ds * tc.hv * tc.T
		o := oracleFloats(r, n, 0.3)
		z := oracleFloats(r, n, 3)
		w := oracleFloats(r, tc.ds, 1)
		shape := []int64{int64(tc.ds), int64(tc.hv), int64(tc.T)}
		want := ctx.Compute(ctx.Mul(ctx.Mul(ctx.RMSNorm(ctx.F32(o, shape...), 1e-6), ctx.F32(w, int64(tc.ds))),
			ctx.Silu(ctx.F32(z, shape...))), 1, n)
		gatedRMSNorm(o, z, w, tc.ds, 1e-6)
		sameBits(t, fmt.Sprintf("gated norm ds=%d", tc.ds), o, want)
	}
}

// The sigmoid gates of full attention (ggml_mul(attn, ggml_sigmoid(gate))) and of the shared
// expert (ggml_sigmoid(ggml_mul_mat(ffn_gate_inp_shexp, h)), then ggml_mul with the shared
// expert's rows).
func TestHybridSigmoidGatesMatchGGML(t *testing.T) {
	lib := openHybridOracle(t)
	ctx := lib.NewCtx(64 << 20)
	defer ctx.Free()
	r := rand.New(rand.NewPCG(4, 4))
	const qd, T = 32 * 256, 5
	att := oracleFloats(r, qd*T, 1)
	gate := oracleFloats(r, qd*T, 4)
	want := ctx.Compute(ctx.Mul(ctx.F32(att, qd, T), ctx.Sigmoid(ctx.F32(gate, qd, T))), 1, qd*T)
	for i, g := range gate {
		att[i] *= sigmoid(g)
	}
	sameBits(t, "attention gate", att, want)

	for _, E := range []int{256, 2048, 1000, 1004, 1001, 1027, 20} {
		for _, T := range []int{1, 7, 32} {
			w := oracleFloats(r, E, 0.1)
			h := oracleFloats(r, E*T, 1)
			y := oracleFloats(r, E*T, 1)
			wantG := ctx.Compute(ctx.Sigmoid(ctx.MulMat(ctx.F32(w, int64(E), 1), ctx.F32(h, int64(E), int64(T)))), 1, T)
			wantY := ctx.Compute(ctx.Mul(ctx.F32(y, int64(E), int64(T)), ctx.Sigmoid(ctx.MulMat(ctx.F32(w, int64(E), 1), ctx.F32(h, int64(E), int64(T))))), 1, E*T)
			gotG := make([]float32, T)
			for tt := range gotG {
				gotG[tt] = sharedExpertGate(w, h[tt*E:(tt+1)*E])
				for i := tt * E; i < (tt+1)*E; i++ {
					y[i] *= gotG[tt]
				}
			}
			sameBits(t, fmt.Sprintf("shared expert gate E=%d T=%d", E, T), gotG, wantG)
			sameBits(t, fmt.Sprintf("gated shared expert E=%d T=%d", E, T), y, wantY)
		}
	}
}

// ggml_rope_multi in interleaved-section mode (GGML_ROPE_TYPE_IMROPE, what qwen35 uses) with
// text positions (t = h = w = pos, fourth stream 0) against hybridRopeCache + NEOX rotation
// of the first n_rot dims.
func TestHybridRopeMatchesGGML(t *testing.T) {
	lib := openHybridOracle(t)
	if libmName == "go" {
		t.Skip("the C library's cosf/sinf/logf could not be loaded")
	}
	const imrope = 40
	for _, tc := range []struct {
		hd, rot  int
		sections [4]int
		base     float64
		scaling  string
		factor   float64
	}{
		{256, 64, [4]int{11, 11, 10, 0}, 1e7, "none", 0}, // Qwen3.5 / 3.6
		{64, 16, [4]int{3, 3, 2, 0}, 1e7, "none", 0},     // the fixtures' shape
		{64, 32, [4]int{4, 4, 4, 4}, 1e6, "none", 0},     // a fourth (unrotated) section
		{128, 64, [4]int{8, 8, 8, 8}, 1e7, "yarn", 4},    // ... with YaRN's magnitude correction
		{128, 128, [4]int{24, 20, 20, 0}, 5e6, "none", 0},
	} {
		t.Run(fmt.Sprintf("hd=%d/rot=%d/%v/%s", tc.hd, tc.rot, tc.sections, tc.scaling), func(t *testing.T) {
			c := &Config{NRot: tc.rot, HeadDim: tc.hd, RopeBase: tc.base, RopeMode: RopeNeox, CtxTrain: 4096,
				Rope: RopeScaling{Type: tc.scaling, Factor: tc.factor, OrigCtx: 4096, AttnFactor: 1, YarnBetaFst: 32, YarnBetaSlw: 1}}
			p := newRopeParams(c, nil)
			ident := imropeIdentity(tc.sections, tc.rot/2)
			nIdent := 0
			for _, id := range ident {
				if id {
					nIdent++
				}
			}
			const heads, T = 4, 300
			r := rand.New(rand.NewPCG(uint64(tc.hd), uint64(tc.rot)))
			x := oracleFloats(r, tc.hd*heads*T, 1)
			pos := make([]int32, 4*T)
			for i := 0; i < T; i++ {
				p := int32(i * 131 % 200000)
				pos[i], pos[T+i], pos[2*T+i] = p, p, p
			}
			ctx := lib.NewCtx(64 << 20)
			defer ctx.Free()
			var secs [4]int32
			for i, s := range tc.sections {
				secs[i] = int32(s)
			}
			out := ctx.RopeMulti(ctx.F32(x, int64(tc.hd), heads, T), ctx.I32(pos, 4*T), ggml.Tensor{}, tc.rot, secs, imrope, 4096,
				float32(tc.base), p.freqScale, p.extFactor, p.attnFactor, 32, 1)
			want := ctx.Compute(out, 1, len(x))
			got := append([]float32(nil), x...)
			cs := make([]float32, tc.rot)
			for i := 0; i < T; i++ {
				hybridRopeCache(&p, ident, cs, int(pos[i]))
				for h := 0; h < heads; h++ {
					p.apply(got[(i*heads+h)*tc.hd:(i*heads+h+1)*tc.hd], cs)
				}
			}
			sameBits(t, fmt.Sprintf("rope_multi (%d unrotated pairs)", nIdent), got, want)
		})
	}
}
