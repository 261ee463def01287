package main

import (
	"math"
	"testing"
)

// TestHError checks hError against sums written out by hand, with H given by its upper
// triangle only (the lower one is NaN, so reading it would show).
func TestHError(t *testing.T) {
	// H = [[2, 1, 0], [1, 3, -1], [0, -1, 1]]
	nan := math.NaN()
	h := &calibH{n: 3, stride: 3, data: []float64{
		2, 1, 0,
		nan, 3, -1,
		nan, nan, 1,
	}}
	w := []float32{1, 2, 3, -1, 0, 2}
	q := []float32{1, 1, 3, 0, 0, 1}
	quad := func(v [3]float64) float64 {
		return 2*v[0]*v[0] + 3*v[1]*v[1] + v[2]*v[2] + 2*v[0]*v[1] - 2*v[1]*v[2]
	}
	wantNum := quad([3]float64{0, 1, 0}) + quad([3]float64{-1, 0, 1})
	wantDen := quad([3]float64{1, 2, 3}) + quad([3]float64{-1, 0, 2})
	num, den := hError(w, q, 2, h)
	if math.Abs(num-wantNum) > 1e-12 || math.Abs(den-wantDen) > 1e-12 {
		t.Fatalf("hError = %v, %v; want %v, %v", num, den, wantNum, wantDen)
	}
}
