package quant

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// TestAsymSubEvalLanes: kernels.AsymSubEval8 gives every lane the bits of the scalar
// asymSubEvalDs (error and codes), on random, heavy-tailed and degenerate sub-blocks and
// candidates, zero and negative-zero scales included.
func TestAsymSubEvalLanes(t *testing.T) {
	if !kernels.HasAsm() {
		t.Skip("no assembly kernels on this machine/build: only the scalar loop runs")
	}
	r := rand.New(rand.NewPCG(8, 9))
	var q [8 * 32]int32
	var c [32]int32
	checked := 0
	for it := 0; it < 3000; it++ {
		n := []int{32, 16, 1, 7}[it%4]
		nmax := []int32{15, 31, 3}[it%3]
		x := make([]float32, n)
		w := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Exp(2*r.NormFloat64()))
			w[i] = float32(r.ExpFloat64())
			switch r.IntN(25) {
			case 0:
				x[i] = 0
			case 1:
				w[i] = 0
			case 2:
				x[i] = float32(r.NormFloat64() * 1e-30)
			}
		}
		var ds, dm [8]float32
		for l := range ds {
			ds[l] = float32(r.ExpFloat64() * math.Exp(r.NormFloat64()) / float64(nmax))
			dm[l] = float32(r.ExpFloat64() * math.Exp(r.NormFloat64()))
			switch r.IntN(12) {
			case 0:
				ds[l] = 0
			case 1:
				ds[l] = float32(math.Copysign(0, -1))
			case 2:
				dm[l] = 0
			case 3:
				ds[l] = 1e-38
			}
		}
		var e [8]float64
		if !kernels.AsymSubEval8(x, w, &ds, &dm, nmax, &e, q[:8*n]) {
			t.Fatal("AsymSubEval8 did not run")
		}
		for l := 0; l < 8; l++ {
			want := asymSubEvalDs(x, w, ds[l], dm[l], nmax, c[:n])
			if math.Float64bits(e[l]) != math.Float64bits(want) {
				t.Fatalf("it %d lane %d (n %d, ds %g, dm %g): error %v, scalar %v", it, l, n, ds[l], dm[l], e[l], want)
			}
			for i := 0; i < n; i++ {
				if q[i*8+l] != c[i] {
					t.Fatalf("it %d lane %d: code %d is %d, scalar %d", it, l, i, q[i*8+l], c[i])
				}
			}
			checked++
		}
	}
	if kernels.AsymSubEval8(nil, nil, new([8]float32), new([8]float32), 15, new([8]float64), nil) {
		t.Error("AsymSubEval8 ran on an empty sub-block")
	}
	t.Logf("%d lanes checked", checked)
}

