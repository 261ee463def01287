package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
)

// The kernel suite compares every device operation with a float64 reference on random Gaussian
// and heavy-tailed (Student-t, ν = 3) inputs. It runs on a real GPU (TestGPUKernels, TQ_GPU=1) and
// on the CPU emulator of the CUDA execution model (TestEmulatedKernels). big selects
// production-like sizes (GPU only).
//
// Tolerances, stated per operation:
//   - MatMul: |y − ref| ≤ 1e-5 · Σ|w·x| (float32 accumulation of the dequantized products).
//   - RMSNorm: |y − ref| ≤ 4e-6 · |ref| + 1e-7 · max|ref|.
//   - RoPE: per rotated pair, ≤ m·(|x0|+|x1|)·(2e-6 + 8·ulp(θ)): the angle θ is a float32 (as in
//     ggml), so two evaluations may differ by a few ulps of θ; dimensions past n_rot are exact.
//   - SwiGLU: 4e-6 relative + 1e-30; Add/AddRows, gather/scatter: exact.
//   - Attention: |o − ref| ≤ 2e-5 · Σ_u p_u·|v_u| + 2^-10 · max_u p_u·|v_u| + 1e-6: probabilities
//     are rounded to f16 as in the CPU runner, and the second term allows one probability to land
//     on the other side of an f16 rounding boundary (one f16 ulp, 2^-10 relative).
//   - MoE routing: identical expert selection; weights 2e-6 relative. MoECombine: 1e-6 · Σ|w·y|.
func runKernelSuite(t *testing.T, d *Device, big bool) {
	t.Run("MatMul", func(t *testing.T) { testMatMul(t, d, big) })
	t.Run("MatMulExpertSlice", func(t *testing.T) { testMatMulExpert(t, d) })
	t.Run("RMSNorm", func(t *testing.T) { testRMSNorm(t, d, big) })
	t.Run("RoPE", func(t *testing.T) { testRoPE(t, d) })
	t.Run("Elementwise", func(t *testing.T) { testElementwise(t, d, big) })
	t.Run("Attention", func(t *testing.T) { testAttention(t, d, big) })
	t.Run("MoERoute", func(t *testing.T) { testMoERoute(t, d) })
	t.Run("FusedExperts", func(t *testing.T) { testFusedExperts(t, d) })
	t.Run("Rows", func(t *testing.T) { testRows(t, d) })
	t.Run("Hybrid", func(t *testing.T) { testHybrid(t, d, big) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, d) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, d) })
}

// ---- data ---------------------------------------------------------------------------------------

func gaussian(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// studentT draws heavy-tailed values (ν = 3), the shape of real LLM weights and activations.
func studentT(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		z := r.NormFloat64()
		chi := 0.0
		for range 3 {
			g := r.NormFloat64()
			chi += g * g
		}
		v[i] = float32(z / math.Sqrt(chi/3) * scale)
	}
	return v
}

func sample(r *rand.Rand, heavy bool, n int, scale float64) []float32 {
	if heavy {
		return studentT(r, n, scale)
	}
	return gaussian(r, n, scale)
}

func mustAlloc(t *testing.T, d *Device, v []float32) Buffer {
	t.Helper()
	b, err := d.UploadF32(v)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(b) })
	return b
}

func mustRead(t *testing.T, d *Device, b Buffer, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	if err := d.Read(out, b); err != nil {
		t.Fatal(err)
	}
	return out
}

func nan32() float32 { return float32(math.NaN()) }

func filled(n int, v float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// encode quantizes rows×cols floats to type ty and returns the bytes and their dequantized values.
func encode(t *testing.T, ty gguf.GGMLType, src []float32, rows, cols int) ([]byte, []float32) {
	t.Helper()
	rb, err := ty.RowBytes(int64(cols))
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, int(rb)*rows)
	if err := quant.Quantize(ty, data, src, rows, cols, nil); err != nil {
		t.Fatalf("quantize %s: %v", ty, err)
	}
	deq := make([]float32, rows*cols)
	if err := quant.Dequantize(ty, deq, data); err != nil {
		t.Fatalf("dequantize %s: %v", ty, err)
	}
	return data, deq
}

// ---- MatMul -------------------------------------------------------------------------------------

