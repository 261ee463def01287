package kernels

import (
	"fmt"
	"math"
	"testing"

	"github.com/tq-project/tq/internal/testenv"
)

var goldenWeightFiles = map[Type]string{
	Q8_0: "Q8_0", Q4_0: "Q4_0", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K",
}

var goldenActFiles = map[Type]string{Q8_0: "Q8_0.cpu_from_float", Q8_K: "Q8_K.cpu_from_float"}

// TestDequantHelperGolden validates the test-only decoder (used for every reference below)
// against ggml's dequantized floats, bit for bit, for both quantization runs.
func TestDequantHelperGolden(t *testing.T) {
	for _, typ := range []Type{Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q8_K} {
		file := goldenWeightFiles[typ]
		if typ == Q8_K {
			file = goldenActFiles[Q8_K]
		}
		g := loadGolden(t, file, BlockBytes(typ))
		var n int
		for _, c := range g.Cases {
			for _, run := range []struct {
				q []byte
				y []float32
			}{{c.Q, c.Y}, {c.QIm, c.YIm}} {
				if run.q == nil {
					continue
				}
				for r := 0; r < c.Rows; r++ {
					es := decodeRow(typ, run.q[r*c.RowBytes:], c.Cols)
					for i, e := range es {
						want := run.y[r*c.Cols+i]
						if got := e.ggml(); math.Float32bits(got) != math.Float32bits(want) {
							t.Fatalf("%v %s row %d [%d]: decoded %g, ggml %g", typ, c.Name, r, i, got, want)
						}
						n++
					}
				}
			}
		}
		t.Logf("%v: %d dequantized values bit-exact", typ, n)
	}
}

// refTol is the allowed |kernel − float64 reference| relative to S = Σ|w_i x_i| (with
// w_i's scale and min parts taken separately in absolute value for Q4_K/Q5_K): a float32
// rounding per product and per accumulation step, (blocks + 8)·2⁻²².
func refTol(nb int) float64 { return float64(nb+8) * 4 * u32 }

// TestDotGoldenReference: ggml-quantized weights (both runs, every case, including the edge
// rows) against ggml-quantized activations, both paths vs a float64 reference.
func TestDotGoldenReference(t *testing.T) {
	for _, wt := range quantTypes {
		at, _ := ActivationType(wt)
		gw := loadGolden(t, goldenWeightFiles[wt], BlockBytes(wt))
		ga := loadGolden(t, goldenActFiles[at], BlockBytes(at))
		acts := map[string]testenv.GoldenCase{}
		for _, c := range ga.Cases {
			acts[c.Name] = c
		}
		t.Run(wt.String(), func(t *testing.T) {
			forEachImpl(t, func(t *testing.T) {
				dot := kernelFor(wt)
				var worst float64
				var count int
				for _, c := range gw.Cases {
					ac, ok := acts[c.Name]
					if !ok || ac.Cols != c.Cols {
						t.Fatalf("no activation case matching %q", c.Name)
					}
					nb := c.Cols / BlockSize(wt)
					for _, q := range [][]byte{c.Q, c.QIm} {
						if q == nil {
							continue
						}
						for r := 0; r < c.Rows; r++ {
							w := q[r*c.RowBytes : (r+1)*c.RowBytes]
							ar := (r + 3) % ac.Rows
							x := ac.Q[ar*ac.RowBytes : (ar+1)*ac.RowBytes]
							got := float64(dot(c.Cols, w, x))
							ref, s := refDot(wt, w, at, x, c.Cols)
							err := math.Abs(got - ref)
							if err > refTol(nb)*s {
								t.Errorf("%s row %d · act row %d: got %.9g, reference %.9g, |err| = %.3g > %.3g = tol·S",
									c.Name, r, ar, got, ref, err, refTol(nb)*s)
							}
							if s > 0 {
								worst = max(worst, err/s)
							}
							count++
						}
					}
				}
				t.Logf("%d rows; worst |err|/S = %.3g (tolerance %.3g at n=1024)", count, worst, refTol(1024/BlockSize(wt)))
			})
		})
	}
}

