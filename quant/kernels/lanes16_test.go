package kernels

import (
	"math"
	"testing"
)

// TestLanes16: ToLanes16 and FromLanes16 on both paths (AVX-512 where present) against the
// definition, for sub-block lengths that take the transposes (16, 32, 48) and ones that do
// not (5, 17), with weights given and with x² (including values whose square is subnormal or
// overflows); labels truncated to a byte, negatives included.
func TestLanes16(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{0, 5, 16, 17, 32, 48} {
			r := newRNG(uint64(n) + 29)
			x := randFloats(r, 16*n, true, 1)
			for i := range x {
				switch i % 13 {
				case 3:
					x[i] = 1e-25 // square subnormal
				case 8:
					x[i] = -3e30 // square overflows
				}
			}
			qw := randFloats(r, 16*n, false, 2)
			for _, w := range [][]float32{qw, nil} {
				X := make([]float32, 16*n+3)
				W := make([]float32, 16*n+3)
				ToLanes16(X, W, x, w, n)
				for j := 0; j < 16; j++ {
					for i := 0; i < n; i++ {
						v := x[n*j+i]
						ww := float32(v * v)
						if w != nil {
							ww = w[n*j+i]
						}
						if math.Float32bits(X[16*i+j]) != math.Float32bits(v) || math.Float32bits(W[16*i+j]) != math.Float32bits(ww) {
							t.Fatalf("n=%d weights=%v: lane %d of element %d: (%v, %v), want (%v, %v)", n, w != nil, j, i, X[16*i+j], W[16*i+j], v, ww)
						}
					}
				}
				if X[16*n] != 0 || W[16*n+2] != 0 {
					t.Fatalf("n=%d: written past 16·n", n)
				}
			}
			src := make([]int32, 16*n)
			for i := range src {
				src[i] = int32(r.IntN(1<<20)) - 1<<19
			}
			L := make([]uint8, 16*n+1)
			L[16*n] = 0xAB
			FromLanes16(L, src, n)
			for j := 0; j < 16; j++ {
				for i := 0; i < n; i++ {
					if want := uint8(src[16*i+j]); L[n*j+i] != want {
						t.Fatalf("n=%d: L[%d] = %d, want %d", n, n*j+i, L[n*j+i], want)
					}
				}
			}
			if L[16*n] != 0xAB {
				t.Fatalf("n=%d: FromLanes16 wrote past 16·n", n)
			}
		}
	})
	defer func() {
		if _, ok := recover().(*LengthError); !ok {
			t.Error("short X did not panic with a *LengthError")
		}
	}()
	ToLanes16(make([]float32, 31), make([]float32, 32), make([]float32, 32), nil, 2)
}

// BenchmarkLanes16 moves a pair of Q4_K super-blocks (16 sub-blocks of 32) into the lanes and
// the labels back, on the assembly and pure-Go paths.
func BenchmarkLanes16(b *testing.B) {
	x := make([]float32, 512)
	for i := range x {
		x[i] = float32(i%37) - 18
	}
	X, W := make([]float32, 512), make([]float32, 512)
	src, L := make([]int32, 512), make([]uint8, 512)
	defer SetPureGo(false)
	for _, pure := range []bool{false, true} {
		name := "asm"
		if pure {
			name = "go"
		}
		b.Run(name, func(b *testing.B) {
			SetPureGo(pure)
			for i := 0; i < b.N; i++ {
				ToLanes16(X, W, x, x, 32)
				FromLanes16(L, src, 32)
			}
		})
	}
}

// TestLanes8: ToLanes8 and FromLanes8 on both paths against the definition, as TestLanes16
// (lengths 8, 16, 32 take the transposes; 5 and 17 do not).
func TestLanes8(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{0, 5, 8, 16, 17, 32} {
			r := newRNG(uint64(n) + 31)
			x := randFloats(r, 8*n, true, 1)
			for i := range x {
				switch i % 13 {
				case 3:
					x[i] = 1e-25
				case 8:
					x[i] = -3e30
				}
			}
			qw := randFloats(r, 8*n, false, 2)
			for _, w := range [][]float32{qw, nil} {
				X := make([]float32, 8*n+3)
				W := make([]float32, 8*n+3)
				ToLanes8(X, W, x, w, n)
				for j := 0; j < 8; j++ {
					for i := 0; i < n; i++ {
						v := x[n*j+i]
						ww := float32(v * v)
						if w != nil {
							ww = w[n*j+i]
						}
						if math.Float32bits(X[8*i+j]) != math.Float32bits(v) || math.Float32bits(W[8*i+j]) != math.Float32bits(ww) {
							t.Fatalf("n=%d weights=%v: lane %d of element %d: (%v, %v), want (%v, %v)", n, w != nil, j, i, X[8*i+j], W[8*i+j], v, ww)
						}
					}
				}
				if X[8*n] != 0 || W[8*n+2] != 0 {
					t.Fatalf("n=%d: written past 8·n", n)
				}
			}
			src := make([]int32, 8*n)
			for i := range src {
				src[i] = int32(r.IntN(1<<20)) - 1<<19
			}
			L := make([]uint8, 8*n+1)
			L[8*n] = 0xAB
			FromLanes8(L, src, n)
			for j := 0; j < 8; j++ {
				for i := 0; i < n; i++ {
					if want := uint8(src[8*i+j]); L[n*j+i] != want {
						t.Fatalf("n=%d: L[%d] = %d, want %d", n, n*j+i, L[n*j+i], want)
					}
				}
			}
			if L[8*n] != 0xAB {
				t.Fatalf("n=%d: FromLanes8 wrote past 8·n", n)
			}
		}
	})
	defer func() {
		if _, ok := recover().(*LengthError); !ok {
			t.Error("short src did not panic with a *LengthError")
		}
	}()
	FromLanes8(make([]uint8, 16), make([]int32, 15), 2)
}
