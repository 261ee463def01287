package quant

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/gguf"
)

// TestQuantTable prints the per-type table of docs/quantization.md. It is a report,
// not a check, and takes about a minute, so it only runs on request:
//
//	TQ_QUANT_TABLE=1 go test ./quant/ -run TestQuantTable -v
func TestQuantTable(t *testing.T) {
	if os.Getenv("TQ_QUANT_TABLE") == "" {
		t.Skip("report generator; set TQ_QUANT_TABLE=1 to print the docs/quantization.md table")
	}
	const rows, cols = 32, 4096
	normal := dataset{"normal", rows, cols, gaussian(101, rows*cols)}
	stud := dataset{"student_t3", rows, cols, studentT3(102, rows*cols)}
	im := importanceFor(normal.x, cols, 103)
	var b strings.Builder
	fmt.Fprintf(&b, "| type | bits/w | rel. RMSE N(0,1) ref → improved | rel. RMSE t(3) ref → improved | imatrix-weighted SSE, improved vs ggml imatrix | quantize MB/s ref / ref+imatrix / improved | dequantize MB/s |\n")
	fmt.Fprintf(&b, "|---|---:|---|---|---:|---|---:|\n")
	for _, typ := range weightTypes {
		tr, _ := typ.Traits()
		rel := func(ds dataset, mode Mode) float64 {
			return relRMSE(ds.x, roundTripT(t, typ, ds, &Options{Mode: mode}))
		}
		nR, nI := rel(normal, ModeReference), rel(normal, ModeImproved)
		sR, sI := rel(stud, ModeReference), rel(stud, ModeImproved)
		wG := weightedTensorSSE(normal.x, roundTripT(t, typ, normal, &Options{Importance: im}), cols, im)
		wO := weightedTensorSSE(normal.x, roundTripT(t, typ, normal, &Options{Importance: im, Mode: ModeImproved}), cols, im)
		red := "–"
		if wG > 0 {
			red = fmt.Sprintf("%+.1f %%", 100*(wO/wG-1))
		}
		qs := func(o Options) float64 {
			o.Threads = 1
			dst := make([]byte, rows*mustRowSize(t, typ, cols))
			return cpuRate(t, 4*len(normal.x), func() {
				if err := Quantize(typ, dst, normal.x, rows, cols, &o); err != nil {
					t.Fatal(err)
				}
			})
		}
		q := make([]byte, rows*mustRowSize(t, typ, cols))
		if err := Quantize(typ, q, normal.x, rows, cols, nil); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(normal.x))
		ds := cpuRate(t, 4*len(y), func() { _ = Dequantize(typ, y, q) })
		fmt.Fprintf(&b, "| %s | %.4g | %.4f → %.4f | %.4f → %.4f | %s | %.0f / %.0f / %.1f | %.0f |\n",
			typ, tr.BitsPerWeight(), nR, nI, sR, sI, red,
			qs(Options{}), qs(Options{Importance: im}), qs(Options{Importance: im, Mode: ModeImproved}), ds)
	}
	for _, a := range []struct {
		typ gguf.GGMLType
		f   func([]byte, []float32)
	}{{gguf.TypeQ8_0, QuantizeRowQ8_0}, {gguf.TypeQ8_1, QuantizeRowQ8_1}, {gguf.TypeQ8_K, QuantizeRowQ8K}} {
		dst := make([]byte, mustRowSize(t, a.typ, cols))
		x := normal.x[:cols]
		fmt.Fprintf(&b, "activation %s: %.0f MB/s\n", a.typ, cpuRate(t, 4*cols, func() { a.f(dst, x) }))
	}
	t.Log("\n" + b.String())
}

// cpuRate runs f repeatedly for at least 200 ms of CPU time and returns MB/s of
// CPU time for nbytes per call.
func cpuRate(t *testing.T, nbytes int, f func()) float64 {
	t.Helper()
	f() // warm up
	c0 := cpuTime()
	n := 0
	for cpuTime()-c0 < 200*time.Millisecond {
		f()
		n++
	}
	return float64(n) * float64(nbytes) / (cpuTime() - c0).Seconds() / 1e6
}
