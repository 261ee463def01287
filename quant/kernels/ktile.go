package kernels

import (
	"encoding/binary"
	"fmt"
	"sync"
)

//go:generate go run ktile_gen.go

// Register-tiled K-quant × Q8_K products. MatMulK computes a block of outputs (weight rows ×
// activation rows) in tiles of up to ktR rows and 4 tokens, each output with its own
// integer lanes and float accumulator that see exactly the operations of DotQ2_KQ8K /
// DotQ3_KQ8K / DotQ4_KQ8K / DotQ5_KQ8K / DotQ6_KQ8K / DotIQ4_XSQ8K (ggml's AVX2 vec_dot
// order): the integer lanes of a super-block are exact sums (any order gives the same int32
// values), and the float steps — one FMA per super-block with d·dx, Q2_K's min FMA before
// it, the separate minimum accumulator of Q4_K/Q5_K, the final hsum8 — are the one-row
// kernel's, per output. Tiling only changes which loads and weight decodes
// are shared, so every output is bit-identical to the one-row kernel.
//
// On the assembly path, per token chunk, each weight row is first decoded into a table
// (ktPrepQ2/Q3/Q4/Q5/Q6/IQ4: weight values, scale vectors, d, and the Q6_K offset, the
// Q3_K lane offsets, the IQ4_XS signed values, the Q2_K mins or the Q4_K/Q5_K min words);
// the Q4_K/Q5_K minimum term of the row is computed for 8 tokens at a time (ktMinsQ4/Q5);
// the tile kernels then read only the tables and the activations.

// ktR is the number of weight rows per tile of the assembly path (kernels exist for 1..3
// rows; the rows left at the end of a range use a narrower tile). On Zen 4, 3 rows × 4 tokens
// measured as fast as 2 × 6 and faster than 1 × 12 or 4 × 3.
const ktR = 3

// ktChunkBytes bounds the activation bytes one pass over the row range streams, so that a
// token chunk stays in L2 while each weight row is decoded once per chunk.
const ktChunkBytes = 256 << 10

// ktXTab is the byte size of the min-term token table per super-block and 8-token group.
const ktXTab = 288

// ktBufs holds the scratch buffers of one MatMulK call on the assembly path.
type ktBufs struct {
	tab []byte    // prepare tables of the tile's rows
	xt  []byte    // Q4_K/Q5_K: bsum pairs and dx of the chunk's tokens, 8 at a time
	mb  []float32 // Q4_K/Q5_K: the min term of each (row, token)
}

var ktPool = sync.Pool{New: func() any { return new(ktBufs) }}

// ktGrow returns b resized to n elements, reallocating when its capacity is too small.
func ktGrow[E any](b []E, n int) []E {
	if cap(b) < n {
		return make([]E, n)
	}
	return b[:n]
}

// MatMulK computes y[tok·ldy + r] = dot(weight row r, activation row tok) for r in [r0, r1)
// and tok in [0, T), for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K or IQ4_XS weights (t) and Q8_K
// activation rows. Weight row r occupies w[r·rowBytes : (r+1)·rowBytes] (its element count n
// follows from rowBytes); activation row tok starts at xq[tok·xRowBytes] and holds at least n
// elements quantized with QuantizeRowQ8K (with its bsums). Every output is bit-identical to
// the type's Dot kernel (DotQ2_KQ8K … DotQ6_KQ8K, DotIQ4_XSQ8K) of that pair, on the assembly
// and the pure-Go path alike (for finite scales; with NaN scales the NaN payload is
// unspecified). It runs single-threaded; callers split [r0, r1) among their workers (outputs of different row ranges never interact). For T ≤ 1
// the strides ldy and xRowBytes are not used. It returns an error, and writes nothing, for an
// unsupported type, a row size that is not a positive multiple of the block size, an invalid
// row range, strides smaller than a row, or buffers too short for the shape.
func MatMulK(t Type, y []float32, ldy int, w []byte, rowBytes int, xq []byte, xRowBytes int, T, r0, r1 int) error {
	nb, err := checkMatMulK(t, y, ldy, w, rowBytes, xq, xRowBytes, T, r0, r1)
	if err != nil {
		return err
	}
	if T == 0 || r0 == r1 {
		return nil
	}
	if useAsm() {
		matMulKAsm(t, y, ldy, w, rowBytes, xq, xRowBytes, T, r0, r1, nb)
	} else {
		matMulKGo(t, y, ldy, w, rowBytes, xq, xRowBytes, T, r0, r1, nb)
	}
	return nil
}