// TestDotRandomReference: random weight blocks (normal and heavy-tailed scales) against
// activations quantized from normal and Student-t data, for many block counts.
func TestDotRandomReference(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(1)
		for _, wt := range quantTypes {
			at, _ := ActivationType(wt)
			dot := kernelFor(wt)
			var worst float64
			for _, nb := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 33, 257, 600} {
				n := nb * BlockSize(wt)
				for _, heavy := range []bool{false, true} {
					w := randWeights(r, wt, nb, 0.01, heavy)
					x := quantizeActs(at, randFloats(r, n, heavy, 1))
					got := float64(dot(n, w, x))
					ref, s := refDot(wt, w, at, x, n)
					if err := math.Abs(got - ref); err > refTol(nb)*s {
						t.Errorf("%v nb=%d heavy=%v: got %.9g, reference %.9g, |err|/S = %.3g > %.3g",
							wt, nb, heavy, got, ref, err/s, refTol(nb))
					} else if s > 0 {
						worst = max(worst, err/s)
					}
				}
			}
			t.Logf("%v: worst |err|/S = %.3g", wt, worst)
		}
	})
}

// asmTol is the allowed |asm − purego| relative to termScale: both sum the same exact
// integer block sums in float32, in different orders.
func asmTol(nb int) float64 { return 2 * float64(nb+16) * u32 }

// TestDotAsmMatchesGo feeds both paths arbitrary weight bytes and arbitrary activation quants
// (−128 included for Q8_K, inconsistent bsums included) with finite scales.
func TestDotAsmMatchesGo(t *testing.T) {
	if !HasAsm() {
		t.Skip("no assembly kernels on this machine/build")
	}
	r := newRNG(2)
	for _, wt := range quantTypes {
		at, _ := ActivationType(wt)
		dot := kernelFor(wt)
		var worst float64
		for nb := 1; nb <= 40; nb++ {
			n := nb * BlockSize(wt)
			for rep := 0; rep < 3; rep++ {
				w := randWeights(r, wt, nb, 1, rep == 2)
				x := rawActs(r, at, nb)
				if rep == 1 {
					x = quantizeActs(at, randFloats(r, n, true, 10))
				}
				g := withImpl(true, func() float32 { return dot(n, w, x) })
				a := withImpl(false, func() float32 { return dot(n, w, x) })
				s := termScale(wt, w, x, n)
				if err := math.Abs(float64(a) - float64(g)); err > asmTol(nb)*s {
					t.Errorf("%v nb=%d rep=%d: asm %.9g, purego %.9g, |diff|/S = %.3g > %.3g", wt, nb, rep, a, g, err/s, asmTol(nb))
				} else if s > 0 {
					worst = max(worst, err/s)
				}
			}
		}
		t.Logf("%v: worst |asm−go|/S = %.3g", wt, worst)
	}
}

// TestDotExtremeQuants pins the integer paths at their extremes (weight quants −128/127 or
// the largest 4/5/6-bit values; activation quants −128 (Q8_K; Q8_0 allows ±127) and 127),
// where the exact sums need the full int16 pair range of the multiply instructions.
func TestDotExtremeQuants(t *testing.T) {
	for _, wt := range quantTypes {
		at, _ := ActivationType(wt)
		for _, wb := range []byte{0x00, 0xff, 0x80, 0x7f} {
			for _, xb := range []byte{0x80, 0x7f, 0x81} {
				if at == Q8_0 && xb == 0x80 {
					continue // outside the Q8_0 activation range
				}
				nb := 3
				n := nb * BlockSize(wt)
				w := make([]byte, nb*BlockBytes(wt))
				for i := range w {
					w[i] = wb
				}
				x := make([]byte, nb*BlockBytes(at))
				for i := range x {
					x[i] = xb
				}
				// Normal scales: 1.0 in fp16 (0x3c00) and float32 for Q8_K d.
				for b := 0; b < nb; b++ {
					switch wt {
					case Q8_0, Q4_0:
						w[b*BlockBytes(wt)], w[b*BlockBytes(wt)+1] = 0x00, 0x3c
					case Q4_K, Q5_K:
						copy(w[b*BlockBytes(wt):], []byte{0x00, 0x3c, 0x00, 0x3c})
					case Q6_K:
						w[b*210+208], w[b*210+209] = 0x00, 0x3c
					}
					if at == Q8_0 {
						x[b*34], x[b*34+1] = 0x00, 0x3c
					} else {
						copy(x[b*292:], []byte{0, 0, 0x80, 0x3f})
					}
				}
				ref := exactKernelSum(wt, w, x, n)
				s := termScale(wt, w, x, n)
				forEachImpl(t, func(t *testing.T) {
					got := float64(kernelFor(wt)(n, w, x))
					if math.Abs(got-ref) > asmTol(nb)*s {
						t.Errorf("%v w=%#02x x=%#02x: got %.10g, exact %.10g", wt, wb, xb, got, ref)
					}
				})
			}
		}
	}
}