func testMatMul(t *testing.T, d *Device, big bool) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, ty := range mvTypes {
		var shapes [][2]int // {rows, cols}
		switch ty {
		case gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K:
			shapes = [][2]int{{37, 768}, {4, 256}}
			if big {
				shapes = append(shapes, [2]int{1027, 4096})
			}
		case gguf.TypeQ8_0, gguf.TypeQ4_0:
			shapes = [][2]int{{37, 160}, {5, 32}}
			if big {
				shapes = append(shapes, [2]int{1027, 4096})
			}
		default:
			shapes = [][2]int{{37, 100}, {6, 33}}
			if big {
				shapes = append(shapes, [2]int{1027, 4098})
			}
		}
		for si, sh := range shapes {
			rows, cols := sh[0], sh[1]
			heavy := si%2 == 0
			wsrc := sample(r, heavy, rows*cols, 0.05)
			data, deq := encode(t, ty, wsrc, rows, cols)
			w, err := d.Upload("w", ty, []int64{int64(cols), int64(rows)}, data)
			if err != nil {
				t.Fatal(err)
			}
			for _, T := range []int{1, 3, 8, 11} {
				x := sample(r, !heavy, T*cols, 1)
				xb := mustAlloc(t, d, x)
				// y is a view into a larger buffer pre-filled with NaN: writes outside it show.
				const pad = 5
				yall := mustAlloc(t, d, filled(T*rows+2*pad, nan32()))
				y := yall.Slice(pad, T*rows)
				if err := d.MatMul(y, w, 0, xb, T); err != nil {
					t.Fatalf("%s %dx%d T=%d: %v", ty, rows, cols, T, err)
				}
				got := mustRead(t, d, yall, T*rows+2*pad)
				for i := 0; i < pad; i++ {
					if !math.IsNaN(float64(got[i])) || !math.IsNaN(float64(got[pad+T*rows+i])) {
						t.Fatalf("%s T=%d: MatMul wrote outside y", ty, T)
					}
				}
				got = got[pad : pad+T*rows]
				worst := 0.0
				for tt := 0; tt < T; tt++ {
					for row := 0; row < rows; row++ {
						var ref, mag float64
						for i := 0; i < cols; i++ {
							p := float64(deq[row*cols+i]) * float64(x[tt*cols+i])
							ref += p
							mag += math.Abs(p)
						}
						g := float64(got[tt*rows+row])
						err := math.Abs(g - ref)
						if !(err <= 1e-5*mag+1e-30) {
							t.Fatalf("%s %dx%d T=%d: y[%d][%d] = %g, want %g (|err| %.3g > tol %.3g)", ty, rows, cols, T, tt, row, g, ref, err, 1e-5*mag)
						}
						if mag > 0 {
							worst = max(worst, err/mag)
						}
					}
				}
				t.Logf("%-5s %4dx%-4d T=%-2d max |err|/Σ|wx| = %.2e", ty, rows, cols, T, worst)
			}
			if err := d.FreeTensor(w); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// testMatMulExpert checks the matrix offset of a 3-D (expert-stacked) tensor.
func testMatMulExpert(t *testing.T, d *Device) {
	r := rand.New(rand.NewPCG(3, 4))
	const rows, cols, mats = 9, 512, 3
	src := studentT(r, mats*rows*cols, 0.05)
	data, deq := encode(t, gguf.TypeQ4_K, src, mats*rows, cols)
	w, err := d.Upload("experts", gguf.TypeQ4_K, []int64{cols, rows, mats}, data)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeTensor(w)
	x := gaussian(r, cols, 1)
	xb := mustAlloc(t, d, x)
	y := mustAlloc(t, d, make([]float32, rows))
	for e := 0; e < mats; e++ {
		if err := d.MatMul(y, w, e, xb, 1); err != nil {
			t.Fatal(err)
		}
		got := mustRead(t, d, y, rows)
		for row := 0; row < rows; row++ {
			var ref, mag float64
			for i := 0; i < cols; i++ {
				p := float64(deq[(e*rows+row)*cols+i]) * float64(x[i])
				ref += p
				mag += math.Abs(p)
			}
			if math.Abs(float64(got[row])-ref) > 1e-5*mag {
				t.Fatalf("expert %d row %d: %g want %g", e, row, got[row], ref)
			}
		}
	}
	if err := d.MatMul(y, w, mats, xb, 1); err == nil {
		t.Fatal("matrix index out of range accepted")
	}
}

// ---- RMSNorm ------------------------------------------------------------------------------------

func testRMSNorm(t *testing.T, d *Device, big bool) {
	r := rand.New(rand.NewPCG(5, 6))
	sizes := [][2]int{{1000, 3}, {128, 8}, {7, 1}}
	if big {
		sizes = append(sizes, [2]int{8192, 16})
	}
	for _, sz := range sizes {
		n, rows := sz[0], sz[1]
		for _, withW := range []bool{true, false} {
			for _, inPlace := range []bool{false, true} {
				x := studentT(r, n*rows, 2)
				wv := gaussian(r, n, 1)
				xb := mustAlloc(t, d, x)
				var wb Buffer
				if withW {
					wb = mustAlloc(t, d, wv)
				}
				yb := xb
				if !inPlace {
					yb = mustAlloc(t, d, make([]float32, n*rows))
				}
				const eps = 1e-6
				if err := d.RMSNorm(yb, xb, wb, n, rows, eps); err != nil {
					t.Fatal(err)
				}
				got := mustRead(t, d, yb, n*rows)
				for row := 0; row < rows; row++ {
					var ss float64
					for i := 0; i < n; i++ {
						ss += float64(x[row*n+i]) * float64(x[row*n+i])
					}
					scale := 1 / math.Sqrt(ss/float64(n)+eps)
					refs := make([]float64, n)
					mx := 0.0
					for i := range refs {
						refs[i] = float64(x[row*n+i]) * scale
						if withW {
							refs[i] *= float64(wv[i])
						}
						mx = max(mx, math.Abs(refs[i]))
					}
					for i, ref := range refs {
						if g := float64(got[row*n+i]); !(math.Abs(g-ref) <= 4e-6*math.Abs(ref)+1e-7*mx) {
							t.Fatalf("n=%d w=%v inplace=%v: y[%d][%d] = %g want %g", n, withW, inPlace, row, i, g, ref)
						}
					}
				}
			}
		}
	}
}

// ---- RoPE ---------------------------------------------------------------------------------------

// ropeRef mirrors package infer's ropeParams.cache (float32 arithmetic, float64 cos/sin) and
// returns the angle and cos/sin·mscale of every pair at position pos.
func ropeRef(r *Rope, freqs []float32, pos int) (theta, c, s []float64) {
	th := float32(pos)
	for i0 := 0; i0 < r.NRot; i0 += 2 {
		ff := float32(1)
		if freqs != nil {
			ff = freqs[i0/2]
		}
		extrap := th / ff
		interp := r.FreqScale * extrap
		a := interp
		ms := r.AttnFactor
		if r.ExtFactor != 0 {
			y := (float32(i0/2) - r.Corr[0]) / max(0.001, r.Corr[1]-r.Corr[0])
			ramp := (1 - min(1, max(0, y))) * r.ExtFactor
			a = interp*(1-ramp) + extrap*ramp
			ms *= 1 + 0.1*float32(math.Log(float64(1/r.FreqScale)))
		}
		theta = append(theta, float64(a))
		c = append(c, float64(float32(math.Cos(float64(a)))*ms))
		s = append(s, float64(float32(math.Sin(float64(a)))*ms))
		th *= r.ThetaScale
	}
	return
}

func ulp32(v float64) float64 {
	f := float32(math.Abs(v))
	return float64(math.Nextafter32(f, float32(math.Inf(1))) - f)
}

func testRoPE(t *testing.T, d *Device) {
	r := rand.New(rand.NewPCG(7, 8))
	const hd, nheads, T = 64, 3, 3
	for _, tc := range []struct {
		name      string
		neox      bool
		nrot      int
		pos0      int
		withFreqs bool
		yarn      bool
	}{
		{"neox", true, 64, 0, false, false},
		{"norm", false, 64, 997, false, false},
		{"neox-partial", true, 32, 40, false, false},
		{"norm-freqs", false, 64, 300, true, false},
		{"neox-yarn", true, 64, 2000, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := &Rope{NeoX: tc.neox, NRot: tc.nrot, FreqScale: 1, AttnFactor: 1,
				ThetaScale: float32(math.Pow(1e6, -2/float64(tc.nrot)))}
			var freqs []float32
			if tc.withFreqs {
				freqs = make([]float32, tc.nrot/2)
				for i := range freqs {
					freqs[i] = 1 + 3*r.Float32()
				}
				rp.Freqs = mustAlloc(t, d, freqs)
			}
			if tc.yarn {
				rp.ExtFactor, rp.FreqScale, rp.AttnFactor, rp.Corr = 1, 0.25, 0.9, [2]float32{2, 20}
			}
			x := studentT(r, T*nheads*hd, 1)
			xb := mustAlloc(t, d, x)
			if err := d.RoPE(xb, T, nheads, hd, tc.pos0, rp); err != nil {
				t.Fatal(err)
			}
			got := mustRead(t, d, xb, len(x))
			for tt := 0; tt < T; tt++ {
				theta, c, s := ropeRef(rp, freqs, tc.pos0+tt)
				for h := 0; h < nheads; h++ {
					base := (tt*nheads + h) * hd
					for i := 0; i < tc.nrot/2; i++ {
						a, b := base+2*i, base+2*i+1
						if tc.neox {
							a, b = base+i, base+i+tc.nrot/2
						}
						x0, x1 := float64(x[a]), float64(x[b])
						r0, r1 := x0*c[i]-x1*s[i], x0*s[i]+x1*c[i]
						mag := math.Hypot(c[i], s[i]) * (math.Abs(x0) + math.Abs(x1))
						tol := mag * (2e-6 + 8*ulp32(theta[i]))
						if math.Abs(float64(got[a])-r0) > tol || math.Abs(float64(got[b])-r1) > tol {
							t.Fatalf("t=%d head %d pair %d: got (%g, %g) want (%g, %g), tol %.2g", tt, h, i, got[a], got[b], r0, r1, tol)
						}
					}
					for i := tc.nrot; i < hd; i++ {
						idx := base + i
						if tc.neox {
							// NEOX rotates [0, nrot); the rest is copied.
							idx = base + i
						}
						if got[idx] != x[idx] {
							t.Fatalf("dimension %d past n_rot changed: %g -> %g", i, x[idx], got[idx])
						}
					}
				}
			}
		})
	}
}

// ---- element-wise -------------------------------------------------------------------------------

func testElementwise(t *testing.T, d *Device, big bool) {
	r := rand.New(rand.NewPCG(9, 10))
	n := 1000
	if big {
		n = 1 << 22
	}
	g := studentT(r, n, 4)
	u := gaussian(r, n, 1)
	gb, ub := mustAlloc(t, d, g), mustAlloc(t, d, u)
	if err := d.SwiGLU(gb, ub, n); err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, d, gb, n)
	for i := range got {
		v := float64(g[i])
		ref := v / (1 + math.Exp(-v)) * float64(u[i])
		// Below v ≈ −88, e^−v overflows float32 and silu(v) becomes 0 (as in the CPU runner);
		// the float64 reference still gives values of ~1e-37 there.
		if !(math.Abs(float64(got[i])-ref) <= 4e-6*math.Abs(ref)+1e-30) {
			t.Fatalf("swiglu[%d](%g, %g) = %g want %g", i, g[i], u[i], got[i], ref)
		}
	}

	x := studentT(r, n, 1)
	y := studentT(r, n, 1)
	xb, yb := mustAlloc(t, d, x), mustAlloc(t, d, y)
	if err := d.Add(yb, xb, n); err != nil {
		t.Fatal(err)
	}
	got = mustRead(t, d, yb, n)
	for i := range got {
		if got[i] != y[i]+x[i] {
			t.Fatalf("add[%d] = %g want %g", i, got[i], y[i]+x[i])
		}
	}

	const cols, T = 300, 5
	bias := gaussian(r, cols, 1)
	m := gaussian(r, cols*T, 1)
	bb, mb := mustAlloc(t, d, bias), mustAlloc(t, d, m)
	if err := d.AddRows(mb, bb, cols, T); err != nil {
		t.Fatal(err)
	}
	got = mustRead(t, d, mb, cols*T)
	for i := range got {
		if want := m[i] + bias[i%cols]; got[i] != want {
			t.Fatalf("add_rows[%d] = %g want %g", i, got[i], want)
		}
	}
}

