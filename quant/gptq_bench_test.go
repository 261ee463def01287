package quant

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tq-project/tq/gguf"
)

// arHessian returns an n×n Gram matrix with correlated channels at O(n²) cost:
// H_ij = s_i·s_j·ρ^|i−j| (the covariance of an AR(1) process, positive definite)
// with log-normal-like channel scales s.
func arHessian(tb testing.TB, n int, rho float64) *Hessian {
	tb.Helper()
	s := make([]float64, n)
	for i := range s {
		s[i] = math.Exp(0.5 * math.Sin(float64(i)*0.7) * math.Cos(float64(i)*0.013))
	}
	g := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			d := i - j
			if d < 0 {
				d = -d
			}
			g[i*n+j] = s[i] * s[j] * math.Pow(rho, float64(d))
		}
	}
	h, err := NewHessianFromGram(n, g)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// BenchmarkGPTQ times QuantizeGPTQ (Q4_K, all CPUs) on square tensors, including
// the Hessian factorisation (dropped from the cache before every iteration), and
// reports:
//
//	factor_s         seconds of the factorisation alone (once, before the loop)
//	cpu_s            process CPU seconds per op (all threads; less sensitive to a
//	                 loaded machine than ns/op)
//	x_improved       time per op ÷ the time of Quantize(ModeImproved, importance
//	                 diag(H)) on the same tensor (measured once, before the loop)
//	x_improved_cpu   the same ratio in CPU time
//
// Run with
//
//	go test ./quant/ -run '^$' -bench BenchmarkGPTQ -benchtime 1x
func BenchmarkGPTQ(b *testing.B) {
	for _, n := range []int{1024, 4096} {
		b.Run(fmt.Sprintf("q4_K/%dx%d", n, n), func(b *testing.B) {
			typ := gguf.TypeQ4_K
			h := arHessian(b, n, 0.9)
			w := gaussian(uint64(n), n*n)
			dst := make([]byte, n*mustRowSize(b, typ, n))
			t0 := time.Now()
			if _, err := h.factor(gptqDefaultDamp, false); err != nil {
				b.Fatal(err)
			}
			factor := time.Since(t0)
			t0, c0 := time.Now(), cpuTime()
			if err := Quantize(typ, dst, w, n, n, &Options{Mode: ModeImproved, Importance: hessianDiag(h)}); err != nil {
				b.Fatal(err)
			}
			improved, improvedCPU := time.Since(t0), cpuTime()-c0
			b.SetBytes(int64(4 * len(w)))
			b.ResetTimer()
			c0 = cpuTime()
			for b.Loop() {
				h.mu.Lock()
				h.fac = nil
				h.mu.Unlock()
				if err := QuantizeGPTQ(typ, dst, w, n, n, h, nil); err != nil {
					b.Fatal(err)
				}
			}
			cpu := float64(cpuTime()-c0) / float64(b.N)
			b.ReportMetric(factor.Seconds(), "factor_s")
			b.ReportMetric(cpu/1e9, "cpu_s")
			b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(improved), "x_improved")
			b.ReportMetric(cpu/float64(improvedCPU), "x_improved_cpu")
		})
	}
}