// exactKernelSum evaluates the kernels' formula in float64 with exact integers (bsums as
// stored), for scales that make every product exact.
func exactKernelSum(wt Type, w, x []byte, n int) float64 {
	at, _ := ActivationType(wt)
	we := decodeRow(wt, w, n)
	xe := decodeRow(at, x, n)
	var s float64
	for i := range we {
		e := we[i]
		s += float64(e.d) * float64(xe[i].d) * float64(e.sc) * float64(e.q) * float64(xe[i].q)
	}
	if wt == Q4_K || wt == Q5_K || wt == Q6_K {
		// Replace the true Σx by the stored bsums: remove what decodeRow's min/offset part
		// contributed through x and add it back through bsums.
		for b := 0; b < n/256; b++ {
			xb := x[b*292:]
			for sb := 0; sb < 16; sb++ {
				bsum := float64(int16(uint16(xb[260+2*sb]) | uint16(xb[261+2*sb])<<8))
				var qsum float64
				for j := 0; j < 16; j++ {
					qsum += float64(xe[b*256+16*sb+j].q)
				}
				e := we[b*256+16*sb]
				dx := float64(xe[b*256].d)
				if wt == Q6_K {
					// decodeRow's q already has −32; the kernel uses −32·bsum instead of −32·Σq.
					s += float64(e.d) * dx * float64(e.sc) * (-32) * (bsum - qsum)
				} else {
					s -= float64(e.dmin) * dx * float64(e.m) * bsum
				}
			}
		}
	}
	return s
}

func TestDotLengthPanics(t *testing.T) {
	for _, wt := range quantTypes {
		at, _ := ActivationType(wt)
		dot := kernelFor(wt)
		bs := BlockSize(wt)
		w := make([]byte, 2*BlockBytes(wt))
		x := make([]byte, 2*BlockBytes(at))
		name := fmt.Sprintf("Dot %v", wt)
		expectLengthPanic(t, name+" odd n", func() { dot(bs+1, w, x) })
		expectLengthPanic(t, name+" negative n", func() { dot(-bs, w, x) })
		expectLengthPanic(t, name+" short w", func() { dot(2*bs, w[:len(w)-1], x) })
		expectLengthPanic(t, name+" short x", func() { dot(2*bs, w, x[:len(x)-1]) })
		expectLengthPanic(t, name+" n too big", func() { dot(3*bs, w, x) })
		if got := dot(0, nil, nil); got != 0 {
			t.Fatalf("%s: n=0 gave %g", name, got)
		}
	}
	expectLengthPanic(t, "DotF32", func() { DotF32(make([]float32, 5), make([]float32, 4)) })
	expectLengthPanic(t, "DotF16F32", func() { DotF16F32(make([]byte, 9), make([]float32, 5)) })
	expectLengthPanic(t, "DotBF16F32", func() { DotBF16F32(make([]byte, 9), make([]float32, 5)) })
}

// TestHugeLengths: lengths whose byte counts overflow int are rejected, not wrapped.
func TestHugeLengths(t *testing.T) {
	const huge = math.MaxInt &^ 255
	w := make([]byte, 1024)
	for _, wt := range quantTypes {
		dot := kernelFor(wt)
		expectLengthPanic(t, wt.String()+" huge n", func() { dot(huge, w, w) })
		if err := MatVec(wt, make([]float32, 1), w, math.MaxInt/BlockBytes(wt)*BlockBytes(wt), w, 0, 1); err == nil {
			t.Errorf("%v: MatVec accepted a huge row size", wt)
		}
	}
	if err := Sgemm(1<<40, 2, 1<<30, make([]float32, 8), 1<<40, make([]float32, 8), 1<<30, make([]float32, 8), 2, false); err == nil {
		t.Error("Sgemm accepted dimensions whose extent overflows")
	}
	if err := MatVecFloat(F32, make([]float32, 1), w, math.MaxInt, make([]float32, 4), 0, 1); err == nil {
		t.Error("MatVecFloat accepted a row size beyond the weights")
	}
}