// ---- attention ----------------------------------------------------------------------------------

func f16round(v float32) float64 { return float64(quant.FP16ToFP32(quant.FP32ToFP16(v))) }

func testAttention(t *testing.T, d *Device, big bool) {
	r := rand.New(rand.NewPCG(11, 12))
	type cfg struct{ nhead, nkv, hd, ctx, pos0, T int }
	cfgs := []cfg{{6, 2, 64, 40, 17, 3}, {4, 4, 96, 24, 0, 5}, {2, 1, 128, 300, 270, 2}, {2, 1, 256, 20, 12, 2}, {3, 1, 40, 30, 9, 2}}
	if big {
		cfgs = append(cfgs, cfg{32, 8, 128, 4096, 4000, 4}, cfg{16, 2, 256, 1024, 1000, 3})
	}
	types := [][2]gguf.GGMLType{{gguf.TypeF16, gguf.TypeF16}, {gguf.TypeQ8_0, gguf.TypeQ8_0}, {gguf.TypeQ8_0, gguf.TypeF16}, {gguf.TypeF16, gguf.TypeQ8_0}}
	for ci, c := range cfgs {
		kt, vt := types[ci%len(types)][0], types[ci%len(types)][1]
		if ci == 0 {
			kt, vt = gguf.TypeQ8_0, gguf.TypeQ8_0 // the first (GQA) case with both types below too
		}
		testAttentionTypes(t, d, r, c.nhead, c.nkv, c.hd, c.ctx, c.pos0, c.T, kt, vt)
		if ci == 0 {
			testAttentionTypes(t, d, r, c.nhead, c.nkv, c.hd, c.ctx, c.pos0, c.T, gguf.TypeF16, gguf.TypeF16)
		}
	}
}

