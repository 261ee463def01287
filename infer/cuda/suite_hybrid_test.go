package cuda

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// The hybrid (qwen35 / qwen35moe) operations against float64 references, as part of the kernel
// suite (runKernelSuite). Tolerances:
//   - SSMConv: |out − ref| ≤ 4e-6·|ref| + 2e-6·Σ_i|w_i·u_i| (K float32 products summed, then
//     SiLU, whose slope is at most 1.1); the rolled state is copied, so it is exact.
//   - L2NormHeads: 4e-6 relative (a float32 sum of squares, a square root and a reciprocal);
//     values past the normalised heads are untouched (exact).
//   - DeltaNetGates: β 4e-6 relative; g: 2e-5 relative + 1e-6·|ssm_a| (logf(1+expf(v)) in
//     float32 as the CPU runner computes it: for v near −9 the sum 1+e^v keeps only ~13 bits of
//     e^v, which the absolute term covers).
//   - DeltaRule: per token and head, |o − ref| ≤ 1e-4·max_j|ref_j| + 1e-6: float32 dot products of
//     DState terms on a state that carries every earlier token's rounding (the decays < 1 and
//     the normalised keys keep the state bounded); the state itself after the calls to
//     1e-4·max|S| + 1e-6.
//   - SplitHeads, Zero: exact. SigmoidMul, RowSigmoidScale: 4e-6 relative.
func testHybrid(t *testing.T, d *Device, big bool) {
	for _, heavy := range []bool{false, true} {
		r := rand.New(rand.NewPCG(41, 42))
		testSSMConv(t, d, r, heavy)
		testL2Norm(t, d, r, heavy)
		for _, chunked := range []bool{false, true} {
			shape := DeltaNetShape{DState: 64, NKHeads: 2, NVHeads: 4}
			if big {
				shape = DeltaNetShape{DState: 128, NKHeads: 16, NVHeads: 32}
			}
			testDeltaRule(t, d, r, heavy, shape, chunked)
			// a head size that is no multiple of the recurrent kernel's 4 threads per column,
			// its 8-element batches or a warp
			testDeltaRule(t, d, r, heavy, DeltaNetShape{DState: 37, NKHeads: 1, NVHeads: 2}, chunked)
		}
	}
	r := rand.New(rand.NewPCG(43, 44))
	testDeltaNetGates(t, d, r)
	testHybridElementwise(t, d, r)
	testHybridErrors(t, d)
}

func silu64(v float64) float64 { return v / (1 + math.Exp(-v)) }

func testSSMConv(t *testing.T, d *Device, r *rand.Rand, heavy bool) {
	const C, K = 300, 4
	w := sample(r, heavy, C*K, 0.5)
	wb := mustAlloc(t, d, w)
	state := mustAlloc(t, d, make([]float32, (K-1)*C))
	// three calls: 5 tokens, 1 token, 2 tokens (fewer than K−1: the state keeps an older row)
	var all []float32 // every input row so far, after K−1 zero rows
	all = append(all, make([]float32, (K-1)*C)...)
	for _, T := range []int{5, 1, 2} {
		x := sample(r, heavy, T*C, 1)
		all = append(all, x...)
		xb := mustAlloc(t, d, x)
		ob := mustAlloc(t, d, make([]float32, T*C))
		if err := d.SSMConv(ob, xb, state, wb, T, C, K); err != nil {
			t.Fatal(err)
		}
		got := mustRead(t, d, ob, T*C)
		base := len(all)/C - T - (K - 1) // row of u where this call's first window starts
		for tt := 0; tt < T; tt++ {
			for c := 0; c < C; c++ {
				var s, mag float64
				for i := 0; i < K; i++ {
					p := float64(w[c*K+i]) * float64(all[(base+tt+i)*C+c])
					s += p
					mag += math.Abs(p)
				}
				ref := silu64(s)
				if g := float64(got[tt*C+c]); !(math.Abs(g-ref) <= 4e-6*math.Abs(ref)+2e-6*mag) {
					t.Fatalf("ssm_conv (heavy %v, T %d) row %d channel %d = %g, want %g", heavy, T, tt, c, g, ref)
				}
			}
		}
		st := mustRead(t, d, state, (K-1)*C)
		want := all[len(all)-(K-1)*C:]
		for i := range st {
			if st[i] != want[i] {
				t.Fatalf("ssm_conv state[%d] = %g, want %g (the last %d rows of the input)", i, st[i], want[i], K-1)
			}
		}
	}
}

