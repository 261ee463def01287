package quant

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/testenv"
)

// weightedTensorSSE returns Σ_rows Σ_cols w[c]·(x−y)² (w = 1 when im is nil).
func weightedTensorSSE(x, y []float32, ncols int, im []float32) float64 {
	var e float64
	for i := range x {
		w := 1.0
		if im != nil {
			w = float64(im[i%ncols])
		}
		d := float64(x[i]) - float64(y[i])
		e += w * d * d
	}
	return e
}

// TestImprovedVsGGML: on every golden case, ModeImproved with the imatrix must not
// have a higher imatrix-weighted error than ggml's imatrix quantization (q_im), and
// without importance not a higher plain error than ggml's reference (q). The
// reductions are logged.
func TestImprovedVsGGML(t *testing.T) {
	types := []string{"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"}
	for _, name := range types {
		g := testenv.LoadGolden(t, name)
		var lineW, lineU string
		start := time.Now()
		for _, c := range g.Cases {
			n := c.Rows * c.Cols
			got := make([]byte, len(c.Q))
			y := make([]float32, n)
			yg := make([]float32, n)
			im := c.Imatrix
			ggq := c.QIm
			if im == nil { // Q8_0: ggml ignores the imatrix; compare with its only output
				q40 := testenv.LoadGolden(t, "Q4_0")
				im = q40.Cases[caseIndex(t, q40, c.Name)].Imatrix
				ggq = c.Q
			}
			if err := Quantize(goldenType(g), got, c.X, c.Rows, c.Cols, &Options{Importance: im, Mode: ModeImproved}); err != nil {
				t.Fatal(err)
			}
			mustDeq(t, goldenType(g), y, got)
			mustDeq(t, goldenType(g), yg, ggq)
			eo, eg := weightedTensorSSE(c.X, y, c.Cols, im), weightedTensorSSE(c.X, yg, c.Cols, im)
			if eo > eg {
				t.Errorf("%s/%s: improved weighted SSE %g > ggml imatrix %g", name, c.Name, eo, eg)
			}
			lineW += fmt.Sprintf(" %s %+.1f%%", c.Name, 100*(eo/eg-1))
			if err := Quantize(goldenType(g), got, c.X, c.Rows, c.Cols, &Options{Mode: ModeImproved}); err != nil {
				t.Fatal(err)
			}
			mustDeq(t, goldenType(g), y, got)
			mustDeq(t, goldenType(g), yg, c.Q)
			eo, eg = weightedTensorSSE(c.X, y, c.Cols, nil), weightedTensorSSE(c.X, yg, c.Cols, nil)
			if eo > eg {
				t.Errorf("%s/%s: improved SSE %g > ggml reference %g", name, c.Name, eo, eg)
			}
			lineU += fmt.Sprintf(" %s %+.1f%%", c.Name, 100*(eo/eg-1))
		}
		t.Logf("%-6s imatrix-weighted SSE vs ggml imatrix:%s", name, lineW)
		t.Logf("%-6s plain SSE vs ggml reference:         %s (%v)", name, lineU, time.Since(start).Round(time.Millisecond))
	}
}

func caseIndex(t *testing.T, g *testenv.GoldenFile, name string) int {
	for i, c := range g.Cases {
		if c.Name == name {
			return i
		}
	}
	t.Fatalf("case %s not found", name)
	return -1
}

func mustDeq(t testing.TB, typ gguf.GGMLType, y []float32, q []byte) {
	t.Helper()
	if err := Dequantize(typ, y, q); err != nil {
		t.Fatal(err)
	}
	for i, v := range y {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatalf("%v: non-finite dequantized value at %d", typ, i)
		}
	}
}

// memoGroup returns group g of the refinement-memo tests: 16 or 32 weights, Gaussian,
// heavy-tailed (g%4 == 1) or with one outlier (g%4 == 2), log-normal importances with some
// zeros (g%7 == 0).
func memoGroup(r *rand.Rand, g int) (x, w []float32) {
	n := []int{16, 32}[g%2]
	x, w = make([]float32, n), make([]float32, n)
	for i := range x {
		v := r.NormFloat64()
		switch g % 4 {
		case 1:
			v /= math.Max(0.05, math.Abs(r.NormFloat64())) // heavy tails
		case 2:
			if i == g%n {
				v *= 25 // one outlier
			}
		}
		x[i] = float32(v * 0.02)
		w[i] = float32(math.Exp(r.NormFloat64()))
		if g%7 == 0 && i%5 == 0 {
			w[i] = 0
		}
	}
	return x, w
}