// cacheRound returns x as a cache of type t holds it: f16-rounded, or q8_0-quantized per 32
// values by ggml's reference quantizer and dequantized.
func cacheRound(t *testing.T, ty gguf.GGMLType, x []float32) []float64 {
	out := make([]float64, len(x))
	if ty == gguf.TypeF16 {
		for i, v := range x {
			out[i] = f16round(v)
		}
		return out
	}
	_, deq := encode(t, ty, x, 1, len(x))
	for i, v := range deq {
		out[i] = float64(v)
	}
	return out
}

// testAttentionTypes checks one attention shape with key and value caches of types kt and vt
// against a float64 reference that rounds as the CPU runner does: the query to the key type (f16,
// or q8_0 blocks), the cached keys and values to their types, and the probabilities to f16 for an
// f16 value cache.
func testAttentionTypes(t *testing.T, d *Device, r *rand.Rand, nhead, nkv, hd, ctx, pos0, T int, kt, vt gguf.GGMLType) {
	c := struct{ nhead, nkv, hd, ctx, pos0, T int }{nhead, nkv, hd, ctx, pos0, T}
	{
		kvd := c.nkv * c.hd
		const layers = 2
		cache, err := d.NewKVCache(layers, c.ctx, kvd, kt, vt)
		if err != nil {
			t.Fatal(err)
		}
		n := c.pos0 + c.T
		K := [layers][]float32{}
		V := [layers][]float32{}
		for l := 0; l < layers; l++ {
			K[l], V[l] = studentT(r, n*kvd, 1), studentT(r, n*kvd, 1)
			// Store in two calls: the prefix, then the batch being evaluated.
			for _, part := range [][2]int{{0, c.pos0}, {c.pos0, c.T}} {
				if part[1] == 0 {
					continue
				}
				kb := mustAlloc(t, d, K[l][part[0]*kvd:(part[0]+part[1])*kvd])
				vb := mustAlloc(t, d, V[l][part[0]*kvd:(part[0]+part[1])*kvd])
				if err := d.KVStore(cache, l, part[0], part[1], kb, vb); err != nil {
					t.Fatal(err)
				}
			}
		}
		qd := c.nhead * c.hd
		// Small queries give near-uniform attention (every position matters), large ones peaky.
		for _, qscale := range []float64{0.3, 3} {
			q := gaussian(r, c.T*qd, qscale)
			qb := mustAlloc(t, d, q)
			ob := mustAlloc(t, d, make([]float32, c.T*qd))
			const layer = 1
			if err := d.Attention(ob, qb, cache, layer, c.pos0, c.T, c.nhead, c.nkv, c.hd); err != nil {
				t.Fatal(err)
			}
			got := mustRead(t, d, ob, c.T*qd)
			scale := 1 / math.Sqrt(float64(c.hd))
			Kr, Vr := cacheRound(t, kt, K[layer]), cacheRound(t, vt, V[layer])
			qr := cacheRound(t, kt, q)
			for tt := 0; tt < c.T; tt++ {
				L := c.pos0 + tt + 1
				for h := 0; h < c.nhead; h++ {
					g := h / (c.nhead / c.nkv)
					sc := make([]float64, L)
					mx := math.Inf(-1)
					for u := 0; u < L; u++ {
						var dot float64
						for i := 0; i < c.hd; i++ {
							dot += qr[tt*qd+h*c.hd+i] * Kr[u*kvd+g*c.hd+i]
						}
						sc[u] = dot * scale
						mx = max(mx, sc[u])
					}
					var sum float64
					for u := range sc {
						sc[u] = math.Exp(sc[u] - mx)
						sum += sc[u]
					}
					for i := 0; i < c.hd; i++ {
						var o, mag, big float64
						for u := 0; u < L; u++ {
							p := sc[u] / sum
							if vt == gguf.TypeF16 {
								p = f16round(float32(p))
							}
							v := Vr[u*kvd+g*c.hd+i]
							o += p * v
							mag += sc[u] / sum * math.Abs(v)
							big = max(big, p*math.Abs(v))
						}
						gv := float64(got[(tt*c.nhead+h)*c.hd+i])
						if tol := 2e-5*mag + big/1024 + 1e-6; !(math.Abs(gv-o) <= tol) {
							t.Fatalf("%+v %s/%s q×%g: out[t=%d][h=%d][%d] = %g want %g (tol %.3g)", c, kt, vt, qscale, tt, h, i, gv, o, tol)
						}
					}
				}
			}
		}
		if err := d.FreeKVCache(cache); err != nil {
			t.Fatal(err)
		}
	}
}