func testL2Norm(t *testing.T, d *Device, r *rand.Rand, heavy bool) {
	const dh, heads, T, stride = 64, 4, 3, 300
	x := sample(r, heavy, T*stride, 1)
	copy(x[stride:stride+dh], make([]float32, dh)) // an all-zero head: divided by eps, stays 0
	xb := mustAlloc(t, d, x)
	const eps = 1e-6
	if err := d.L2NormHeads(xb, dh, heads, T, stride, eps); err != nil {
		t.Fatal(err)
	}
	got := mustRead(t, d, xb, T*stride)
	for tt := 0; tt < T; tt++ {
		for h := 0; h < heads; h++ {
			v := x[tt*stride+h*dh : tt*stride+(h+1)*dh]
			var ss float64
			for _, e := range v {
				ss += float64(e) * float64(e)
			}
			n := math.Max(math.Sqrt(ss), eps)
			for i, e := range v {
				ref := float64(e) / n
				if g := float64(got[tt*stride+h*dh+i]); !(math.Abs(g-ref) <= 4e-6*math.Abs(ref)+1e-30) {
					t.Fatalf("l2norm row %d head %d [%d] = %g, want %g", tt, h, i, g, ref)
				}
			}
		}
		for i := heads * dh; i < stride; i++ {
			if got[tt*stride+i] != x[tt*stride+i] {
				t.Fatalf("l2norm changed row %d value %d past the heads", tt, i)
			}
		}
	}
}

func testDeltaNetGates(t *testing.T, d *Device, r *rand.Rand) {
	const hv, T = 6, 7
	b := gaussian(r, hv*T, 3)
	a := gaussian(r, hv*T, 4)
	a[0], a[1] = 25, -9 // past softplus's threshold; a small one
	dt := gaussian(r, hv, 1)
	A := gaussian(r, hv, 2)
	bb, ab, db, Ab := mustAlloc(t, d, b), mustAlloc(t, d, a), mustAlloc(t, d, dt), mustAlloc(t, d, A)
	if err := d.DeltaNetGates(bb, ab, db, Ab, hv, T); err != nil {
		t.Fatal(err)
	}
	gb, ga := mustRead(t, d, bb, hv*T), mustRead(t, d, ab, hv*T)
	for i := range b {
		j := i % hv
		refB := 1 / (1 + math.Exp(-float64(b[i])))
		v := float64(a[i] + dt[j])
		sp := v
		if v <= 20 {
			sp = math.Log1p(math.Exp(v))
		}
		refG := sp * float64(A[j])
		if !(math.Abs(float64(gb[i])-refB) <= 4e-6*refB) {
			t.Fatalf("beta[%d] = %g, want %g", i, gb[i], refB)
		}
		if !(math.Abs(float64(ga[i])-refG) <= 2e-5*math.Abs(refG)+1e-6*math.Abs(float64(A[j]))) {
			t.Fatalf("g[%d] (a %g) = %g, want %g", i, a[i], ga[i], refG)
		}
	}
}

// deltaRuleRef runs the delta rule in float64 on the host: S[h] is DState×DState, S[h][a][j].
func deltaRuleRef(S [][]float64, qkv, beta, g []float32, T int, s DeltaNetShape, scale float64) []float64 {
	ds, hk, hv := s.DState, s.NKHeads, s.NVHeads
	kdim := hk * ds
	out := make([]float64, T*hv*ds)
	for t := 0; t < T; t++ {
		row := qkv[t*s.Stride:]
		for h := 0; h < hv; h++ {
			kh := h % hk
			q, k, v := row[kh*ds:], row[kdim+kh*ds:], row[2*kdim+h*ds:]
			decay := math.Exp(float64(g[t*hv+h]))
			b := float64(beta[t*hv+h])
			M := S[h]
			for i := range M {
				M[i] *= decay
			}
			for j := 0; j < ds; j++ {
				var sk float64
				for a := 0; a < ds; a++ {
					sk += M[a*ds+j] * float64(k[a])
				}
				delta := (float64(v[j]) - sk) * b
				var sq float64
				for a := 0; a < ds; a++ {
					M[a*ds+j] += float64(k[a]) * delta
					sq += M[a*ds+j] * float64(q[a])
				}
				out[t*hv*ds+h*ds+j] = sq * scale
			}
		}
	}
	return out
}

