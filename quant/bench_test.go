package quant

import (
	"fmt"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// Benchmarks (single thread): MB/s of float32 input quantized (Quantize) and of
// float32 output produced (Dequantize). Run with
//
//	go test ./quant/ -run '^$' -bench . -benchtime 3x

const benchRows, benchCols = 16, 4096

func BenchmarkQuantize(b *testing.B) {
	x := gaussian(1, benchRows*benchCols)
	im := importanceFor(x, benchCols, 1)
	modes := []struct {
		name string
		opts Options
	}{
		{"reference", Options{Threads: 1}},
		{"reference_imatrix", Options{Threads: 1, Importance: im}},
		{"improved", Options{Threads: 1, Mode: ModeImproved}},
		{"improved_imatrix", Options{Threads: 1, Mode: ModeImproved, Importance: im}},
	}
	for _, typ := range weightTypes {
		for _, m := range modes {
			b.Run(typ.String()+"/"+m.name, func(b *testing.B) {
				dst := make([]byte, benchRows*mustRowSize(b, typ, benchCols))
				b.SetBytes(int64(4 * len(x)))
				b.ReportAllocs()
				for b.Loop() {
					if err := Quantize(typ, dst, x, benchRows, benchCols, &m.opts); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkDequantize(b *testing.B) {
	x := gaussian(2, benchRows*benchCols)
	for _, typ := range append(append([]gguf.GGMLType{}, weightTypes...), gguf.TypeQ8_K) {
		q := make([]byte, benchRows*mustRowSize(b, typ, benchCols))
		if err := Quantize(typ, q, x, benchRows, benchCols, nil); err != nil {
			b.Fatal(err)
		}
		y := make([]float32, len(x))
		b.Run(typ.String(), func(b *testing.B) {
			b.SetBytes(int64(4 * len(y)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Dequantize(typ, y, q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkActivation(b *testing.B) {
	x := gaussian(3, benchCols)
	acts := []struct {
		name string
		typ  gguf.GGMLType
		f    func([]byte, []float32)
	}{
		{"q8_0", gguf.TypeQ8_0, QuantizeRowQ8_0},
		{"q8_1", gguf.TypeQ8_1, QuantizeRowQ8_1},
		{"q8_K", gguf.TypeQ8_K, QuantizeRowQ8K},
	}
	for _, a := range acts {
		dst := make([]byte, mustRowSize(b, a.typ, benchCols))
		b.Run(a.name, func(b *testing.B) {
			b.SetBytes(int64(4 * len(x)))
			b.ReportAllocs()
			for b.Loop() {
				a.f(dst, x)
			}
		})
	}
}

// TestQuantizeAllocs: the per-row work does not allocate; a call allocates a
// constant amount (worker scratch, closures) whatever the number of rows.
func TestQuantizeAllocs(t *testing.T) {
	for _, typ := range []gguf.GGMLType{gguf.TypeQ4_K, gguf.TypeIQ4_XS, gguf.TypeQ4_0} {
		for _, mode := range []Mode{ModeReference, ModeImproved} {
			allocs := func(rows int) float64 {
				x := gaussian(4, rows*256)
				dst := make([]byte, rows*mustRowSize(t, typ, 256))
				opts := &Options{Threads: 1, Mode: mode, Importance: importanceFor(x, 256, 2)}
				return testing.AllocsPerRun(3, func() {
					if err := Quantize(typ, dst, x, rows, 256, opts); err != nil {
						t.Fatal(err)
					}
				})
			}
			if a, b := allocs(2), allocs(64); a != b || b > 8 {
				t.Errorf("%v %v: %v allocations for 2 rows, %v for 64", typ, mode, a, b)
			}
		}
	}
	y := make([]float32, 4096)
	q := make([]byte, mustRowSize(t, gguf.TypeQ6_K, 4096))
	if a := testing.AllocsPerRun(5, func() { _ = Dequantize(gguf.TypeQ6_K, y, q) }); a != 0 {
		t.Errorf("Dequantize allocates %v times", a)
	}
}

// BenchmarkKQuantLanes: ggml's K-quant quantizers, with importance (Q4_K's is the sensitivity
// probes' encoder) and without, with the 16-lane AVX-512 scale searches and with the 8-lane
// AVX2 ones alone.
func BenchmarkKQuantLanes(b *testing.B) {
	x := gaussian(1, benchRows*benchCols)
	im := importanceFor(x, benchCols, 1)
	defer kernels.SetLaneSearch16(true)
	for _, typ := range []gguf.GGMLType{gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K, gguf.TypeQ3_K, gguf.TypeQ2_K} {
		for _, imp := range [][]float32{im, nil} {
			mode := "imatrix"
			if imp == nil {
				mode = "reference"
			}
			for _, lanes := range []int{16, 8} {
				b.Run(fmt.Sprintf("%s/%s/%dlanes", typ, mode, lanes), func(b *testing.B) {
					kernels.SetLaneSearch16(lanes == 16)
					if lanes == 16 && !kernels.HasLaneSearch16() {
						b.Skip("no AVX-512F assembly")
					}
					dst := make([]byte, benchRows*mustRowSize(b, typ, benchCols))
					b.SetBytes(int64(4 * len(x)))
					for b.Loop() {
						if err := Quantize(typ, dst, x, benchRows, benchCols, &Options{Threads: 1, Importance: imp}); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
