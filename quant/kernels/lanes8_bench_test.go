package kernels

import (
	"fmt"
	"testing"
)

// BenchmarkSgemmLanes8 measures SgemmLanes8 (and its fp16/bf16-B variants) beside the
// existing Sgemm on the same data in the same run; kernel=sgemm is the baseline, so compare
// the GFLOP/s metrics as ratios:
//
//	w64    a 64-row weight tile against 512 activation rows, k = 4096: A = X (m = 512,
//	       n = 64, C = out[token][row]) and A = W (m = 64, n = 512, C transposed);
//	attn   m = n_kv 512, n = 32, k = 128 (one head's K·Q for a 32-token batch), and the
//	       other orientation with K as B (m = 32, n = 512), the one where fp16 K is read
//	       directly.
//
// Run with: go test ./quant/kernels -bench SgemmLanes8 -run ^$
func BenchmarkSgemmLanes8(b *testing.B) {
	for _, sh := range []struct {
		name    string
		m, n, k int
	}{
		{"w64-A=X/512x64x4096", 512, 64, 4096},
		{"w64-A=W/64x512x4096", 64, 512, 4096},
		{"attn/512x32x128", 512, 32, 128},
		{"attn-K=B/32x512x128", 32, 512, 128},
	} {
		r := newRNG(31)
		a := randFloats(r, sh.m*sh.k, false, 1)
		vals := randFloats(r, sh.n*sh.k, false, 1)
		c := make([]float32, sh.m*sh.n)
		flops := 2 * float64(sh.m) * float64(sh.n) * float64(sh.k)
		for _, kern := range []string{"sgemm", "lanes8", "lanes8-f16", "lanes8-bf16"} {
			var bm lanes8B
			switch kern {
			case "lanes8-f16":
				bm = newLanes8B(l8F16, vals)
			case "lanes8-bf16":
				bm = newLanes8B(l8BF16, vals)
			default:
				bm = newLanes8B(l8F32, vals)
			}
			b.Run(fmt.Sprintf("%s/kernel=%s", sh.name, kern), func(b *testing.B) {
				benchImpls(b, func(b *testing.B) {
					for b.Loop() {
						var err error
						if kern == "sgemm" {
							err = Sgemm(sh.m, sh.n, sh.k, a, sh.k, bm.f32, sh.k, c, sh.n, false)
						} else {
							err = bm.gemm(sh.m, sh.n, sh.k, a, sh.k, sh.k, c, sh.n)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			})
		}
	}
}

// BenchmarkDotLanes8 compares DotLanes8 (one dependent accumulator chain, as tinyBLAS's
// order requires) with DotF32 (four accumulators) at n = 4096, same run.
func BenchmarkDotLanes8(b *testing.B) {
	const n = 4096
	r := newRNG(32)
	x, y := randFloats(r, n, false, 1), randFloats(r, n, false, 1)
	for _, kern := range []string{"DotF32", "DotLanes8"} {
		b.Run("kernel="+kern, func(b *testing.B) {
			benchImpls(b, func(b *testing.B) {
				for b.Loop() {
					if kern == "DotF32" {
						benchSink += DotF32(x, y)
					} else {
						benchSink += DotLanes8(x, y)
					}
				}
				b.ReportMetric(2*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		})
	}
}