// ---- MoE ----------------------------------------------------------------------------------------

func testMoERoute(t *testing.T, d *Device) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, tc := range []struct{ T, nexp, k int }{{5, 60, 4}, {3, 128, 8}, {2, 8, 1}, {1, 1024, 16}, {1, 64, 64}} {
		for _, renorm := range []bool{true, false} {
			logits := distinctLogits(r, tc.T, tc.nexp)
			lb := mustAlloc(t, d, logits)
			sel := make([]int32, tc.T*tc.k)
			w := make([]float32, tc.T*tc.k)
			if err := d.MoERoute(lb, tc.T, tc.nexp, tc.k, renorm, sel, w); err != nil {
				t.Fatal(err)
			}
			for tt := 0; tt < tc.T; tt++ {
				wantSel, wantW := routeRef(logits[tt*tc.nexp:(tt+1)*tc.nexp], tc.k, renorm)
				for j := 0; j < tc.k; j++ {
					if sel[tt*tc.k+j] != wantSel[j] {
						t.Fatalf("%+v renorm=%v token %d: sel %v want %v", tc, renorm, tt, sel[tt*tc.k:(tt+1)*tc.k], wantSel)
					}
					if g := float64(w[tt*tc.k+j]); math.Abs(g-wantW[j]) > 2e-6*wantW[j]+1e-12 {
						t.Fatalf("%+v renorm=%v token %d slot %d: w %g want %g", tc, renorm, tt, j, g, wantW[j])
					}
				}
			}
		}
	}
	// Ties: equal logits pick the lowest indices, in order.
	const nexp, k = 40, 5
	lb := mustAlloc(t, d, filled(nexp, 0.5))
	sel := make([]int32, k)
	w := make([]float32, k)
	if err := d.MoERoute(lb, 1, nexp, k, true, sel, w); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sel, []int32{0, 1, 2, 3, 4}) {
		t.Fatalf("ties: sel %v", sel)
	}
	for _, v := range w {
		if math.Abs(float64(v)-0.2) > 1e-6 {
			t.Fatalf("ties: w %v", w)
		}
	}
	// Non-finite logits give no valid expert: an error, not an out-of-range index.
	bad := mustAlloc(t, d, filled(nexp, nan32()))
	if err := d.MoERoute(bad, 1, nexp, k, true, sel, w); err == nil || !strings.Contains(err.Error(), "no valid expert") {
		t.Fatalf("NaN logits: %v", err)
	}
}