// checkMatMulK validates MatMulK's arguments and returns the super-blocks per row.
func checkMatMulK(t Type, y []float32, ldy int, w []byte, rowBytes int, xq []byte, xRowBytes int, T, r0, r1 int) (int, error) {
	wb := ktBlockBytes(t)
	if wb == 0 {
		return 0, fmt.Errorf("kernels: MatMulK: unsupported weight type %v (want q2_K, q3_K, q4_K, q5_K, q6_K or iq4_xs)", t)
	}
	if rowBytes <= 0 || rowBytes%wb != 0 {
		return 0, fmt.Errorf("kernels: MatMulK: row size %d is not a positive multiple of the %v block size %d bytes", rowBytes, t, wb)
	}
	nb := rowBytes / wb
	if T < 0 {
		return 0, fmt.Errorf("kernels: MatMulK: negative activation row count %d", T)
	}
	if r0 < 0 || r1 < r0 {
		return 0, fmt.Errorf("kernels: MatMulK: invalid row range [%d, %d)", r0, r1)
	}
	if r1 > 0 && len(w)/rowBytes < r1 {
		return 0, fmt.Errorf("kernels: MatMulK: weights hold %d rows of %d bytes, row range ends at %d", len(w)/rowBytes, rowBytes, r1)
	}
	if T == 0 || r0 == r1 {
		return nb, nil
	}
	// nb·292 cannot overflow: nb ≤ len(w)/84.
	xRow := nb * BlockBytesQ8_K
	if len(xq) < xRow {
		return 0, fmt.Errorf("kernels: MatMulK: activation bytes %d are fewer than the %d of one row (%d Q8_K blocks)", len(xq), xRow, nb)
	}
	if len(y) < r1 {
		return 0, fmt.Errorf("kernels: MatMulK: y has %d entries, row range ends at %d", len(y), r1)
	}
	if T > 1 {
		if xRowBytes < xRow {
			return 0, fmt.Errorf("kernels: MatMulK: activation stride %d is less than the %d bytes of a row", xRowBytes, xRow)
		}
		if ldy < r1 {
			return 0, fmt.Errorf("kernels: MatMulK: output stride %d is less than the row range end %d", ldy, r1)
		}
		// (T−1)·stride + size ≤ len, compared by division to avoid overflow.
		if (len(xq)-xRow)/xRowBytes < T-1 {
			return 0, fmt.Errorf("kernels: MatMulK: %d activation bytes hold fewer than %d rows %d bytes apart", len(xq), T, xRowBytes)
		}
		if (len(y)-r1)/ldy < T-1 {
			return 0, fmt.Errorf("kernels: MatMulK: y has %d entries, fewer than the %d rows of stride %d the shape needs", len(y), T, ldy)
		}
	}
	return nb, nil
}

