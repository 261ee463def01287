package kernels

import (
	"fmt"
	"testing"
)

// BenchmarkSgemmHalfAMX compares, on the calibration forward's shape (512 activation rows, a
// tile of 64 bf16 weight rows), the AVX-512 FMA path of SgemmHalf with the AMX path: whole
// (split, pack, multiply), with the rows split beforehand (SgemmHalfSplit: pack, multiply),
// the block kernel alone, and the split and the pack alone.
func BenchmarkSgemmHalfAMX(b *testing.B) {
	if !HasAMX() {
		b.Skip("this machine has no AMX-BF16 (or the OS does not grant it)")
	}
	const m, n = 512, 64
	for _, k := range []int{2304, 4608} {
		a := make([]float32, m*k)
		for i := range a {
			a[i] = float32(i%17)*0.1 - 0.8
		}
		w := make([]byte, 2*n*k)
		for i := range w {
			w[i] = byte(i * 7)
			if i%2 == 1 {
				w[i] = 0x3c
			}
		}
		c := make([]float32, m*n)
		flops := func(b *testing.B) {
			b.ReportMetric(float64(2*m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		var s SplitRows
		s.Reset(m, k)
		s.Set(0, m, a, k)
		pk := make([]uint32, amxPackedLen(n, k))
		packBF16AMX(pk, w, k, n, k)
		b.Run(fmt.Sprintf("k=%d/fma", k), func(b *testing.B) {
			SetAMX(false)
			defer SetAMX(true)
			for i := 0; i < b.N; i++ {
				_ = SgemmHalf(BF16, m, n, k, a, k, w, k, c, n, false)
			}
			flops(b)
		})
		b.Run(fmt.Sprintf("k=%d/amx", k), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_ = SgemmHalf(BF16, m, n, k, a, k, w, k, c, n, false)
			}
			flops(b)
		})
		b.Run(fmt.Sprintf("k=%d/amx-split", k), func(b *testing.B) {
			var p []uint32
			for i := 0; i < b.N; i++ {
				p, _ = SgemmHalfSplit(&s, n, w, k, c, n, false, p)
			}
			flops(b)
		})
		b.Run(fmt.Sprintf("k=%d/amx-kernel", k), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				sgemmAMX(&s, n, pk, c, n, false, amxKernelAsm)
			}
			flops(b)
		})
		b.Run(fmt.Sprintf("k=%d/split", k), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				s.Set(0, m, a, k)
			}
			b.ReportMetric(float64(m*k)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mvalues/s")
		})
		b.Run(fmt.Sprintf("k=%d/pack", k), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				packBF16AMX(pk, w, k, n, k)
			}
			b.ReportMetric(float64(n*k)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mvalues/s")
		})
	}
}