// testDeltaRule runs the recurrent kernel (chunked false) or the chunked one for heads of shape s
// on calls of 6, 1, 37 (three chunks, the last partial) and 3 tokens, the state carried from
// call to call.
func testDeltaRule(t *testing.T, d *Device, r *rand.Rand, heavy bool, s DeltaNetShape, chunked bool) {
	ds, hk, hv := s.DState, s.NKHeads, s.NVHeads
	kdim, vd := hk*ds, hv*ds
	s.Stride = 2*kdim + vd + 3 // rows wider than q|k|v, as a strided view would be
	scale := 1 / math.Sqrt(float64(ds))
	state := mustAlloc(t, d, make([]float32, s.StateLen()))
	ref := make([][]float64, hv)
	for h := range ref {
		ref[h] = make([]float64, ds*ds)
	}
	for call, T := range []int{6, 1, 37, 3} {
		qkv := sample(r, heavy, T*s.Stride, 1)
		for tt := 0; tt < T; tt++ { // L2-normalised query and key heads, as the layer feeds them
			for h := 0; h < 2*hk; h++ {
				v := qkv[tt*s.Stride+h*ds : tt*s.Stride+(h+1)*ds]
				var ss float64
				for _, e := range v {
					ss += float64(e) * float64(e)
				}
				for i := range v {
					v[i] = float32(float64(v[i]) / math.Sqrt(ss))
				}
			}
		}
		beta := make([]float32, T*hv)
		g := make([]float32, T*hv)
		for i := range beta {
			beta[i] = float32(1 / (1 + math.Exp(-r.NormFloat64()*2)))
			g[i] = float32(-math.Abs(r.NormFloat64()) * 0.5)
		}
		qb, bb, gb := mustAlloc(t, d, qkv), mustAlloc(t, d, beta), mustAlloc(t, d, g)
		ob := mustAlloc(t, d, make([]float32, T*vd))
		if err := d.deltaRule(ob, qb, bb, gb, state, T, s, float32(scale), chunked); err != nil {
			t.Fatal(err)
		}
		got := mustRead(t, d, ob, T*vd)
		want := deltaRuleRef(ref, qkv, beta, g, T, s, scale)
		for tt := 0; tt < T; tt++ {
			for h := 0; h < hv; h++ {
				o := want[tt*vd+h*ds : tt*vd+(h+1)*ds]
				var m float64
				for _, v := range o {
					m = math.Max(m, math.Abs(v))
				}
				for j, v := range o {
					if gv := float64(got[tt*vd+h*ds+j]); !(math.Abs(gv-v) <= 1e-4*m+1e-6) {
						t.Fatalf("delta rule (chunked %v, heavy %v, call %d) token %d head %d [%d] = %g, want %g (head max %g)", chunked, heavy, call, tt, h, j, gv, v, m)
					}
				}
			}
		}
	}
	st := mustRead(t, d, state, s.StateLen())
	for h := 0; h < hv; h++ {
		var m float64
		for _, v := range ref[h] {
			m = math.Max(m, math.Abs(v))
		}
		for i, v := range ref[h] {
			if gv := float64(st[h*ds*ds+i]); !(math.Abs(gv-v) <= 1e-4*m+1e-6) {
				t.Fatalf("delta rule (chunked %v) state head %d [%d] = %g, want %g", chunked, h, i, gv, v)
			}
		}
	}
	if err := d.Zero(state, s.StateLen()); err != nil {
		t.Fatal(err)
	}
	for i, v := range mustRead(t, d, state, s.StateLen()) {
		if v != 0 {
			t.Fatalf("state[%d] = %g after Zero", i, v)
		}
	}
}