// matMulKAsm is MatMulK's assembly path (arguments validated, T ≥ 1, r0 < r1).
func matMulKAsm(t Type, y []float32, ldy int, w []byte, rowBytes int, xq []byte, xRowBytes int, T, r0, r1, nb int) {
	if T == 1 {
		// One token: the tiles would share nothing; the one-row kernel is the tile.
		for r := r0; r < r1; r++ {
			wr := &w[r*rowBytes]
			switch t {
			case Q4_K:
				y[r] = dotQ4KQ8KAVX2(wr, &xq[0], nb)
			case Q5_K:
				y[r] = dotQ5KQ8KAVX2(wr, &xq[0], nb)
			case Q6_K:
				y[r] = dotQ6KQ8KAVX2(wr, &xq[0], nb)
			case Q2_K:
				y[r] = dotQ2KQ8KAVX2(wr, &xq[0], nb)
			case Q3_K:
				y[r] = dotQ3KQ8KAVX2(wr, &xq[0], nb)
			default:
				y[r] = dotIQ4XSQ8KAVX2(wr, &xq[0], nb)
			}
		}
		return
	}
	bufs := ktPool.Get().(*ktBufs)
	defer ktPool.Put(bufs)

	q45 := t == Q4_K || t == Q5_K
	tb := ktTabBytes(t)
	bufs.tab = ktGrow(bufs.tab, ktR*nb*tb)
	tab := bufs.tab
	chunk := max(1, min(T, ktChunkBytes/(nb*BlockBytesQ8_K)))
	for t0 := 0; t0 < T; t0 += chunk {
		tc := min(chunk, T-t0)
		ntg := (tc + 7) / 8
		tp := 8 * ntg
		ms := tp // floats per row in mb
		if t == Q4_K {
			ms = 4 * tp
		}
		if q45 {
			bufs.xt = ktGrow(bufs.xt, nb*ntg*ktXTab)
			bufs.mb = ktGrow(bufs.mb, ktR*ms)
			ktTokenTable(bufs.xt, xq[t0*xRowBytes:], xRowBytes, tc, nb)
		}
		x0 := xq[t0*xRowBytes:]
		y0 := y[t0*ldy:]
		for r := r0; r < r1; {
			R := min(ktR, r1-r)
			for i := 0; i < R; i++ {
				wr, ti := &w[(r+i)*rowBytes], &tab[i*tb]
				switch t {
				case Q4_K:
					ktPrepQ4(wr, nb, ti, R*tb)
				case Q5_K:
					ktPrepQ5(wr, nb, ti, R*tb)
				case Q6_K:
					ktPrepQ6(wr, nb, ti, R*tb)
					continue
				case Q2_K:
					ktPrepQ2(wr, nb, ti, R*tb)
					continue
				case Q3_K:
					ktPrepQ3(wr, nb, ti, R*tb)
					continue
				default:
					ktPrepIQ4(wr, nb, ti, R*tb)
					continue
				}
				mb := bufs.mb[i*ms : (i+1)*ms]
				clear(mb)
				if t == Q4_K {
					ktMinsQ4(ti, R*tb, nb, &bufs.xt[0], ntg, &mb[0], tp)
				} else {
					ktMinsQ5(ti, R*tb, nb, &bufs.xt[0], ntg, &mb[0])
				}
			}
			C := ktMaxC[R]
			for k := 0; k < tc; k += C {
				c := min(C, tc-k)
				xk, yk := &x0[k*xRowBytes], &y0[k*ldy+r]
				switch t {
				case Q4_K, Q5_K:
					ktileQ45(R, c, &tab[0], xk, xRowBytes, nb, yk, ldy, &bufs.mb[k], ms)
				case Q6_K:
					ktileQ6(R, c, &tab[0], xk, xRowBytes, nb, yk, ldy, nil, 0)
				case Q2_K:
					ktileQ2(R, c, &tab[0], xk, xRowBytes, nb, yk, ldy, nil, 0)
				case Q3_K:
					ktileQ3(R, c, &tab[0], xk, xRowBytes, nb, yk, ldy, nil, 0)
				default:
					ktileIQ4(R, c, &tab[0], xk, xRowBytes, nb, yk, ldy, nil, 0)
				}
			}
			r += R
		}
	}
}

// ktTokenTable writes the min-term token table of tc activation rows (xRowBytes apart from
// x) for ktMinsQ4/ktMinsQ5: per super-block b and 8-token group g, 288 bytes at
// (b·ntg + g)·288 holding 8 vectors (j = 0..7) of the tokens' bsum pairs j (the int16
// bsums 2j, 2j+1 as one dword, token l at 32j + 4l), then the tokens' dx at 256 + 4l.
// Tokens past tc are zero.
func ktTokenTable(xt []byte, x []byte, xRowBytes, tc, nb int) {
	ntg := (tc + 7) / 8
	for b := 0; b < nb; b++ {
		for g := 0; g < ntg; g++ {
			blk := xt[(b*ntg+g)*ktXTab : (b*ntg+g+1)*ktXTab]
			for l := 0; l < 8; l++ {
				tok := 8*g + l
				if tok >= tc {
					for j := 0; j < 9; j++ {
						binary.LittleEndian.PutUint32(blk[32*j+4*l:], 0)
					}
					continue
				}
				src := x[tok*xRowBytes+b*BlockBytesQ8_K:]
				for j := 0; j < 8; j++ {
					copy(blk[32*j+4*l:32*j+4*l+4], src[4+QK_K+4*j:])
				}
				copy(blk[256+4*l:256+4*l+4], src[0:4])
			}
		}
	}
}

