package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// TestMatMulKAccuracy checks MatMulK against a float64 reference of the same quantized
// operands (refDot: exact dequantized products summed in float64) on random and
// heavy-tailed data, on both paths. Tolerance: refTol(super-blocks)·S with S the sum of
// |scale part| + |min part| of every term, the bound the Dot kernels are tested to.
func TestMatMulKAccuracy(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(56)
		const rows, n, T = 7, 2048, 9
		nb := n / QK_K
		for _, wt := range []Type{Q4_K, Q5_K, Q6_K} {
			for _, heavy := range []bool{false, true} {
				w := randWeights(r, wt, rows*nb, 0.02, heavy)
				xRow := nb * BlockBytesQ8_K
				xq := make([]byte, T*xRow)
				for k := 0; k < T; k++ {
					copy(xq[k*xRow:], quantizeActs(Q8_K, randFloats(r, n, heavy, 1)))
				}
				rowBytes := nb * BlockBytes(wt)
				y := make([]float32, T*rows)
				if err := MatMulK(wt, y, rows, w, rowBytes, xq, xRow, T, 0, rows); err != nil {
					t.Fatal(err)
				}
				worst := 0.0
				for k := 0; k < T; k++ {
					for i := 0; i < rows; i++ {
						ref, s := refDot(wt, w[i*rowBytes:], Q8_K, xq[k*xRow:], n)
						d := math.Abs(float64(y[k*rows+i]) - ref)
						if d > refTol(nb)*s || s == 0 {
							t.Fatalf("%v heavy=%v token %d row %d: %g, reference %g (S %g, tolerance %g)", wt, heavy, k, i, y[k*rows+i], ref, s, refTol(nb)*s)
						}
						worst = max(worst, d/s)
					}
				}
				t.Logf("%v heavy=%v: worst |err|/S = %.3g (tolerance %.3g)", wt, heavy, worst, refTol(nb))
			}
		}
	})
}

// ktPrepKXGo is the Go model of ktPrepQ2/ktPrepQ3/ktPrepIQ4: the tables of the nb Q2_K,
// Q3_K or IQ4_XS super-blocks of weight row w, stride bytes apart from tab[0].
func ktPrepKXGo(t Type, w []byte, nb int, tab []byte, stride int) {
	var q [QK_K]int32
	var sc [16]int32
	var m2 [16]int32
	wb := ktBlockBytes(t)
	le := binary.LittleEndian
	for b := 0; b < nb; b++ {
		blk := w[b*wb : (b+1)*wb]
		tb := tab[b*stride : b*stride+ktTabBytes(t)]
		var d float32
		switch t {
		case Q2_K:
			var dm float32
			d, dm = ktDecodeQ2(&q, &sc, &m2, blk)
			for i := 0; i < 16; i++ {
				le.PutUint16(tb[544+2*i:], uint16(m2[i]))
			}
			for i := 0; i < 8; i++ {
				le.PutUint32(tb[576+4*i:], math.Float32bits(dm))
			}
		case Q3_K:
			d = ktDecodeQ3(&q, &sc, blk)
			for k := 0; k < 8; k++ {
				var c int32
				for g := 0; g < 8; g++ {
					e := 32*g + 4*k
					c += sc[2*g+k/4] * (q[e] + q[e+1] + q[e+2] + q[e+3])
				}
				le.PutUint32(tb[544+4*k:], uint32(-128*c))
			}
		default:
			d = ktDecodeIQ4(&q, &sc, blk)
			for i, v := range q {
				tb[544+i] = byte(int8(v))
			}
		}
		for i, v := range q {
			if t == IQ4_XS && v < 0 {
				v = -v
			}
			tb[i] = byte(int8(v))
		}
		for g := 0; g < 8; g++ {
			for i := 0; i < 16; i++ {
				le.PutUint16(tb[256+32*g+2*i:], uint16(sc[2*g+i/8]))
			}
		}
		for i := 0; i < 8; i++ {
			le.PutUint32(tb[512+4*i:], math.Float32bits(d))
		}
	}
}