// distinctLogits draws T rows of n router logits whose values are at least half a grid step
// apart, so that the float32 and float64 expert orders agree: a random permutation of a grid of
// step max(0.01, 6/n) with jitter of at most ±step/4.
func distinctLogits(r *rand.Rand, T, n int) []float32 {
	step := max(0.01, 6/float64(n))
	out := make([]float32, 0, T*n)
	for range T {
		for _, k := range r.Perm(n) {
			out = append(out, float32((float64(k)-float64(n)/2)*step+(r.Float64()-0.5)*step/2))
		}
	}
	return out
}

func routeRef(logits []float32, k int, renorm bool) ([]int32, []float64) {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	p := make([]float64, len(logits))
	var sum float64
	for i, v := range logits {
		p[i] = math.Exp(float64(v) - mx)
		sum += p[i]
	}
	idx := make([]int, len(p))
	for i := range idx {
		p[i] /= sum
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] > p[idx[b]] })
	sel := make([]int32, k)
	w := make([]float64, k)
	var s float64
	for j := 0; j < k; j++ {
		sel[j] = int32(idx[j])
		s += p[idx[j]]
	}
	for j := 0; j < k; j++ {
		w[j] = p[idx[j]]
		if renorm {
			w[j] /= max(s, 6.103515625e-5)
		}
	}
	return sel, w
}

