package quant

import (
	"math"
	"math/rand/v2"
)

// Deterministic synthetic data sets for property tests and benchmarks.

func gaussian(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// studentT3 draws Student-t with 3 degrees of freedom: z / sqrt(χ²₃/3).
func studentT3(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x2545f4914f6cdd1d))
	x := make([]float32, n)
	for i := range x {
		var c float64
		for k := 0; k < 3; k++ {
			g := r.NormFloat64()
			c += g * g
		}
		x[i] = float32(r.NormFloat64() / math.Sqrt(c/3))
	}
	return x
}

// outlierChannels is N(0,1) with columns 7, 300, 513 and 1000 (mod ncols) ×20, the
// recipe of the golden "outlier_cols" case.
func outlierChannels(seed uint64, nrows, ncols int) []float32 {
	x := gaussian(seed, nrows*ncols)
	for r := 0; r < nrows; r++ {
		for _, c := range []int{7, 300, 513, 1000} {
			x[r*ncols+c%ncols] *= 20
		}
	}
	return x
}

// importanceFor builds a non-uniform importance vector like an imatrix: the mean
// square of each column times a log-normal factor, with a few columns ×50.
func importanceFor(x []float32, ncols int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 7))
	im := make([]float32, ncols)
	nrows := len(x) / ncols
	for c := 0; c < ncols; c++ {
		var s float64
		for row := 0; row < nrows; row++ {
			v := float64(x[row*ncols+c])
			s += v * v
		}
		im[c] = float32(s / float64(nrows) * math.Exp(1.5*r.NormFloat64()))
	}
	for _, c := range []int{3, 100, 257, 511} {
		im[c%ncols] *= 50
	}
	return im
}

type dataset struct {
	name         string
	nrows, ncols int
	x            []float32
}

func propertyDatasets() []dataset {
	return []dataset{
		{"normal", 16, 512, gaussian(11, 16*512)},
		{"student_t3", 16, 512, studentT3(12, 16*512)},
		{"outlier_channels", 8, 1024, outlierChannels(13, 8, 1024)},
	}
}
