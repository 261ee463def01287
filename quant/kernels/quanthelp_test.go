package kernels

import (
	"math"
	"testing"
)

// TestWeightedSqErr: both paths against the definition computed here element by element in
// float64 (lane i mod 8, lanes added in order; exact bits), on Gaussian and heavy-tailed rows of
// lengths with and without a tail, with and without weights, and against a plain float64 sum
// (relative 1e-12: only the order of addition differs).
func TestWeightedSqErr(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 7, 8, 9, 31, 64, 1283, 4608} {
			for _, heavy := range []bool{false, true} {
				r := newRNG(uint64(n)*2 + 11)
				x := randFloats(r, n, heavy, 0.05)
				y := make([]float32, n)
				for i := range y {
					y[i] = x[i] + float32(0.01*r.NormFloat64())
				}
				w := randFloats(r, n, heavy, 1)
				for i := range w {
					w[i] = float32(math.Abs(float64(w[i])))
				}
				for _, wt := range [][]float32{w, nil} {
					var lanes [16]float64
					var plainN, plainD float64
					for i := range x {
						c := 1.0
						if wt != nil {
							c = float64(wt[i])
						}
						e := float64(x[i]) - float64(y[i])
						lanes[i%8] += float64(float64(c*e) * e)
						lanes[8+i%8] += float64(float64(c*float64(x[i])) * float64(x[i]))
						plainN += c * e * e
						plainD += c * float64(x[i]) * float64(x[i])
					}
					var wantN, wantD float64
					for k := 0; k < 8; k++ {
						wantN += lanes[k]
						wantD += lanes[8+k]
					}
					num, den := WeightedSqErr(x, y, wt)
					if math.Float64bits(num) != math.Float64bits(wantN) || math.Float64bits(den) != math.Float64bits(wantD) {
						t.Fatalf("n=%d heavy=%v weighted=%v: (%v, %v), want (%v, %v)", n, heavy, wt != nil, num, den, wantN, wantD)
					}
					if math.Abs(num-plainN) > 1e-12*plainN || math.Abs(den-plainD) > 1e-12*plainD {
						t.Fatalf("n=%d: (%v, %v), a plain float64 sum gives (%v, %v)", n, num, den, plainN, plainD)
					}
				}
			}
		}
	})
	defer func() {
		if _, ok := recover().(*LengthError); !ok {
			t.Error("short w did not panic with a *LengthError")
		}
	}()
	WeightedSqErr(make([]float32, 9), make([]float32, 9), make([]float32, 8))
}

// TestLerp: both paths against x + t·(y − x) with each operation rounded to float32, for
// several t, lengths with and without a tail, and heavy-tailed values.
func TestLerp(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{0, 3, 8, 17, 1283} {
			r := newRNG(uint64(n) + 3)
			x := randFloats(r, n, true, 1)
			y0 := randFloats(r, n, false, 1)
			for _, s := range []float32{0.5, 0.25, 1.0 / 3, -2} {
				y := append([]float32(nil), y0...)
				Lerp(y, x, s)
				for i := range x {
					d := float32(y0[i] - x[i])
					m := float32(s * d)
					want := float32(x[i] + m)
					if math.Float32bits(y[i]) != math.Float32bits(want) {
						t.Fatalf("n=%d t=%v: y[%d] = %v, want %v", n, s, i, y[i], want)
					}
				}
			}
		}
	})
	defer func() {
		if _, ok := recover().(*LengthError); !ok {
			t.Error("short y did not panic with a *LengthError")
		}
	}()
	Lerp(make([]float32, 3), make([]float32, 4), 0.5)
}