// ktGoTokens is the token tile of the pure-Go twin.
const ktGoTokens = 8

// matMulKGo is the pure-Go twin of matMulKAsm: per weight row and super-block the weights
// are decoded once and used for up to 8 tokens, each output accumulated exactly as the
// type's one-row Go kernel (dotQ2KQ8KGo … dotQ6KQ8KGo, dotIQ4XSQ8KGo) does it.
func matMulKGo(t Type, y []float32, ldy int, w []byte, rowBytes int, xq []byte, xRowBytes int, T, r0, r1, nb int) {
	wb := ktBlockBytes(t)
	var q [QK_K]int32 // weight values of one super-block
	var sc [16]int32  // scale of each 16-element sub-block
	var m [8]int32    // Q4_K/Q5_K mins
	var m2 [16]int32  // Q2_K mins
	var d, dm float32 // fp16 d (and dmin) of the super-block, widened
	var acc [ktGoTokens][8]float32
	var accm [ktGoTokens][4]float32 // Q4_K: 4 min lanes; Q5_K: lane 0 is summs
	for r := r0; r < r1; r++ {
		for k0 := 0; k0 < T; k0 += ktGoTokens {
			nk := min(ktGoTokens, T-k0)
			acc = [ktGoTokens][8]float32{}
			accm = [ktGoTokens][4]float32{}
			for b := 0; b < nb; b++ {
				blk := w[r*rowBytes+b*wb : r*rowBytes+(b+1)*wb]
				switch t {
				case Q6_K:
					d = ktDecodeQ6(&q, &sc, blk)
				case Q2_K:
					d, dm = ktDecodeQ2(&q, &sc, &m2, blk)
				case Q3_K:
					d = ktDecodeQ3(&q, &sc, blk)
				case IQ4_XS:
					d = ktDecodeIQ4(&q, &sc, blk)
				default:
					d, dm, m = ktDecodeQ45(&q, &sc, blk, t == Q5_K)
				}
				for j := 0; j < nk; j++ {
					xb := (*[BlockBytesQ8_K]byte)(xq[(k0+j)*xRowBytes+b*BlockBytesQ8_K:])
					var sumi [8]int32
					if t == IQ4_XS {
						sumi = ktLanesIQ4(&q, &sc, xb)
					} else {
						sumi = ktLanes(&q, &sc, xb)
					}
					dx := q8kScale(xb)
					a := &acc[j]
					switch t {
					case Q2_K:
						dd := dx * d
						dmin := -(dx * dm)
						for k := 0; k < 8; k++ {
							ms := m2[2*k]*q8kBsum(xb, 2*k) + m2[2*k+1]*q8kBsum(xb, 2*k+1)
							a[k] = lanes8FMA(dmin, float32(ms), a[k])
						}
						for k := 0; k < 8; k++ {
							a[k] = lanes8FMA(dd, float32(sumi[k]), a[k])
						}
					case Q3_K, IQ4_XS:
						dd := dx * d
						for k := 0; k < 8; k++ {
							a[k] = lanes8FMA(dd, float32(sumi[k]), a[k])
						}
					case Q6_K:
						for k := 0; k < 8; k++ {
							b0 := int32(int16(le16(xb[4+QK_K+4*k:])))
							b1 := int32(int16(le16(xb[4+QK_K+4*k+2:])))
							sumi[k] -= 32 * (b0*sc[2*k] + b1*sc[2*k+1])
						}
						dd := dx * d
						for k := 0; k < 8; k++ {
							a[k] = lanes8FMA(dd, float32(sumi[k]), a[k])
						}
					case Q5_K:
						dd := dx * d
						dmin := -(dx * dm)
						q8s := q8kGroupSums(xb)
						var ms int32
						for s := 0; s < 8; s++ {
							ms += m[s] * q8s[s]
						}
						accm[j][0] = lanes8FMA(dmin, float32(ms), accm[j][0])
						for k := 0; k < 8; k++ {
							a[k] = lanes8FMA(dd, float32(sumi[k]), a[k])
						}
					case Q4_K:
						dd := dx * d
						dmin := -(dx * dm)
						q8s := q8kGroupSums(xb)
						for k := 0; k < 4; k++ {
							accm[j][k] = lanes8FMA(dmin, float32(m[2*k]*q8s[2*k]+m[2*k+1]*q8s[2*k+1]), accm[j][k])
						}
						for k := 0; k < 8; k++ {
							a[k] = lanes8FMA(dd, float32(sumi[k]), a[k])
						}
					}
				}
			}
			for j := 0; j < nk; j++ {
				v := hsum8(&acc[j])
				switch t {
				case Q5_K:
					v += accm[j][0]
				case Q4_K:
					m0, m1 := accm[j][0]+accm[j][2], accm[j][1]+accm[j][3]
					v += m0 + m1
				}
				y[(k0+j)*ldy+r] = v
			}
		}
	}
}