// ---- gather, scatter, combine -------------------------------------------------------------------

func testRows(t *testing.T, d *Device) {
	r := rand.New(rand.NewPCG(15, 16))
	const n, srcRows = 300, 7
	src := gaussian(r, n*srcRows, 1)
	sb := mustAlloc(t, d, src)
	idx := []int32{3, 0, 6, 6, 2}
	dst := mustAlloc(t, d, make([]float32, len(idx)*n))
	if err := d.GatherRows(dst, sb, idx, n); err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, d, dst, len(idx)*n)
	for j, row := range idx {
		if !slices.Equal(got[j*n:(j+1)*n], src[int(row)*n:int(row+1)*n]) {
			t.Fatalf("gather row %d", j)
		}
	}

	init := gaussian(r, n*srcRows, 1)
	db := mustAlloc(t, d, init)
	sIdx := []int32{4, 1, 0}
	if err := d.ScatterRows(db, sb, sIdx, n); err != nil {
		t.Fatal(err)
	}
	got = mustRead(t, d, db, n*srcRows)
	want := slices.Clone(init)
	for j, row := range sIdx {
		copy(want[int(row)*n:], src[j*n:(j+1)*n])
	}
	if !slices.Equal(got, want) {
		t.Fatal("scatter result differs")
	}
	if err := d.GatherRows(dst, sb, []int32{7}, n); err == nil {
		t.Fatal("gather index out of range accepted")
	}

	const T, k = 3, 2
	slot := studentT(r, T*k*n, 1)
	w := []float32{0.7, 0.3, 0.5, 0.5, 1, 0}
	slb := mustAlloc(t, d, slot)
	out := mustAlloc(t, d, make([]float32, T*n))
	if err := d.MoECombine(out, slb, w, T, k, n); err != nil {
		t.Fatal(err)
	}
	got = mustRead(t, d, out, T*n)
	for tt := 0; tt < T; tt++ {
		for i := 0; i < n; i++ {
			var ref, mag float64
			for j := 0; j < k; j++ {
				p := float64(w[tt*k+j]) * float64(slot[(tt*k+j)*n+i])
				ref += p
				mag += math.Abs(p)
			}
			if math.Abs(float64(got[tt*n+i])-ref) > 1e-6*mag {
				t.Fatalf("combine[%d][%d] = %g want %g", tt, i, got[tt*n+i], ref)
			}
		}
	}
}

// ---- argument checking --------------------------------------------------------------------------