// TestImatrixWeights: both paths against qw·sqrt(sigma2 + x²) with each operation rounded to
// float32 (the square root as float64 rounded to float32, correctly rounded either way), on
// heavy-tailed rows with zeros, subnormals and huge values (the square overflowing to +Inf).
func TestImatrixWeights(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{0, 5, 8, 16, 32, 45, 256} {
			r := newRNG(uint64(n) + 17)
			x := randFloats(r, n, true, 2)
			qw := randFloats(r, n, false, 3)
			for i := range x {
				qw[i] = float32(math.Abs(float64(qw[i])))
				switch i % 11 {
				case 2:
					x[i] = 0
				case 5:
					x[i] = math.Float32frombits(0x00000123) // subnormal
				case 7:
					x[i] = 3e25 // x² overflows
				}
			}
			for _, s2 := range []float32{0, 1.5e-3, 7} {
				w := make([]float32, n)
				ImatrixWeights(w, x, qw, s2)
				for i, v := range x {
					sq := float32(v * v)
					sum := float32(s2 + sq)
					want := float32(qw[i] * float32(math.Sqrt(float64(sum))))
					if math.Float32bits(w[i]) != math.Float32bits(want) {
						t.Fatalf("n=%d sigma2=%v: w[%d] = %v, want %v (x %v)", n, s2, i, w[i], want, v)
					}
				}
			}
		}
	})
	defer func() {
		if _, ok := recover().(*LengthError); !ok {
			t.Error("short qw did not panic with a *LengthError")
		}
	}()
	ImatrixWeights(make([]float32, 4), make([]float32, 4), make([]float32, 3), 1)
}

// TestDequantNibbles: both paths against the per-element definition on every byte value,
// with scales and mins of both signs and magnitudes from subnormal to large.
func TestDequantNibbles(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		q := make([]byte, 256+32)
		for i := range q {
			q[i] = byte(i * 7)
		}
		params := [][4]float32{{0.013, 0.002, -0.5, 3e-3}, {1e-40, -1e-39, 7.5, -2}, {65504, 0, 1e-3, 65504}}
		for _, p := range params {
			for off := 0; off+32 <= len(q); off += 32 {
				y := make([]float32, 64)
				DequantNibbles(y, q[off:off+32], p[0], p[1], p[2], p[3])
				for l := 0; l < 32; l++ {
					lo := float32(p[0]*float32(q[off+l]&15)) - p[1]
					hi := float32(p[2]*float32(q[off+l]>>4)) - p[3]
					if math.Float32bits(y[l]) != math.Float32bits(lo) || math.Float32bits(y[32+l]) != math.Float32bits(hi) {
						t.Fatalf("%v byte %#02x: (%v, %v), want (%v, %v)", p, q[off+l], y[l], y[32+l], lo, hi)
					}
				}
			}
		}
	})
	defer func() {
		if _, ok := recover().(*LengthError); !ok {
			t.Error("short y did not panic with a *LengthError")
		}
	}()
	DequantNibbles(make([]float32, 63), make([]byte, 32), 1, 0, 1, 0)
}

// TestRequantAsym: both paths against clamp(nearest_int((x + dm)/ds), 0, nmax) computed here
// step by step in float32 (ggml's nearest_int), for Q4_K's and Q5_K's ranges and a wide one,
// scales of both signs, values landing on ties and far outside the range, and lengths with
// tails.
func TestRequantAsym(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		for _, n := range []int{0, 3, 8, 32, 37, 256} {
			r := newRNG(uint64(n) + 41)
			x := randFloats(r, n, true, 0.05)
			for i := range x {
				switch i % 9 {
				case 2:
					x[i] = 0.0125 * float32(i%7) // ties for ds 0.025, dm 0
				case 5:
					x[i] = -x[i] * 1e4
				}
			}
			for _, p := range []struct {
				ds, dm float32
				nmax   int32
			}{{0.01, 0.02, 15}, {0.025, 0, 15}, {0.004, 0.06, 31}, {-0.01, 0.03, 15}, {3e-6, 1e-5, 255}} {
				L := make([]uint8, n+1)
				L[n] = 0xCD
				RequantAsym(L, x, p.ds, p.dm, p.nmax)
				for i, v := range x {
					q := float32(float32(v+p.dm) / p.ds)
					m := float32(q + 12582912)
					l := int32(math.Float32bits(m)&0x007fffff) - 0x00400000
					if l < 0 {
						l = 0
					}
					if l > p.nmax {
						l = p.nmax
					}
					if L[i] != uint8(l) {
						t.Fatalf("n=%d %+v: L[%d] = %d, want %d (x %v)", n, p, i, L[i], l, v)
					}
				}
				if L[n] != 0xCD {
					t.Fatalf("n=%d: written past the end", n)
				}
			}
		}
	})
	defer func() {
		if _, ok := recover().(*LengthError); !ok {
			t.Error("short L did not panic with a *LengthError")
		}
	}()
	RequantAsym(make([]uint8, 7), make([]float32, 8), 1, 0, 15)
}