// checkMemo runs a refinement from start once without and once with memo, fails the test
// on any difference in the final codes or the returned values (bit for bit), and reports
// whether the memo answered.
func checkMemo(t *testing.T, g, k int, start []int32, memo *refineMemo, run func(q []int32, memo *refineMemo) []float64) bool {
	t.Helper()
	q0, q1 := slices.Clone(start), slices.Clone(start)
	r0 := run(q0, nil)
	before := memo.n
	r1 := run(q1, memo)
	same := slices.Equal(q0, q1)
	for i := range r0 {
		same = same && math.Float64bits(r0[i]) == math.Float64bits(r1[i])
	}
	if !same {
		t.Fatalf("group %d candidate %d: memo changed the result: codes %v / %v, values %v / %v", g, k, q0, q1, r0, r1)
	}
	return memo.n == before
}

// TestAsymRefineMemoExact: asymRefine with a shared refineMemo returns, for every candidate
// start of a group, exactly what it returns without one (codes, statistics, d, m, error
// bit for bit), and the memo does answer some of them, on memoGroup's groups for the 2-,
// 4- and 5-bit code ranges.
func TestAsymRefineMemoExact(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	hits, calls := 0, 0
	for g := 0; g < 3000; g++ {
		x, w := memoGroup(r, g)
		nmax := []int32{3, 15, 31}[g%3]
		nonPos := g%5 != 0
		mn, mx := slices.Min(x), slices.Max(x)
		if nonPos && mn > 0 {
			mn = 0
		}
		var memo refineMemo
		for k, t0 := range tcFor(nmax)[:fitTop] {
			id := (t0 + float32(k%2)*0.37) / (mx - mn)
			start := make([]int32, len(x))
			for i, v := range x {
				start[i] = clampI(nearestInt((v-mn)*id), 0, nmax)
			}
			calls++
			if checkMemo(t, g, k, start, &memo, func(q []int32, memo *refineMemo) []float64 {
				st, d, m, e := asymRefine(x, w, nmax, nonPos, q, memo)
				return []float64{st.sw, st.sq, st.sqq, st.sx, st.sqx, st.sxx, d, m, e}
			}) {
				hits++
			}
		}
	}
	t.Logf("%d of %d refinements answered by the memo", hits, calls)
	if hits == 0 {
		t.Fatal("the memo never answered: the test does not exercise it")
	}
}

// TestSymRefineMemoExact is TestAsymRefineMemoExact for the symmetric refinement (symRefine)
// over every level set: integer grids of 3 to 8 bits and the IQ4 codebook.
func TestSymRefineMemoExact(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 10))
	sets := []*levelSet{levelsQ4_0, levelsQ5_0, levelsQ8_0, levelsQ3_K, levelsQ6_K, levelsIQ4}
	hits, calls := 0, 0
	for g := 0; g < 3000; g++ {
		x, w := memoGroup(r, g)
		ls := sets[g%len(sets)]
		mx, _ := signedMax(x)
		var memo refineMemo
		for k := 0; k < fitTop; k++ {
			id := ls.tc[(k*len(ls.tc))/(2*fitTop)] / mx
			start := make([]int32, len(x))
			for i, v := range x {
				start[i] = ls.nearest(v * id)
			}
			calls++
			if checkMemo(t, g, k, start, &memo, func(q []int32, memo *refineMemo) []float64 {
				s, d, b := symRefine(x, w, ls, q, memo)
				return []float64{s, d, b}
			}) {
				hits++
			}
		}
	}
	t.Logf("%d of %d refinements answered by the memo", hits, calls)
	if hits == 0 {
		t.Fatal("the memo never answered: the test does not exercise it")
	}
}