func testErrors(t *testing.T, d *Device) {
	x := mustAlloc(t, d, make([]float32, 1024))
	y := mustAlloc(t, d, make([]float32, 1024))
	r := rand.New(rand.NewPCG(17, 18))
	data, _ := encode(t, gguf.TypeQ4_1, gaussian(r, 4*64, 1), 4, 64)
	q41, err := d.Upload("q41", gguf.TypeQ4_1, []int64{64, 4}, data)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeTensor(q41)
	data, _ = encode(t, gguf.TypeQ8_0, gaussian(r, 4*64, 1), 4, 64)
	q80, err := d.Upload("q80", gguf.TypeQ8_0, []int64{64, 4}, data)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeTensor(q80)
	cache, err := d.NewKVCache(1, 8, 64, gguf.TypeF16, gguf.TypeF16)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeKVCache(cache)
	for _, c := range []struct {
		name, want string
		err        error
	}{
		{"unsupported type", "no kernel for weight type q4_1", d.MatMul(y, q41, 0, x, 1)},
		{"misaligned x", "16-byte aligned", d.MatMul(y, q80, 0, x.Slice(1, 128), 1)},
		{"short x", "x holds 32 elements, need 64", d.MatMul(y, q80, 0, x.Slice(0, 32), 1)},
		{"zero T", "out of range", d.MatMul(y, q80, 0, x, 0)},
		{"upload size", "has 10 bytes, want", func() error { _, err := d.Upload("w", gguf.TypeQ8_0, []int64{64, 4}, make([]byte, 10)); return err }()},
		{"upload dims", "dimension 1 is 0", func() error { _, err := d.Upload("w", gguf.TypeF32, []int64{4, 0}, nil); return err }()},
		{"upload block", "", func() error { _, err := d.Upload("w", gguf.TypeQ8_0, []int64{33, 1}, make([]byte, 34)); return err }()},
		{"attention past ctx", "outside the cache", d.Attention(y, x, cache, 0, 7, 2, 2, 1, 64)},
		{"attention heads", "do not fit", d.Attention(y, x, cache, 0, 0, 1, 2, 2, 64)},
		{"attention layer", "no layer 1", d.Attention(y, x, cache, 1, 0, 1, 1, 1, 64)},
		{"kv store", "outside the cache", d.KVStore(cache, 0, 8, 1, x, x)},
		{"moe k", "top 9", d.MoERoute(x, 1, 8, 9, true, make([]int32, 9), make([]float32, 9))},
		{"rope odd", "bad rotation width", d.RoPE(x, 1, 1, 64, 0, &Rope{NRot: 63})},
		{"rope wide", "bad rotation width", d.RoPE(x, 1, 1, 64, 0, &Rope{NRot: 66})},
		{"free slice", "not an allocation", d.Free(x.Slice(1, 2))},
		{"rmsnorm short", "need 2048", d.RMSNorm(y, x, Buffer{}, 1024, 2, 1e-6)},
		{"write long", "into a buffer of 3", d.Write(x.Slice(0, 3), make([]float32, 4))},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, c.err, c.want)
		}
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("device unusable after rejected calls: %v", err)
	}
}

// testConcurrent drives the device from several goroutines at once: each call must find the
// device's context current on whatever OS thread it runs, and results must not mix.
func testConcurrent(t *testing.T, d *Device) {
	r := rand.New(rand.NewPCG(19, 20))
	const rows, cols, workers, rounds = 16, 256, 4, 5
	data, deq := encode(t, gguf.TypeQ8_0, gaussian(r, rows*cols, 0.1), rows, cols)
	w, err := d.Upload("w", gguf.TypeQ8_0, []int64{cols, rows}, data)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeTensor(w)
	xs := make([][]float32, workers)
	for i := range xs {
		xs[i] = gaussian(r, cols, 1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs <- func() error {
				xb, err := d.UploadF32(xs[i])
				if err != nil {
					return err
				}
				defer d.Free(xb)
				yb, err := d.Alloc(rows)
				if err != nil {
					return err
				}
				defer d.Free(yb)
				y := make([]float32, rows)
				for range rounds {
					if err := d.MatMul(yb, w, 0, xb, 1); err != nil {
						return err
					}
					if err := d.Read(y, yb); err != nil {
						return err
					}
					for row := 0; row < rows; row++ {
						var ref, mag float64
						for c := 0; c < cols; c++ {
							p := float64(deq[row*cols+c]) * float64(xs[i][c])
							ref += p
							mag += math.Abs(p)
						}
						if math.Abs(float64(y[row])-ref) > 1e-5*mag {
							return fmt.Errorf("worker %d row %d: %g want %g", i, row, y[row], ref)
						}
					}
				}
				return nil
			}()
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