// TestKTilePrepKX: the assembly prepare kernels of Q2_K, Q3_K and IQ4_XS write the tables
// of their Go model byte for byte (random bytes, finite scales; stride larger than a table).
func TestKTilePrepKX(t *testing.T) {
	if !UsingAsm() {
		t.Skip("no assembly kernels on this machine/build")
	}
	r := newRNG(57)
	const nb = 5
	for _, wt := range []Type{Q2_K, Q3_K, IQ4_XS} {
		tb := ktTabBytes(wt)
		stride := 3 * tb
		for rep := 0; rep < 20; rep++ {
			w := ktBenchWeights(r, wt, nb)
			want := make([]byte, nb*stride)
			got := make([]byte, nb*stride)
			for i := range got {
				got[i] = byte(i)
				want[i] = byte(i)
			}
			ktPrepKXGo(wt, w, nb, want, stride)
			switch wt {
			case Q2_K:
				ktPrepQ2(&w[0], nb, &got[0], stride)
			case Q3_K:
				ktPrepQ3(&w[0], nb, &got[0], stride)
			default:
				ktPrepIQ4(&w[0], nb, &got[0], stride)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%v: table byte %d (super-block %d, offset %d): asm %#02x, Go %#02x", wt, i, i/stride, i%stride, got[i], want[i])
				}
			}
		}
	}
}

// ktRefKX returns the float64 reference Σ w·x of a Q2_K, Q3_K or IQ4_XS row and a Q8_K row
// and S = Σ |scale part| + |min part| of every term (exactly decoded operands).
func ktRefKX(wt Type, w, x []byte, nb int) (ref, s float64) {
	var q [QK_K]int32
	var sc, m2 [16]int32
	wb := ktBlockBytes(wt)
	for b := 0; b < nb; b++ {
		blk := w[b*wb : (b+1)*wb]
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		dx := float64(q8kScale(xb))
		var d, dm float64
		switch wt {
		case Q2_K:
			d32, dm32 := ktDecodeQ2(&q, &sc, &m2, blk)
			d, dm = float64(d32), float64(dm32)
		case Q3_K:
			d = float64(ktDecodeQ3(&q, &sc, blk))
		default:
			d = float64(ktDecodeIQ4(&q, &sc, blk))
		}
		for e := 0; e < QK_K; e++ {
			xv := dx * float64(int8(xb[4+e]))
			wv := d * float64(sc[e/16]*q[e])
			mv := dm * float64(m2[e/16])
			ref += (wv - mv) * xv
			s += (math.Abs(wv) + math.Abs(mv)) * math.Abs(xv)
		}
	}
	return ref, s
}

// TestMatMulKAccuracyKX checks MatMulK on Q2_K, Q3_K and IQ4_XS weights against ktRefKX on
// random and heavy-tailed activations, both paths, with the tolerance of TestMatMulKAccuracy.
func TestMatMulKAccuracyKX(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(58)
		const rows, n, T = 7, 2048, 9
		nb := n / QK_K
		for _, wt := range []Type{Q2_K, Q3_K, IQ4_XS} {
			for _, heavy := range []bool{false, true} {
				w := ktBenchWeights(r, wt, rows*nb)
				xRow := nb * BlockBytesQ8_K
				xq := make([]byte, T*xRow)
				for k := 0; k < T; k++ {
					copy(xq[k*xRow:], quantizeActs(Q8_K, randFloats(r, n, heavy, 1)))
				}
				rowBytes := nb * ktBlockBytes(wt)
				y := make([]float32, T*rows)
				if err := MatMulK(wt, y, rows, w, rowBytes, xq, xRow, T, 0, rows); err != nil {
					t.Fatal(err)
				}
				worst := 0.0
				for k := 0; k < T; k++ {
					for i := 0; i < rows; i++ {
						ref, s := ktRefKX(wt, w[i*rowBytes:], xq[k*xRow:], nb)
						d := math.Abs(float64(y[k*rows+i]) - ref)
						if d > refTol(nb)*s || s == 0 {
							t.Fatalf("%v heavy=%v token %d row %d: %g, reference %g (S %g, tolerance %g)", wt, heavy, k, i, y[k*rows+i], ref, s, refTol(nb)*s)
						}
						worst = max(worst, d/s)
					}
				}
				t.Logf("%v heavy=%v: worst |err|/S = %.3g (tolerance %.3g)", wt, heavy, worst, refTol(nb))
			}
		}
	})
}

// ktBenchWeights returns nb random super-blocks of type wt with random finite fp16 scales.
func ktBenchWeights(r *rand.Rand, wt Type, nb int) []byte {
	var offs []int
	switch wt {
	case Q2_K:
		offs = []int{80, 82}
	case Q3_K:
		offs = []int{108}
	case IQ4_XS:
		offs = []int{0}
	default:
		return randWeights(r, wt, nb, 0.02, false)
	}
	bs := ktBlockBytes(wt)
	w := make([]byte, nb*bs)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for b := 0; b < nb; b++ {
		for _, o := range offs {
			binary.LittleEndian.PutUint16(w[b*bs+o:], randHalf(r, 0.02, false))
		}
	}
	return w
}
