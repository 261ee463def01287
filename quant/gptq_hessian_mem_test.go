package quant

import (
	"math"
	"slices"
	"sort"
	"testing"
)

// symFull mirrors spdUpper's upper triangle into a full symmetric matrix, with one dead
// column (zero row and column) so the factorisation's special case is covered too.
func symFull(n int, seed uint64) []float64 {
	g := spdUpper(n, seed)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			g[j*n+i] = g[i*n+j]
		}
	}
	dead := n / 3
	for k := 0; k < n; k++ {
		g[dead*n+k], g[k*n+dead] = 0, 0
	}
	return g
}

// AdoptGram gives the Hessian NewHessianFromGram gives, keeps the caller's storage instead
// of a copy, and refuses what NewHessianFromGram refuses without touching the values.
func TestAdoptGramMatchesNewHessianFromGram(t *testing.T) {
	const n = 37
	g := symFull(n, 7)
	want, err := NewHessianFromGram(n, g)
	if err != nil {
		t.Fatal(err)
	}
	own := slices.Clone(g)
	got, err := AdoptGram(n, own)
	if err != nil {
		t.Fatal(err)
	}
	if &got.sum[0] != &own[0] {
		t.Error("AdoptGram copied the matrix")
	}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			if a, b := got.At(i, j), want.At(i, j); a != b {
				t.Fatalf("At(%d,%d) = %v, NewHessianFromGram's %v", i, j, a, b)
			}
		}
	}
	fw, err := want.factor(gptqDefaultDamp, true)
	if err != nil {
		t.Fatal(err)
	}
	fg, err := got.factor(gptqDefaultDamp, true)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fw.vc, fg.vc) || !slices.Equal(fw.vdiag, fg.vdiag) || !slices.Equal(fw.hf, fg.hf) {
		t.Error("the factorisations differ")
	}

	bad := map[string]func([]float64){
		"asymmetric":        func(m []float64) { m[1*n+4] *= 1.01 },
		"NaN":               func(m []float64) { m[2*n+5] = math.NaN() },
		"negative diagonal": func(m []float64) { m[3*n+3] = -1 },
	}
	for name, spoil := range bad {
		m := slices.Clone(g)
		spoil(m)
		before := slices.Clone(m)
		_, errNew := NewHessianFromGram(n, m)
		_, errAdopt := AdoptGram(n, m)
		if errNew == nil || errAdopt == nil || errNew.Error() != errAdopt.Error() {
			t.Errorf("%s: NewHessianFromGram %v, AdoptGram %v", name, errNew, errAdopt)
		}
		for i := range m {
			if !(m[i] == before[i] || math.IsNaN(m[i]) && math.IsNaN(before[i])) {
				t.Fatalf("%s: AdoptGram changed element %d on an error", name, i)
			}
		}
	}
	if _, err := AdoptGram(n, g[:n*n-1]); err == nil {
		t.Error("AdoptGram accepted a short matrix")
	}
	if _, err := AdoptGram(0, nil); err == nil {
		t.Error("AdoptGram accepted 0 columns")
	}
}

// The activation-order factorisation reads H through the permutation in place; it must be
// bit for bit the factorisation of the explicitly permuted copy that it replaced.
func TestActOrderFactorMatchesPermutedCopy(t *testing.T) {
	for _, n := range []int{1, 2, 33, 96} {
		g := symFull(n, uint64(n))
		h, err := NewHessianFromGram(n, g)
		if err != nil {
			t.Fatal(err)
		}
		// Only the upper triangle is H (Add leaves the lower one zero): spoil the lower one
		// so that reading it shows.
		for i := 0; i < n; i++ {
			for j := 0; j < i; j++ {
				h.sum[i*n+j] = math.NaN()
			}
		}
		act, err := h.actOrder(gptqDefaultDamp, false)
		if err != nil {
			t.Fatal(err)
		}
		perm := make([]int, n)
		for i := range perm {
			perm[i] = i
		}
		sort.SliceStable(perm, func(a, b int) bool { return g[perm[a]*n+perm[a]] > g[perm[b]*n+perm[b]] })
		if !slices.Equal(perm, act.perm) {
			t.Fatalf("n=%d: permutation %v, want %v", n, act.perm, perm)
		}
		pg := make([]float64, n*n)
		for p := 0; p < n; p++ {
			for q := 0; q < n; q++ {
				pg[p*n+q] = g[perm[p]*n+perm[q]]
			}
		}
		ph, err := NewHessianFromGram(n, pg)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ph.factorize(gptqDefaultDamp)
		if err != nil {
			t.Fatal(err)
		}
		got := act.fac
		if !slices.Equal(got.vc, want.vc) || !slices.Equal(got.vdiag, want.vdiag) ||
			!slices.Equal(got.diag, want.diag) || !slices.Equal(got.dead, want.dead) ||
			got.lambda != want.lambda || got.used != want.used {
			t.Errorf("n=%d: the in-place permuted factorisation differs from the copy's", n)
		}
	}
}
