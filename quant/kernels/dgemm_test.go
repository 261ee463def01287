package kernels

import (
	"math"
	"testing"
)

// TestSubATB8x16 checks the AVX-512 tile against the Go loop bit for bit (both take one fused
// multiply-subtract per p, in order) and both against a plain float64 sum (relative 1e-13 of
// Σ|a·b|, what k = 300 roundings can move), with leading dimensions larger than the tile.
func TestSubATB8x16(t *testing.T) {
	r := newRNG(11)
	for _, k := range []int{0, 1, 7, 64, 300} {
		lda, ldb, ldc := 13, 21, 19
		a := make([]float64, max(1, k)*lda)
		b := make([]float64, max(1, k)*ldb)
		c0 := make([]float64, 8*ldc)
		for i := range a {
			a[i] = r.NormFloat64() * math.Exp(2*r.NormFloat64())
		}
		for i := range b {
			b[i] = r.NormFloat64()
		}
		for i := range c0 {
			c0[i] = r.NormFloat64() * 10
		}
		var ref []float64
		forEachImpl(t, func(t *testing.T) {
			c := append([]float64(nil), c0...)
			SubATB8x16(k, a, lda, b, ldb, c, ldc)
			if ref == nil {
				ref = c
			} else {
				for i := range c {
					if math.Float64bits(c[i]) != math.Float64bits(ref[i]) {
						t.Fatalf("k=%d: c[%d] = %v, the other path %v", k, i, c[i], ref[i])
					}
				}
			}
			for i := 0; i < 8; i++ {
				for j := 0; j < ldc; j++ {
					want, abs := c0[i*ldc+j], math.Abs(c0[i*ldc+j])
					if j < 16 {
						for p := 0; p < k; p++ {
							want -= a[p*lda+i] * b[p*ldb+j]
							abs += math.Abs(a[p*lda+i] * b[p*ldb+j])
						}
					}
					if d := math.Abs(c[i*ldc+j] - want); d > 1e-13*abs {
						t.Fatalf("k=%d: c[%d][%d] = %v, float64 sum %v", k, i, j, c[i*ldc+j], want)
					}
				}
			}
			// SubATB on the same tile: the same bits as the Go path
			c2 := append([]float64(nil), c0...)
			SubATB(k, 8, 16, a, lda, b, ldb, c2, ldc)
			for i := range c2 {
				if math.Float64bits(c2[i]) != math.Float64bits(c[i]) {
					t.Fatalf("k=%d: SubATB c[%d] = %v, SubATB8x16 %v", k, i, c2[i], c[i])
				}
			}
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("SubATB8x16 accepted a short c")
		}
	}()
	SubATB8x16(1, make([]float64, 8), 8, make([]float64, 16), 16, make([]float64, 16*7), 16)
}

func BenchmarkSubATB8x16(b *testing.B) {
	const k = 64
	a, bb, c := make([]float64, k*8), make([]float64, k*16), make([]float64, 8*16)
	for i := range a {
		a[i] = 1e-3 * float64(i%7)
	}
	for i := range bb {
		bb[i] = 1e-3 * float64(i%5)
	}
	b.SetBytes(2 * 8 * 16 * k) // flops, reported as bytes
	for b.Loop() {
		SubATB8x16(k, a, 8, bb, 16, c, 16)
	}
}
