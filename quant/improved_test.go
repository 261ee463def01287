package quant

import (
	"fmt"
	"math"
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
