package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestLaneStateLayout pins the field offsets search_amd64.s uses.
func TestLaneStateLayout(t *testing.T) {
	var k QkxLanes
	var q QxLanes
	var k16 QkxLanes16
	var q16 QxLanes16
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"QkxLanes.W", unsafe.Offsetof(k.W), 1024},
		{"QkxLanes.fl", unsafe.Offsetof(k.fl), 2048},
		{"QkxLanes.sumW", unsafe.Offsetof(k.sumW), 3072},
		{"QkxLanes.sumX", unsafe.Offsetof(k.sumX), 3104},
		{"QkxLanes.best", unsafe.Offsetof(k.best), 3136},
		{"QkxLanes.scale", unsafe.Offsetof(k.scale), 3168},
		{"QkxLanes.bIs", unsafe.Offsetof(k.bIs), 3200},
		{"QkxLanes.bMin", unsafe.Offsetof(k.bMin), 3232},
		{"QkxLanes.max", unsafe.Offsetof(k.max), 3264},
		{"QkxLanes.min0", unsafe.Offsetof(k.min0), 3296},
		{"QkxLanes.deg", unsafe.Offsetof(k.deg), 3328},
		{"QkxLanes.Scale", unsafe.Offsetof(k.Scale), 3360},
		{"QkxLanes.Min", unsafe.Offsetof(k.Min), 3392},
		{"QkxLanes.L", unsafe.Offsetof(k.L), 3424},
		{"QxLanes.W", unsafe.Offsetof(q.W), 1024},
		{"QxLanes.max", unsafe.Offsetof(q.max), 2048},
		{"QxLanes.bIs", unsafe.Offsetof(q.bIs), 2080},
		{"QxLanes.best", unsafe.Offsetof(q.best), 2112},
		{"QxLanes.deg", unsafe.Offsetof(q.deg), 2144},
		{"QxLanes.Scale", unsafe.Offsetof(q.Scale), 2176},
		{"QxLanes.L", unsafe.Offsetof(q.L), 2208},
		{"QkxLanes16.W", unsafe.Offsetof(k16.W), 2048},
		{"QkxLanes16.fl", unsafe.Offsetof(k16.fl), 4096},
		{"QkxLanes16.sumW", unsafe.Offsetof(k16.sumW), 6144},
		{"QkxLanes16.sumX", unsafe.Offsetof(k16.sumX), 6208},
		{"QkxLanes16.best", unsafe.Offsetof(k16.best), 6272},
		{"QkxLanes16.scale", unsafe.Offsetof(k16.scale), 6336},
		{"QkxLanes16.bIs", unsafe.Offsetof(k16.bIs), 6400},
		{"QkxLanes16.bMin", unsafe.Offsetof(k16.bMin), 6464},
		{"QkxLanes16.max", unsafe.Offsetof(k16.max), 6528},
		{"QkxLanes16.min0", unsafe.Offsetof(k16.min0), 6592},
		{"QkxLanes16.Scale", unsafe.Offsetof(k16.Scale), 6656},
		{"QkxLanes16.Min", unsafe.Offsetof(k16.Min), 6720},
		{"QkxLanes16.L", unsafe.Offsetof(k16.L), 6784},
		{"QxLanes16.W", unsafe.Offsetof(q16.W), 2048},
		{"QxLanes16.max", unsafe.Offsetof(q16.max), 4096},
		{"QxLanes16.bIs", unsafe.Offsetof(q16.bIs), 4160},
		{"QxLanes16.Scale", unsafe.Offsetof(q16.Scale), 4224},
		{"QxLanes16.L", unsafe.Offsetof(q16.L), 4288},
	} {
		if c.got != c.want {
			t.Errorf("%s at offset %d, search_amd64.s / search512_amd64.s expect %d", c.name, c.got, c.want)
		}
	}
}

// TestProxyLanesLayout: the offsets search_amd64.s uses for ProxyLanes.
func TestProxyLanesLayout(t *testing.T) {
	var p ProxyLanes
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"Fd", unsafe.Offsetof(p.Fd), 0}, {"Fm", unsafe.Offsetof(p.Fm), 128}, {"Sqq", unsafe.Offsetof(p.Sqq), 256},
		{"Sq", unsafe.Offsetof(p.Sq), 384}, {"Sw", unsafe.Offsetof(p.Sw), 512}, {"Fixed0", unsafe.Offsetof(p.Fixed0), 640},
		{"Fixed1", unsafe.Offsetof(p.Fixed1), 768}, {"Cost", unsafe.Offsetof(p.Cost), 896},
	} {
		if c.got != c.want {
			t.Errorf("ProxyLanes.%s at %d, the assembly uses %d", c.name, c.got, c.want)
		}
	}
}