func testHybridElementwise(t *testing.T, d *Device, r *rand.Rand) {
	const hd, heads, T = 8, 3, 4
	src := gaussian(r, T*heads*2*hd, 1)
	sb := mustAlloc(t, d, src)
	ab := mustAlloc(t, d, make([]float32, T*heads*hd))
	bb := mustAlloc(t, d, make([]float32, T*heads*hd))
	if err := d.SplitHeads(ab, bb, sb, hd, heads, T); err != nil {
		t.Fatal(err)
	}
	ga, gb := mustRead(t, d, ab, T*heads*hd), mustRead(t, d, bb, T*heads*hd)
	for tt := 0; tt < T; tt++ {
		for h := 0; h < heads; h++ {
			for e := 0; e < hd; e++ {
				i := tt*heads*hd + h*hd + e
				s := tt*heads*2*hd + h*2*hd + e
				if ga[i] != src[s] || gb[i] != src[s+hd] {
					t.Fatalf("split_heads row %d head %d [%d]: %g %g, want %g %g", tt, h, e, ga[i], gb[i], src[s], src[s+hd])
				}
			}
		}
	}

	const n = 1000
	y := studentT(r, n, 2)
	g := studentT(r, n, 4)
	yb, gbuf := mustAlloc(t, d, y), mustAlloc(t, d, g)
	if err := d.SigmoidMul(yb, gbuf, n); err != nil {
		t.Fatal(err)
	}
	for i, v := range mustRead(t, d, yb, n) {
		ref := float64(y[i]) / (1 + math.Exp(-float64(g[i])))
		if !(math.Abs(float64(v)-ref) <= 4e-6*math.Abs(ref)+1e-30) {
			t.Fatalf("sigmoid_mul[%d] = %g, want %g", i, v, ref)
		}
	}

	const cols, rows = 300, 5
	m := gaussian(r, cols*rows, 1)
	sc := gaussian(r, rows, 3)
	mb, scb := mustAlloc(t, d, m), mustAlloc(t, d, sc)
	if err := d.RowSigmoidScale(mb, scb, cols, rows); err != nil {
		t.Fatal(err)
	}
	for i, v := range mustRead(t, d, mb, cols*rows) {
		ref := float64(m[i]) / (1 + math.Exp(-float64(sc[i/cols])))
		if !(math.Abs(float64(v)-ref) <= 4e-6*math.Abs(ref)+1e-30) {
			t.Fatalf("row_sigmoid_scale[%d] = %g, want %g", i, v, ref)
		}
	}
}

func testHybridErrors(t *testing.T, d *Device) {
	x := mustAlloc(t, d, make([]float32, 1024))
	y := mustAlloc(t, d, make([]float32, 1024))
	s := DeltaNetShape{DState: 16, NKHeads: 2, NVHeads: 4, Stride: 128}
	for _, c := range []struct {
		name, want string
		err        error
	}{
		{"conv state", "state holds", d.SSMConv(y, x, x.Slice(0, 10), x, 1, 100, 4)},
		{"conv taps", "w holds", d.SSMConv(y, x, x, x.Slice(0, 100), 1, 100, 4)},
		{"l2 heads", "heads of", d.L2NormHeads(x, 64, 3, 2, 128, 1e-6)},
		{"gates", "dt_bias holds", d.DeltaNetGates(x, y, x.Slice(0, 3), x, 4, 2)},
		{"delta heads", "not a multiple", d.DeltaRule(y, x, x, x, x, 1, DeltaNetShape{DState: 16, NKHeads: 3, NVHeads: 4, Stride: 256}, 1)},
		{"delta state size", "exceeds", d.DeltaRule(y, x, x, x, x, 1, DeltaNetShape{DState: 512, NKHeads: 1, NVHeads: 1, Stride: 2048}, 1)},
		{"delta stride", "cannot hold", d.DeltaRule(y, x, x, x, x, 1, DeltaNetShape{DState: 16, NKHeads: 2, NVHeads: 4, Stride: 100}, 1)},
		{"delta state", "state holds", d.DeltaRule(y, x, x, x, x.Slice(0, 100), 1, s, 1)},
		{"split", "src holds", d.SplitHeads(y, y, x.Slice(0, 100), 8, 8, 1)},
		{"row gate", "s holds", d.RowSigmoidScale(y, x.Slice(0, 1), 10, 2)},
		{"zero", "need 2048", d.Zero(x, 2048)},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, c.err, c.want)
		}
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("device unusable after rejected calls: %v", err)
	}
}
