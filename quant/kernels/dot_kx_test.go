package kernels_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
)

// Tests of the Q2_K / Q3_K / IQ4_XS · Q8_K kernels that need no llama.cpp: assembly against
// the pure-Go twin bit for bit, both against a float64 reference, the length contract, and a
// fuzz test. dot_kx_oracle_test.go checks the bits against ggml itself.

type kxCase struct {
	name string
	gt   gguf.GGMLType
	wb   int                              // bytes per super-block
	dfp  []int                            // offsets of the fp16 scales in a block
	dot  func(n int, w, x []byte) float32 // the exported kernel
}

var kxCases = []kxCase{
	{"q2_K", gguf.TypeQ2_K, kernels.BlockBytesQ2_K, []int{80, 82}, kernels.DotQ2_KQ8K},
	{"q3_K", gguf.TypeQ3_K, kernels.BlockBytesQ3_K, []int{108}, kernels.DotQ3_KQ8K},
	{"iq4_xs", gguf.TypeIQ4_XS, kernels.BlockBytesIQ4_XS, []int{0}, kernels.DotIQ4_XSQ8K},
}

// kxQuantWeights quantizes rows×n normal or Student-t floats (per-row scale drawn from a
// wide log-normal range) with the quant package.
func kxQuantWeights(tb testing.TB, r *rand.Rand, c kxCase, rows, n int, heavy bool) []byte {
	tb.Helper()
	src := make([]float32, 0, rows*n)
	for i := 0; i < rows; i++ {
		src = append(src, extFloats(r, n, heavy, 0.02*math.Exp(1.5*r.NormFloat64()))...)
	}
	w := make([]byte, rows*n/kernels.QK_K*c.wb)
	if err := quant.Quantize(c.gt, w, src, rows, n, nil); err != nil {
		tb.Fatalf("quantizing %s: %v", c.name, err)
	}
	return w
}

// kxRawWeights returns rows×n weights of random bytes with random finite fp16 scales.
func kxRawWeights(r *rand.Rand, c kxCase, rows, n int) []byte {
	w := make([]byte, rows*n/kernels.QK_K*c.wb)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for b := 0; b < len(w)/c.wb; b++ {
		for _, off := range c.dfp {
			binary.LittleEndian.PutUint16(w[b*c.wb+off:], extHalf(r, 0.01*math.Exp(2*r.NormFloat64())))
		}
	}
	return w
}

// kxRawActs returns n/256 Q8_K blocks of random bytes (quants include −128, bsums arbitrary)
// with random finite scales.
func kxRawActs(r *rand.Rand, n int) []byte {
	x := make([]byte, n/kernels.QK_K*kernels.BlockBytesQ8_K)
	for i := range x {
		x[i] = byte(r.Uint32())
	}
	for b := 0; b < len(x)/kernels.BlockBytesQ8_K; b++ {
		binary.LittleEndian.PutUint32(x[b*kernels.BlockBytesQ8_K:], math.Float32bits(float32(r.NormFloat64()*0.05)))
	}
	return x
}

func kxQ8K(x []float32) []byte {
	q := make([]byte, len(x)/kernels.QK_K*kernels.BlockBytesQ8_K)
	kernels.QuantizeRowQ8K(q, x)
	return q
}

// kxBoth returns the assembly and pure-Go results (asm = Go's when there is no assembly).
func kxBoth(c kxCase, n int, w, x []byte) (asm, pure float32) {
	kernels.SetPureGo(true)
	pure = c.dot(n, w, x)
	kernels.SetPureGo(false)
	return c.dot(n, w, x), pure
}