// TestCannotBeatAgreesWithSolve: whenever cannotBeat says a neighbour's error cannot go
// below bestE, solve's error is not below it, on well- and ill-conditioned sums; and it does
// skip: at least 90 % of the neighbours whose error is clearly (1e-6 relative) above bestE
// and whose sums are well conditioned with the constraints inactive (the unconstrained
// optimum has d > 0, m < 0), where the bound is tight.
func TestCannotBeatAgreesWithSolve(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 11))
	skipped, total, clear, clearSkipped := 0, 0, 0, 0
	for it := 0; it < 20000; it++ {
		n := 1 + r.IntN(32)
		x := make([]float32, n)
		w := make([]float32, n)
		q := make([]int32, n)
		spread := int32(1 + r.IntN(15))
		off := float64(r.NormFloat64())
		for i := range x {
			x[i] = float32(off + r.NormFloat64()*math.Exp(r.NormFloat64()))
			w[i] = float32(r.ExpFloat64())
			q[i] = r.Int32N(spread + 1)
			if it%5 == 0 {
				q[i] = q[0] // all codes equal: singular sums
			}
		}
		st := asymStatsOf(x, w, q)
		_, _, err := st.solve(true)
		for i := range x {
			for _, nq := range [2]int32{q[i] - 1, q[i] + 1} {
				s := st
				wi, xv, cur, nv := float64(w[i]), float64(x[i]), float64(q[i]), float64(nq)
				s.sq += wi * (nv - cur)
				s.sqq += wi * (nv*nv - cur*cur)
				s.sqx += wi * xv * (nv - cur)
				_, _, e := s.solve(true)
				for _, bestE := range []float64{err * (1 - 1e-12), e, math.Nextafter(e, math.Inf(1)), e * (1 + 1e-9), e * (1 - 1e-9), err} {
					total++
					skip := s.cannotBeat(bestE)
					det := s.sw*s.sqq - s.sq*s.sq
					inner := det > 1e-3*s.sw*s.sqq && s.sw*s.sqx-s.sx*s.sq > 0 && s.sqq*s.sx-s.sq*s.sqx < 0
					if inner && e > bestE+1e-6*math.Abs(bestE) && bestE > 0 {
						clear++
						if skip {
							clearSkipped++
						}
					}
					if skip {
						skipped++
						if e < bestE {
							t.Fatalf("it %d: cannotBeat(%v) but solve's error is %v (stats %+v)", it, bestE, e, s)
						}
					}
				}
			}
		}
	}
	if clearSkipped < clear*9/10 {
		t.Errorf("cannotBeat skipped %d of %d clearly worse neighbours", clearSkipped, clear)
	}
	t.Logf("skipped %d of %d; %d of %d clearly worse neighbours", skipped, total, clearSkipped, clear)
}

// TestDescentSkipSameBytes: the improved K-quant and 32-weight asymmetric formats give the same
// bytes with the descent's skipping (cannotBeat) as when it solves every neighbour.
func TestDescentSkipSameBytes(t *testing.T) {
	defer func() { solveAll = false }()
	const ncols = 1024
	for _, ds := range laneCases(ncols) {
		im := importanceFor(ds.x, ncols, 5)
		for _, typ := range []gguf.GGMLType{gguf.TypeQ2_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ4_1, gguf.TypeQ5_1} {
			for _, imp := range [][]float32{nil, im} {
				enc := func(all bool) []byte {
					solveAll = all
					b := make([]byte, ds.nrows*mustRowSize(t, typ, ncols))
					if err := Quantize(typ, b, ds.x, ds.nrows, ncols, &Options{Mode: ModeImproved, Importance: imp, Threads: 1}); err != nil {
						return []byte(err.Error()) // the same error both ways (fp16 overflow on the edge cases)
					}
					return b
				}
				if want, got := enc(true), enc(false); !bytes.Equal(got, want) {
					t.Errorf("%s %v imatrix %v: skipping changes %d bytes", ds.name, typ, imp != nil, diffBytes(got, want))
				}
			}
		}
	}
}