// laneSamples fills 16 sub-blocks of n values for the lane-search comparisons: sub-block j is
// of kind (trial+j) mod 9, one of Gaussian, heavy-tailed, constant positive, all positive,
// tiny (below 1e-15), Gaussian with every third weight zero, constant negative (max == min), all
// zero and all negative. Weights are random, or x² when squared (the zero-weight kind keeps
// random ones, its every third zero). set receives each (sub-block, element, x, w).
func laneSamples(r *rand.Rand, trial, n int, squared bool, set func(j, i int, x, w float32)) {
	for j := 0; j < 16; j++ {
		kind := (trial + j) % 9
		for i := 0; i < n; i++ {
			x := float32(r.NormFloat64())
			switch kind {
			case 1:
				x = float32(r.NormFloat64() / (r.Float64() + 0.02)) // heavy tails
			case 2:
				x = 0.5 // constant positive (qkx: the minimum clamps to 0)
			case 3:
				x = float32(math.Abs(float64(x))) + 1
			case 4:
				x *= 1e-20 // qx: below 1e-15, a degenerate lane
			case 6:
				x = -0.5 // constant, not positive: max == min, a degenerate qkx lane
			case 7:
				x = 0 // degenerate for both
			case 8:
				x = -float32(math.Abs(float64(x))) - 1
			}
			w := x * x
			if !squared || kind == 5 {
				w = float32(r.Float64())
			}
			if kind == 5 && i%3 == 0 {
				w = 0
			}
			set(j, i, x, w)
		}
	}
}

// TestQkxSearch16MatchesSearch8: the 16-lane AVX-512 search gives, lane by lane, the bits of
// two 8-lane searches (which the quant package's tests tie to ggml's scalar search), on the
// sub-blocks of laneSamples, for several sub-block lengths and step counts.
func TestQkxSearch16MatchesSearch8(t *testing.T) {
	if !HasLaneSearch16() {
		t.Skip("no AVX-512F assembly on this machine/build")
	}
	r := rand.New(rand.NewPCG(61, 62))
	for trial := 0; trial < 200; trial++ {
		n := []int{32, 16, 7, 1}[trial%4]
		nmax := []int32{15, 31, 3}[trial%3]
		nstep := []int{36, 20, 1}[trial%3]
		num := QkxNumerators(nmax, -0.9, 0.05, nstep)[:nstep+1]
		var s16 QkxLanes16
		var s8 [2]QkxLanes
		laneSamples(r, trial, n, false, func(j, i int, x, w float32) {
			s16.X[i*16+j], s16.W[i*16+j] = x, w
			s8[j/8].X[i*8+j%8], s8[j/8].W[i*8+j%8] = x, w
		})
		if !QkxSearch16(&s16, n, nmax, num) {
			t.Fatal("QkxSearch16 did not run")
		}
		for h := range s8 {
			if !QkxSearch8(&s8[h], n, nmax, num) {
				t.Fatal("QkxSearch8 did not run")
			}
		}
		for j := 0; j < 16; j++ {
			a, b := &s8[j/8], j%8
			if math.Float32bits(s16.Scale[j]) != math.Float32bits(a.Scale[b]) || math.Float32bits(s16.Min[j]) != math.Float32bits(a.Min[b]) {
				t.Fatalf("trial %d (n %d, nmax %d, nstep %d) lane %d: scale %v min %v, 8-lane %v %v", trial, n, nmax, nstep, j,
					s16.Scale[j], s16.Min[j], a.Scale[b], a.Min[b])
			}
			sameLabels(t, trial, j, n, s16.L[:], a.L[:])
		}
	}
}

// sameLabels fails the test when lane j's n labels of a 16-lane search differ from those of
// lane j mod 8 of the 8-lane search run on its half.
func sameLabels(t *testing.T, trial, j, n int, l16, l8 []int32) {
	t.Helper()
	for i := 0; i < n; i++ {
		if l16[i*16+j] != l8[i*8+j%8] {
			t.Fatalf("trial %d lane %d element %d: label %d, 8-lane %d", trial, j, i, l16[i*16+j], l8[i*8+j%8])
		}
	}
}

// TestQxSearch16MatchesSearch8: the 16-lane make_qx_quants search gives, lane by lane, the bits
// of two 8-lane searches, on the sub-blocks of laneSamples with x² weights (ggml's unweighted
// case) and random ones.
func TestQxSearch16MatchesSearch8(t *testing.T) {
	if !HasLaneSearch16() {
		t.Skip("no AVX-512F assembly on this machine/build")
	}
	r := rand.New(rand.NewPCG(63, 64))
	for trial := 0; trial < 200; trial++ {
		n := []int{16, 32, 7, 1}[trial%4]
		nmax := []int32{32, 4, 16}[trial%3]
		num := QxNumerators(nmax)[:]
		var s16 QxLanes16
		var s8 [2]QxLanes
		laneSamples(r, trial, n, trial%2 == 0, func(j, i int, x, w float32) {
			s16.X[i*16+j], s16.W[i*16+j] = x, w
			s8[j/8].X[i*8+j%8], s8[j/8].W[i*8+j%8] = x, w
		})
		if !QxSearch16(&s16, n, nmax, num) {
			t.Fatal("QxSearch16 did not run")
		}
		for h := range s8 {
			if !QxSearch8(&s8[h], n, nmax, num) {
				t.Fatal("QxSearch8 did not run")
			}
		}
		for j := 0; j < 16; j++ {
			a, b := &s8[j/8], j%8
			if math.Float32bits(s16.Scale[j]) != math.Float32bits(a.Scale[b]) {
				t.Fatalf("trial %d (n %d, nmax %d) lane %d: scale %v, 8-lane %v", trial, n, nmax, j, s16.Scale[j], a.Scale[b])
			}
			sameLabels(t, trial, j, n, s16.L[:], a.L[:])
		}
	}
}