func TestDotKXAsmMatchesGo(t *testing.T) {
	if !kernels.HasAsm() {
		t.Skip("no assembly kernels on this machine/build: nothing to compare the pure-Go twins with")
	}
	for ci, c := range kxCases {
		for _, n := range []int{256, 768, 2304, 4096} {
			for kind := 0; kind < 4; kind++ { // quantized normal, quantized Student-t, raw bytes ×2
				t.Run(fmt.Sprintf("%s/n=%d/kind=%d", c.name, n, kind), func(t *testing.T) {
					r := extRNG(uint64(1000*ci + 10*n + kind))
					const rows = 4
					var w []byte
					if kind < 2 {
						w = kxQuantWeights(t, r, c, rows, n, kind == 1)
					} else {
						w = kxRawWeights(r, c, rows, n)
					}
					rowBytes := n / kernels.QK_K * c.wb
					acts := [][]byte{kxQ8K(extFloats(r, n, false, 1)), kxQ8K(extFloats(r, n, true, 3)), kxRawActs(r, n)}
					for i := 0; i < rows; i++ {
						for ai, x := range acts {
							a, g := kxBoth(c, n, w[i*rowBytes:(i+1)*rowBytes], x)
							if math.Float32bits(a) != math.Float32bits(g) {
								t.Errorf("row %d acts %d: asm %v (%08x), Go %v (%08x)", i, ai, a, math.Float32bits(a), g, math.Float32bits(g))
							}
						}
					}
				})
			}
		}
	}
}

// kxPartScale bounds Σ_i |x_i|·(magnitude of the float parts making weight i): |w_i| for
// Q3_K and IQ4_XS; for Q2_K, whose weight d·sc·q − dmin·m may cancel, |d·sc·3| + |dmin·m|.
func kxPartScale(c kxCase, w []byte, wf, xf []float64) float64 {
	var s float64
	for i := range xf {
		if c.gt != gguf.TypeQ2_K {
			s += math.Abs(wf[i] * xf[i])
			continue
		}
		blk := w[i/kernels.QK_K*c.wb:]
		sub := i % kernels.QK_K / 16
		d := float64(quant.FP16ToFP32(binary.LittleEndian.Uint16(blk[80:])))
		dmin := float64(quant.FP16ToFP32(binary.LittleEndian.Uint16(blk[82:])))
		s += (math.Abs(d*float64(blk[sub]&15)*3) + math.Abs(dmin*float64(blk[sub]>>4))) * math.Abs(xf[i])
	}
	return s
}

// TestDotKXMatchesFloat64 compares both paths with Σ w·x in float64, w from quant.Dequantize
// and x = d·q from the Q8_K block. Tolerance: the kernels' float steps (d·dx, one FMA per
// super-block and lane, the 8-lane sum) and the reference's float32 dequantization each err
// by at most a few units of roundoff of the part magnitudes, so |err| ≤ 2·(nb+10)·2⁻²⁴·S with
// S from kxPartScale; one misplaced element or scale is far outside it.
func TestDotKXMatchesFloat64(t *testing.T) {
	for ci, c := range kxCases {
		for _, n := range []int{256, 4096} {
			for heavy := 0; heavy < 2; heavy++ {
				t.Run(fmt.Sprintf("%s/n=%d/heavy=%d", c.name, n, heavy), func(t *testing.T) {
					r := extRNG(uint64(77 + 100*ci + n + heavy))
					const rows = 6
					w := kxQuantWeights(t, r, c, rows, n, heavy == 1)
					wf32 := make([]float32, rows*n)
					if err := quant.Dequantize(c.gt, wf32, w); err != nil {
						t.Fatal(err)
					}
					xq := kxQ8K(extFloats(r, n, heavy == 1, 1))
					xf := make([]float64, n)
					for i := range xf {
						blk := xq[i/kernels.QK_K*kernels.BlockBytesQ8_K:]
						dx := math.Float32frombits(binary.LittleEndian.Uint32(blk))
						xf[i] = float64(dx) * float64(int8(blk[4+i%kernels.QK_K]))
					}
					rowBytes := n / kernels.QK_K * c.wb
					nb := n / kernels.QK_K
					for i := 0; i < rows; i++ {
						wr := w[i*rowBytes : (i+1)*rowBytes]
						wf := make([]float64, n)
						var want float64
						for e := range wf {
							wf[e] = float64(wf32[i*n+e])
							want += wf[e] * xf[e]
						}
						tol := 2 * float64(nb+10) * 0x1p-24 * kxPartScale(c, wr, wf, xf)
						a, g := kxBoth(c, n, wr, xq)
						for _, got := range []float32{a, g} {
							if err := math.Abs(float64(got) - want); !(err <= tol) {
								t.Errorf("row %d: got %v, want %v (|err| %.3g > tol %.3g)", i, got, want, err, tol)
							}
						}
					}
				})
			}
		}
	}
}