// ktDecodeQ6 decodes one Q6_K super-block into its 256 unsigned 6-bit values and 16 signed
// sub-block scales, returning d widened.
func ktDecodeQ6(q *[QK_K]int32, sc *[16]int32, blk []byte) float32 {
	wb := (*[BlockBytesQ6_K]byte)(blk)
	ql := (*[128]byte)(wb[0:])
	qh := (*[64]byte)(wb[128:])
	for c := 0; c < 8; c++ { // 32-element chunk c
		j, mm := c/4, c%4
		for e := 0; e < 32; e++ {
			lo := ql[64*j+32*(mm&1)+e] >> (4 * (mm >> 1)) & 15
			hi := qh[32*j+e] >> (2 * mm) & 3
			q[32*c+e] = int32(lo | hi<<4)
		}
	}
	for i := 0; i < 16; i++ {
		sc[i] = int32(int8(wb[192+i]))
	}
	return halfToFloat(le16(wb[208:]))
}

// ktDecodeQ45 decodes one Q4_K (q5 false) or Q5_K super-block into its 256 unsigned values,
// the scale of each 16-element half of a sub-block, the 8 mins and d, dmin widened.
func ktDecodeQ45(q *[QK_K]int32, sc *[16]int32, blk []byte, q5 bool) (d, dmin float32, m [8]int32) {
	s8, m8 := kScales((*[12]byte)(blk[4:16]))
	qs := blk[16 : 16+128]
	var qh []byte
	if q5 {
		qh = blk[16:48]
		qs = blk[48 : 48+128]
	}
	for s := 0; s < 8; s++ {
		for e := 0; e < 32; e++ {
			v := int32(qs[32*(s/2)+e]>>(4*(s&1))) & 15
			if q5 {
				v |= int32(qh[e]>>s&1) << 4
			}
			q[32*s+e] = v
		}
		sc[2*s], sc[2*s+1] = s8[s], s8[s]
	}
	return halfToFloat(le16(blk[0:])), halfToFloat(le16(blk[2:])), m8
}

// ktLanes returns the 8 int32 lanes Σ scale·q·x of one super-block (lane k: elements
// 4k..4k+3 of every 32-element chunk; element 32c+e has scale sc[2c + e/16]). Wrapping int32
// arithmetic makes the lanes independent of the summation order.
func ktLanes(q *[QK_K]int32, sc *[16]int32, xb *[BlockBytesQ8_K]byte) (sumi [8]int32) {
	for c := 0; c < 8; c++ {
		for k := 0; k < 8; k++ {
			var p int32
			for e := 4 * k; e < 4*k+4; e++ {
				p += q[32*c+e] * int32(int8(xb[4+32*c+e]))
			}
			sumi[k] += sc[2*c+k/4] * p
		}
	}
	return sumi
}