// TestAsymProxyLanes: kernels.AsymProxy8 gives every sub-block the bits of the scalar
// asymProxy (proxyInts, then asymProxyPick) for both passes, with zero, tiny and huge
// super-scales and fits at or beyond the integer range.
func TestAsymProxyLanes(t *testing.T) {
	if !kernels.HasAsm() {
		t.Skip("no assembly kernels on this machine/build: only the scalar loop runs")
	}
	r := rand.New(rand.NewPCG(12, 13))
	var p kernels.ProxyLanes
	checked := 0
	for it := 0; it < 4000; it++ {
		n := []int{8, 16, 4}[it%3]
		smax := []int32{63, 15}[it%2]
		var st [16]asymStats
		for j := 0; j < n; j++ {
			p.Fd[j] = r.ExpFloat64() * math.Exp(r.NormFloat64())
			p.Fm[j] = -r.ExpFloat64() * math.Exp(r.NormFloat64())
			switch r.IntN(10) {
			case 0:
				p.Fd[j] = 0
			case 1:
				p.Fm[j] = 0
			case 2:
				p.Fd[j] *= 1e3 // beyond smax
			case 3:
				p.Fm[j] = -p.Fm[j] // a positive offset: no min
			}
			st[j] = asymStats{sw: r.ExpFloat64() * 32, sqq: r.ExpFloat64() * 500, sq: r.ExpFloat64() * 100}
			p.Sqq[j], p.Sq[j], p.Sw[j] = st[j].sqq, st[j].sq, st[j].sw
			p.Fixed0[j] = float64(r.Int32N(smax + 1))
			p.Fixed1[j] = min(p.Fixed0[j]+1, float64(smax))
		}
		D := float64(roundF16(float32(r.ExpFloat64() / float64(smax))))
		Dm := float64(roundF16(float32(r.ExpFloat64() / float64(smax))))
		switch r.IntN(8) {
		case 0:
			D = 0
		case 1:
			Dm = 0
		case 2:
			D = 6e-8 // the smallest fp16 subnormal
		}
		for _, varyD := range []bool{true, false} {
			if !kernels.AsymProxy8(&p, n, D, Dm, smax, varyD) {
				t.Fatal("AsymProxy8 did not run")
			}
			for j := 0; j < n; j++ {
				fix := [2]int32{int32(p.Fixed0[j]), int32(p.Fixed1[j])}
				var ac, bc [2]int32
				if varyD {
					ac[0], ac[1] = proxyInts(p.Fd[j], D, smax)
					bc = fix
				} else {
					ac = fix
					bc[0], bc[1] = proxyInts(-p.Fm[j], Dm, smax)
				}
				_, _, want := asymProxyPick(&st[j], p.Fd[j], p.Fm[j], D, Dm, ac, bc)
				if math.Float64bits(p.Cost[j]) != math.Float64bits(want) {
					t.Fatalf("it %d sub-block %d varyD %v (D %g, Dm %g, fd %g, fm %g): cost %v, scalar %v",
						it, j, varyD, D, Dm, p.Fd[j], p.Fm[j], p.Cost[j], want)
				}
				checked++
			}
		}
	}
	if kernels.AsymProxy8(&p, 6, 1, 1, 63, true) {
		t.Error("AsymProxy8 ran for 6 sub-blocks")
	}
	t.Logf("%d sub-blocks checked", checked)
}

// TestAsymScoreLanes: kernels.AsymScore8 gives every lane the bits of asymScore1, for the
// first guesses asymFit makes and for scales that push codes far outside 0..nmax.
func TestAsymScoreLanes(t *testing.T) {
	if !kernels.HasAsm() {
		t.Skip("no assembly kernels on this machine/build: only the scalar loop runs")
	}
	r := rand.New(rand.NewPCG(14, 15))
	var out [24]float32
	for it := 0; it < 3000; it++ {
		n := []int{32, 16, 1, 5}[it%4]
		nmax := []int32{15, 31, 3}[it%3]
		x := make([]float32, n)
		w := make([]float32, n)
		mn := float32(math.Inf(1))
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Exp(2*r.NormFloat64()))
			w[i] = float32(r.ExpFloat64())
			if r.IntN(20) == 0 {
				w[i] = 0
			}
			mn = min(mn, x[i])
		}
		if it%7 == 0 {
			mn += float32(r.NormFloat64()) // codes below 0 and above nmax
		}
		var id [8]float32
		for l := range id {
			id[l] = float32(float64(nmax) * math.Exp(r.NormFloat64()) / (1 + r.ExpFloat64()))
		}
		if !kernels.AsymScore8(x, w, mn, &id, nmax, &out) {
			t.Fatal("AsymScore8 did not run")
		}
		for l := range id {
			sq, sqq, sqx := asymScore1(x, w, mn, id[l], float32(nmax))
			if math.Float32bits(out[l]) != math.Float32bits(sq) || math.Float32bits(out[8+l]) != math.Float32bits(sqq) ||
				math.Float32bits(out[16+l]) != math.Float32bits(sqx) {
				t.Fatalf("it %d lane %d: sums %v %v %v, scalar %v %v %v", it, l, out[l], out[8+l], out[16+l], sq, sqq, sqx)
			}
		}
	}
}
