package kernels_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/tq-project/tq/quant/kernels"
)

var iq4nlValues = [16]float64{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

func halfF64(b []byte) float64 {
	h := binary.LittleEndian.Uint16(b)
	e, m := int(h>>10&31), float64(h&1023)
	v := math.Ldexp(1+m/1024, e-15)
	if e == 0 {
		v = math.Ldexp(m/1024, -14)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// exactWeights decodes a weight row exactly: each weight as a scale part and a min part
// (Q4_K: d·sc·q and −dmin·m; the others have no min part).
func exactWeights(t kernels.Type, w []byte, n int) (part, minPart []float64) {
	part, minPart = make([]float64, n), make([]float64, n)
	if t == kernels.Q4_K {
		for b := 0; b < n/256; b++ {
			blk := w[b*kernels.BlockBytesQ4_K:]
			d, dmin := halfF64(blk), halfF64(blk[2:])
			sc, m := unpackK12(blk[4:16])
			for e := 0; e < 256; e++ {
				c, l := e/64, e%64
				q := blk[16+32*c+l%32]
				if l >= 32 {
					q >>= 4
				}
				part[256*b+e] = d * float64(sc[e/32]) * float64(q&15)
				minPart[256*b+e] = -dmin * float64(m[e/32])
			}
		}
		return part, minPart
	}
	for b := 0; b < n/32; b++ {
		blk := w[b*18:]
		d := halfF64(blk)
		for j := 0; j < 32; j++ {
			q := blk[2+j%16]
			if j >= 16 {
				q >>= 4
			}
			v := float64(int(q&15) - 8)
			if t == kernels.IQ4_NL {
				v = iq4nlValues[q&15]
			}
			part[32*b+j] = d * v
		}
	}
	return part, minPart
}

// exactActs decodes a Q8_0 or Q8_K activation row exactly.
func exactActs(t kernels.Type, x []byte, n int) []float64 {
	out := make([]float64, n)
	if t == kernels.Q4_K {
		for b := 0; b < n/256; b++ {
			blk := x[b*kernels.BlockBytesQ8_K:]
			d := float64(math.Float32frombits(binary.LittleEndian.Uint32(blk)))
			for j := 0; j < 256; j++ {
				out[256*b+j] = d * float64(int8(blk[4+j]))
			}
		}
		return out
	}
	for b := 0; b < n/32; b++ {
		blk := x[b*kernels.BlockBytesQ8_0:]
		d := halfF64(blk)
		for j := 0; j < 32; j++ {
			out[32*b+j] = d * float64(int8(blk[2+j]))
		}
	}
	return out
}

// TestRepackQuantizedData runs the repack kernels on weights quantized by the quant package
// (ggml's reference quantizers) from normal and Student-t data, against activations
// quantized from normal and Student-t data, for row lengths 256…16384: the assembly must
// equal pure Go bit for bit (single-row dots, MatVecRepack with a 4-row remainder,
// MatMulRepack with a gemv tail), MatVecRepack must equal the single-row dots, and every
// result must lie within (L + 8)·4u·S of the float64 dot product, where L is the length of
// the FMA chain (blocks, super-blocks, or 64-element chunks for the Q4_K gemm order), u =
// 2⁻²⁴ and S = Σ|w_i·x_i| with Q4_K's scale and min parts counted separately.
func TestRepackQuantizedData(t *testing.T) {
	const rows, nx = 13, 6
	for _, wt := range []kernels.Type{kernels.Q4_K, kernels.Q4_0, kernels.IQ4_NL} {
		var worst float64
		for _, n := range []int{256, 512, 1024, 2048, 4096, 8192, 16384} {
			for _, heavy := range []bool{false, true} {
				r := extRNG(uint64(n)*3 + uint64(wt))
				w := quantWeights(t, r, wt, rows, n, heavy)
				x := quantActs(wt, extFloats(r, nx*n, heavy, 1), nx, n)
				elems, wb, xb := repackBlock(wt)
				rowBytes, xRow := n/elems*wb, n/elems*xb
				if wt == kernels.Q4_K {
					xRow = n / 256 * kernels.BlockBytesQ8_K
				}
				type result struct{ dots, mv, mm []float32 }
				var res []result
				for _, pure := range impls() {
					withPure(pure, func() {
						var rr result
						rr.mv = make([]float32, nx*rows)
						for k := 0; k < nx; k++ {
							xk := x[k*xRow : (k+1)*xRow]
							for row := 0; row < rows; row++ {
								wr := w[row*rowBytes : (row+1)*rowBytes]
								switch wt {
								case kernels.Q4_K:
									rr.dots = append(rr.dots, kernels.DotQ4_KQ8KRepack(n, wr, xk))
								case kernels.Q4_0:
									rr.dots = append(rr.dots, kernels.DotQ4_0Q8_0Repack(n, wr, xk))
								default:
									rr.dots = append(rr.dots, kernels.DotIQ4_NLQ8_0Repack(n, wr, xk))
								}
							}
							if err := kernels.MatVecRepack(wt, rr.mv[k*rows:], w, rowBytes, xk, 0, rows); err != nil {
								t.Fatal(err)
							}
						}
						rr.mm = make([]float32, nx*rows)
						if err := kernels.MatMulRepack(wt, rr.mm, rows, w, rowBytes, x, xRow, nx, 0, rows); err != nil {
							t.Fatal(err)
						}
						res = append(res, rr)
					})
				}
				name := fmt.Sprintf("%s n=%d heavy=%v", typeName(wt), n, heavy)
				for i := range res[0].dots {
					if !bitsEqual(res[0].mv[i], res[0].dots[i]) {
						t.Fatalf("%s: output %d: MatVecRepack %g, dot %g", name, i, res[0].mv[i], res[0].dots[i])
					}
					if k := i / rows; k >= nx-nx%4 && !bitsEqual(res[0].mm[i], res[0].dots[i]) {
						t.Fatalf("%s: output %d: MatMulRepack gemv tail %g, dot %g", name, i, res[0].mm[i], res[0].dots[i])
					}
					if len(res) == 2 {
						for _, p := range [][2]float32{{res[0].dots[i], res[1].dots[i]}, {res[0].mv[i], res[1].mv[i]}, {res[0].mm[i], res[1].mm[i]}} {
							if !bitsEqual(p[0], p[1]) {
								t.Fatalf("%s: output %d: purego %g (%#x), asm %g (%#x)", name, i, p[0], math.Float32bits(p[0]), p[1], math.Float32bits(p[1]))
							}
						}
					}
				}
				for k := 0; k < nx; k++ {
					xe := exactActs(wt, x[k*xRow:], n)
					for row := 0; row < rows; row++ {
						part, minPart := exactWeights(wt, w[row*rowBytes:], n)
						var ref, s float64
						for i := range xe {
							ref += (part[i] + minPart[i]) * xe[i]
							s += (math.Abs(part[i]) + math.Abs(minPart[i])) * math.Abs(xe[i])
						}
						steps := n / elems
						if wt == kernels.Q4_K && k < nx-nx%4 {
							steps = n / 64
						}
						tol := float64(steps+8) * 4 * math.Ldexp(1, -24) * s
						for _, got := range []float32{res[0].dots[k*rows+row], res[0].mm[k*rows+row]} {
							if e := math.Abs(float64(got) - ref); e > tol {
								t.Errorf("%s act %d row %d: got %.9g, reference %.9g, |err|/S = %.3g > %.3g", name, k, row, got, ref, e/s, tol/s)
							} else if s > 0 {
								worst = max(worst, e/s)
							}
						}
					}
				}
			}
		}
		t.Logf("%s: worst |err|/S = %.3g over n = 256…16384", typeName(wt), worst)
	}
}

func typeName(t kernels.Type) string {
	if t == kernels.IQ4_NL {
		return "iq4_nl"
	}
	return t.String()
}