func TestDotKXLengths(t *testing.T) {
	for _, c := range kxCases {
		w := make([]byte, 2*c.wb)
		x := make([]byte, 2*kernels.BlockBytesQ8_K)
		if got := c.dot(0, nil, nil); got != 0 {
			t.Errorf("%s: n = 0 gave %v", c.name, got)
		}
		for _, bad := range []struct {
			n    int
			w, x []byte
		}{
			{100, w, x}, {-256, w, x}, {768, w, x}, {512, w[:c.wb*2-1], x}, {512, w, x[:len(x)-1]},
		} {
			func() {
				defer func() {
					var le *kernels.LengthError
					if e, ok := recover().(error); !ok || !errors.As(e, &le) {
						t.Errorf("%s: n=%d len(w)=%d len(x)=%d: want a *LengthError panic, got %v", c.name, bad.n, len(bad.w), len(bad.x), e)
					}
				}()
				c.dot(bad.n, bad.w, bad.x)
			}()
		}
	}
}

// FuzzDotKX: on arbitrary weight and activation bytes (one super-block each) the assembly
// and pure-Go paths agree bit for bit (NaN results: both NaN).
func FuzzDotKX(f *testing.F) {
	r := extRNG(5)
	for _, c := range kxCases {
		f.Add(kxRawWeights(r, c, 1, 256), kxRawActs(r, 256))
		f.Add(kxRawWeights(r, c, 1, 256), kxQ8K(extFloats(r, 256, true, 1)))
	}
	f.Fuzz(func(t *testing.T, w, x []byte) {
		if !kernels.HasAsm() || len(x) < kernels.BlockBytesQ8_K {
			return
		}
		for _, c := range kxCases {
			wb := make([]byte, c.wb)
			copy(wb, w)
			a, g := kxBoth(c, 256, wb, x)
			if math.Float32bits(a) != math.Float32bits(g) && !(a != a && g != g) {
				t.Fatalf("%s: asm %v (%08x), Go %v (%08x)", c.name, a, math.Float32bits(a), g, math.Float32bits(g))
			}
		}
	})
}

var kxSink float32

// BenchmarkDotKX: one 4096-element row, the kernels (impl=asm, impl=go) against what infer
// does today for these types (impl=deq+f32: quant.Dequantize of the row, then
// kernels.DotF32 with float activations).
func BenchmarkDotKX(b *testing.B) {
	const n = 4096
	r := extRNG(9)
	xf := extFloats(r, n, false, 1)
	xq := kxQ8K(xf)
	for _, c := range kxCases {
		w := kxQuantWeights(b, r, c, 1, n, false)
		b.Run(c.name, func(b *testing.B) {
			b.Run("impl=deq+f32", func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				wf := make([]float32, n)
				for i := 0; i < b.N; i++ {
					if err := quant.Dequantize(c.gt, wf, w); err != nil {
						b.Fatal(err)
					}
					kxSink += kernels.DotF32(wf, xf)
				}
			})
			b.Run("impl=go", func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				kernels.SetPureGo(true)
				defer kernels.SetPureGo(false)
				for i := 0; i < b.N; i++ {
					kxSink += c.dot(n, w, xq)
				}
			})
			if kernels.HasAsm() {
				b.Run("impl=asm", func(b *testing.B) {
					b.SetBytes(int64(len(w)))
					for i := 0; i < b.N; i++ {
						kxSink += c.dot(n, w, xq)
					}
				})
			}
		})
	}
}
