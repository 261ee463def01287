package quant

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// laneCases are data sets that exercise every branch of the K-quant searches: ordinary and
// heavy-tailed weights, outlier columns, all-positive and all-negative sub-blocks (the
// min > 0 clamp and thisMin > 0), constant and all-zero sub-blocks (max == min, amax <
// 1e-15), tiny and huge magnitudes, signed zeros and a single spike per sub-block.
func laneCases(ncols int) []dataset {
	const nrows = 8
	n := nrows * ncols
	r := rand.New(rand.NewPCG(11, 12))
	mixed := gaussian(21, n)
	for i := range mixed {
		switch sb := (i / 16) % 11; sb {
		case 0:
			mixed[i] = 0
		case 1:
			mixed[i] = 0.75 // constant sub-block
		case 2:
			mixed[i] = float32(math.Abs(float64(mixed[i]))) + 1 // all positive
		case 3:
			mixed[i] = -float32(math.Abs(float64(mixed[i]))) - 1 // all negative
		case 4:
			mixed[i] *= 1e-17 // below ggml's 1e-15 group threshold
		case 5:
			mixed[i] *= 1e-8
		case 6:
			mixed[i] *= 3e4
		case 7:
			if i%16 == 5 {
				mixed[i] = 50 // one spike
			} else {
				mixed[i] = 0
			}
		case 8:
			mixed[i] = float32(math.Copysign(0, float64(r.IntN(2)-1)))
		case 9:
			mixed[i] = float32(r.IntN(5) - 2) // ties in the rounding
		}
	}
	return []dataset{
		{"gaussian", nrows, ncols, gaussian(22, n)},
		{"student_t3", nrows, ncols, studentT3(23, n)},
		{"outlier_cols", nrows, ncols, outlierChannels(24, nrows, ncols)},
		{"mixed_edges", nrows, ncols, mixed},
	}
}

// TestLaneSearchMatchesScalar: the SIMD-lane searches (kernels.QkxSearch8, QkxSearch16,
// QxSearch8) give the same bytes as the scalar ggml searches for every K-quant type that uses
// them, with and without importance weights, in both modes (improved mode starts from these
// searches); on AVX-512 CPUs with the 16-lane search and without it.
func TestLaneSearchMatchesScalar(t *testing.T) {
	if !kernels.HasAsm() {
		t.Skip("no assembly kernels on this machine/build: only the scalar search runs")
	}
	defer kernels.SetPureGo(false)
	const ncols = 1280 // five super-blocks: two pairs and one alone on the 16-lane path
	types := []gguf.GGMLType{gguf.TypeQ8_0, gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K}
	for _, ds := range laneCases(ncols) {
		im := importanceFor(ds.x, ncols, 5)
		im[17] = 0 // a zero importance column
		for _, typ := range types {
			for _, m := range []Mode{ModeReference, ModeImproved} {
				for _, imp := range [][]float32{nil, im} {
					dst := func(pure bool) []byte {
						kernels.SetPureGo(pure)
						b := make([]byte, ds.nrows*mustRowSize(t, typ, ncols))
						if err := Quantize(typ, b, ds.x, ds.nrows, ncols, &Options{Mode: m, Importance: imp, Threads: 1}); err != nil {
							t.Fatal(err)
						}
						return b
					}
					want := dst(true)
					// the 16-lane search where the CPU has it (Q4_K/Q5_K with importance),
					// then the 8-lane one alone
					for _, on16 := range []bool{true, false} {
						kernels.SetLaneSearch16(on16)
						got := dst(false)
						kernels.SetLaneSearch16(true)
						if !bytes.Equal(got, want) {
							t.Errorf("%s %v mode %d imatrix %v (16 lanes %v): lane search differs from scalar in %d bytes",
								ds.name, typ, m, imp != nil, on16 && kernels.HasLaneSearch16(), diffBytes(got, want))
						}
					}
				}
			}
		}
	}
}

// TestLaneSearchKernels calls the lane searches directly with random shapes and parameters
// against the scalar searches, labels included.
func TestLaneSearchKernels(t *testing.T) {
	if !kernels.HasAsm() {
		t.Skip("no assembly kernels on this machine/build")
	}
	kernels.SetPureGo(false)
	r := rand.New(rand.NewPCG(3, 4))
	var s scratch
	for it := 0; it < 300; it++ {
		n := []int{16, 32, 7, 1}[it%4]
		x := make([]float32, 8*n)
		w := make([]float32, 8*n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * math.Exp(2*r.NormFloat64()))
			w[i] = float32(r.ExpFloat64())
			if r.IntN(20) == 0 {
				x[i] = 0
			}
		}
		nmax := int32([]int{1, 3, 7, 15, 31, 63}[r.IntN(6)])
		rmin, rdelta := float32(-r.Float64()), float32(0.01+0.1*r.Float64())
		nstep := 1 + r.IntN(40)
		var sc, mn, sc2, mn2 [8]float32
		L := make([]uint8, 8*n)
		L2 := make([]uint8, 8*n)
		qkxQuants8(&s, x, w, L, &sc, &mn, n, nmax, rmin, rdelta, nstep, false)
		for j := 0; j < 8; j++ {
			sc2[j] = ggmlQkxQuants(x[n*j:n*j+n], w[n*j:n*j+n], L2[n*j:n*j+n], s.Laux[:n], &mn2[j], nmax, rmin, rdelta, nstep, false, false)
		}
		if !sameBits(sc[:], sc2[:]) || !sameBits(mn[:], mn2[:]) || !bytes.Equal(L, L2) {
			t.Fatalf("qkx n=%d nmax=%d nstep=%d: lanes %v %v, scalar %v %v", n, nmax, nstep, sc, mn, sc2, mn2)
		}
		qn := int32(1 + r.IntN(32))
		Li := make([]int8, 8*n)
		Li2 := make([]int8, 8*n)
		var qs, qs2 [8]float32
		qw := w
		if it%2 == 0 {
			qw = nil
		}
		qxQuants8(&s, x, Li, qs[:], n, qn, qw)
		for j := 0; j < 8; j++ {
			var wj []float32
			if qw != nil {
				wj = qw[n*j : n*j+n]
			}
			qs2[j] = ggmlQxQuants(x[n*j:n*j+n], Li2[n*j:n*j+n], qn, wj)
		}
		if !sameBits(qs[:], qs2[:]) || !bytes.Equal(int8Bytes(Li), int8Bytes(Li2)) {
			t.Fatalf("qx n=%d nmax=%d: lanes %v, scalar %v", n, qn, qs, qs2)
		}
	}
}

func sameBits(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func int8Bytes(v []int8) []byte {
	b := make([]byte, len(v))
	for i, x := range v {
		b[i] = byte(x)
	}
	return b
}

func diffBytes(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