// ktBlockBytes returns the super-block bytes of a weight type MatMulK supports, else 0.
func ktBlockBytes(t Type) int {
	switch t {
	case Q2_K:
		return BlockBytesQ2_K
	case Q3_K:
		return BlockBytesQ3_K
	case Q4_K:
		return BlockBytesQ4_K
	case Q5_K:
		return BlockBytesQ5_K
	case Q6_K:
		return BlockBytesQ6_K
	case IQ4_XS:
		return BlockBytesIQ4_XS
	}
	return 0
}

// ktTabBytes returns the table bytes per row and super-block of weight type t.
func ktTabBytes(t Type) int {
	switch t {
	case Q4_K, Q5_K:
		return ktTabQ45
	case Q6_K:
		return ktTabQ6
	case Q2_K:
		return ktTabQ2
	case Q3_K:
		return ktTabQ3
	}
	return ktTabIQ4
}

// ktDecodeQ2 decodes one Q2_K super-block into its 256 values (0..3), the 16 sub-block
// scales and mins, and d, dmin widened.
func ktDecodeQ2(q *[QK_K]int32, sc, m *[16]int32, blk []byte) (d, dmin float32) {
	wb := (*[BlockBytesQ2_K]byte)(blk)
	for j := 0; j < 2; j++ {
		for p := 0; p < 4; p++ {
			for l := 0; l < 32; l++ {
				q[128*j+32*p+l] = int32(wb[16+32*j+l] >> (2 * p) & 3)
			}
		}
	}
	for i := 0; i < 16; i++ {
		sc[i] = int32(wb[i] & 15)
		m[i] = int32(wb[i] >> 4)
	}
	return halfToFloat(le16(wb[80:])), halfToFloat(le16(wb[82:]))
}

// ktDecodeQ3 decodes one Q3_K super-block into its 256 signed values (−4..3) and 16 signed
// sub-block scales, returning d widened.
func ktDecodeQ3(q *[QK_K]int32, sc *[16]int32, blk []byte) float32 {
	wb := (*[BlockBytesQ3_K]byte)(blk)
	for j := 0; j < 2; j++ {
		for p := 0; p < 4; p++ {
			for l := 0; l < 32; l++ {
				q[128*j+32*p+l] = q3v(wb[32+32*j+l], wb[l], uint(2*p), uint(4*j+p))
			}
		}
	}
	*sc = q3kScales((*[12]byte)(wb[96:]))
	return halfToFloat(le16(wb[108:]))
}

// ktDecodeIQ4 decodes one IQ4_XS super-block into its 256 signed values and the scale of
// each 16-element half of a sub-block, returning d widened.
func ktDecodeIQ4(q *[QK_K]int32, sc *[16]int32, blk []byte) float32 {
	wb := (*[BlockBytesIQ4_XS]byte)(blk)
	sh := le16(wb[2:])
	for ib := 0; ib < 8; ib++ {
		ls := int32(wb[4+ib/2]>>(4*(ib&1))&15|byte(sh>>(2*ib)&3)<<4) - 32
		sc[2*ib], sc[2*ib+1] = ls, ls
		for l := 0; l < 16; l++ {
			v := wb[8+16*ib+l]
			q[32*ib+l] = int32(kxIQ4Values[v&15])
			q[32*ib+16+l] = int32(kxIQ4Values[v>>4])
		}
	}
	return halfToFloat(le16(wb[0:]))
}

// ktLanesIQ4 is ktLanes with IQ4_XS's products |v|·sign(x, v) (iq4Mul).
func ktLanesIQ4(q *[QK_K]int32, sc *[16]int32, xb *[BlockBytesQ8_K]byte) (sumi [8]int32) {
	for c := 0; c < 8; c++ {
		for k := 0; k < 8; k++ {
			var p int32
			for e := 4 * k; e < 4*k+4; e++ {
				p += iq4Mul(int8(q[32*c+e]), int8(xb[4+32*c+e]))
			}
			sumi[k] += sc[2*c+k/4] * p
		}
	}
	return sumi
}
