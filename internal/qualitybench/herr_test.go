package main

import (
	"fmt"
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

// fakeHeads serves per-head matrices for one block and entry.
type fakeHeads struct {
	il    int
	entry string
	mats  [][]float64 // nil: the group saw no rows
	n     int
}

func (f *fakeHeads) HeadGroups(il int, entry string) int {
	if il != f.il || entry != f.entry {
		return 0
	}
	return len(f.mats)
}

func (f *fakeHeads) HeadHessian(il int, entry string, h int) ([]float64, int, bool, error) {
	if il != f.il || entry != f.entry || h < 0 || h >= len(f.mats) {
		return nil, 0, false, fmt.Errorf("no head group %d", h)
	}
	if f.mats[h] == nil {
		return nil, 0, false, nil
	}
	return f.mats[h], f.n, true, nil
}

// TestHeadParts checks the DeltaNet split: the rows before the value rows under the plain
// matrix, each group of value rows under its own one, written out by hand (diagonal matrices,
// so each error is a weighted sum of squares).
func TestHeadParts(t *testing.T) {
	// 2 columns; 2 query/key rows and 4 value rows in 2 groups of 2
	plain := &calibH{n: 2, stride: 2, data: []float64{1, 0, math.NaN(), 1}}
	src := &fakeHeads{il: 3, entry: "attn_qkv.vheads", n: 2, mats: [][]float64{{4, 0, 0, 1}, {1, 0, 0, 9}}}
	w := []float32{1, 1, 2, 2, 1, 0, 0, 1, 1, 1, 2, 0}
	q := []float32{1, 0, 2, 2, 0, 0, 0, 0, 1, 1, 2, 1}
	got, err := headParts(src, 3, "attn_qkv.vheads", "attn_qkv.weight", w, q, 6, 4, plain)
	if err != nil {
		t.Fatal(err)
	}
	// q, k rows: errors (0,1), (0,0) under I; weights (1,1), (2,2): 1 / (2 + 8)
	// group 0 (diag 4, 1): errors (1,0), (0,1); weights (1,0), (0,1): (4+1) / (4+1)
	// group 1 (diag 1, 9): errors (0,0), (0,-1); weights (1,1), (2,0): 9 / (1+9+4)
	want := map[string]float64{"attn_qkv.weight (q, k rows)": 0.1, "attn_qkv.weight (v heads)": (5.0 + 9) / (5 + 14)}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-12 {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// a group that saw no rows is left out; attn_gate has no query/key rows
	src = &fakeHeads{il: 3, entry: "attn_gate.heads", n: 2, mats: [][]float64{nil, {1, 0, 0, 9}}}
	got, err = headParts(src, 3, "attn_gate.heads", "attn_gate.weight", w[2*2:], q[2*2:], 4, 4, plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || math.Abs(got["attn_gate.weight (v heads)"]-9.0/14) > 1e-12 {
		t.Errorf("gate: got %v, want only (v heads) = %v", got, 9.0/14)
	}
	if _, err := headParts(src, 3, "attn_gate.heads", "attn_gate.weight", w, q, 6, 3, plain); err == nil {
		t.Error("3 value rows in 2 groups accepted")
	}
}
