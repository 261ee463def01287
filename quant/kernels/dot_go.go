package kernels

import (
	"encoding/binary"
	"math"
)

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

// The integer dot products follow ggml's AVX2 vec_dot kernels (llama.cpp's decode path)
// operation for operation, so that results are bit-identical to llama.cpp on AVX2 machines:
// each block's integer sums are kept in 8 int32 lanes (lane k holds elements 4k..4k+3 of each
// 32-element group, as VPMADDUBSW+VPMADDWD leave them), converted to float and accumulated
// per lane with one FMA against the block scale product; the 8 lanes are summed at the end
// by hsum8. Integer sums are exact, so only the float steps need to match.

// hsum8 is ggml's hsum_float_8: the high half added to the low half, then the pairs
// (0,2), (1,3), then those two.
func hsum8(a *[8]float32) float32 {
	r0, r1, r2, r3 := a[4]+a[0], a[5]+a[1], a[6]+a[2], a[7]+a[3]
	return (r0 + r2) + (r1 + r3)
}

// dotQ8_0Q8_0Go is the pure-Go Q8_0·Q8_0 dot over nb blocks.
func dotQ8_0Q8_0Go(nb int, w, x []byte) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ8_0]byte)(w[b*BlockBytesQ8_0:])
		xb := (*[BlockBytesQ8_0]byte)(x[b*BlockBytesQ8_0:])
		d := halfToFloat(le16(wb[0:])) * halfToFloat(le16(xb[0:]))
		for k := 0; k < 8; k++ {
			var s int32
			for j := 2 + 4*k; j < 6+4*k; j++ {
				s += int32(int8(wb[j])) * int32(int8(xb[j]))
			}
			acc[k] = lanes8FMA(d, float32(s), acc[k])
		}
	}
	return hsum8(&acc)
}

// dotQ4_0Q8_0Go is the pure-Go Q4_0·Q8_0 dot over nb blocks.
func dotQ4_0Q8_0Go(nb int, w, x []byte) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ4_0]byte)(w[b*BlockBytesQ4_0:])
		xb := (*[BlockBytesQ8_0]byte)(x[b*BlockBytesQ8_0:])
		d := halfToFloat(le16(wb[0:])) * halfToFloat(le16(xb[0:]))
		for k := 0; k < 8; k++ {
			var s int32
			for e := 4 * k; e < 4*k+4; e++ {
				q := wb[2+e%16]
				if e >= 16 {
					q >>= 4
				}
				s += (int32(q&15) - 8) * int32(int8(xb[2+e]))
			}
			acc[k] = lanes8FMA(d, float32(s), acc[k])
		}
	}
	return hsum8(&acc)
}

// kScales decodes the 8 six-bit scales and mins of a Q4_K/Q5_K super-block (12 bytes).
func kScales(s *[12]byte) (sc, m [8]int32) {
	for j := 0; j < 4; j++ {
		sc[j] = int32(s[j] & 63)
		m[j] = int32(s[j+4] & 63)
		sc[j+4] = int32(s[j+8]&15) | int32(s[j]>>6)<<4
		m[j+4] = int32(s[j+8]>>4) | int32(s[j+4]>>6)<<4
	}
	return sc, m
}

// q8kGroupSums returns the Q8_K block's sums per 32-element sub-block (bsum_2s + bsum_2s+1).
func q8kGroupSums(xb *[BlockBytesQ8_K]byte) (q8s [8]int32) {
	for s := 0; s < 8; s++ {
		q8s[s] = int32(int16(le16(xb[4+QK_K+4*s:]))) + int32(int16(le16(xb[4+QK_K+4*s+2:])))
	}
	return q8s
}

func q8kScale(xb *[BlockBytesQ8_K]byte) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(xb[0:]))
}

// kLanes adds sc_s·Σ q·x over the 8 sub-blocks of 32 weights (q(s, e) returns weight e of
// sub-block s) into the 8 lanes (lane k: elements 4k..4k+3 of each sub-block).
func kLanes(sumi *[8]int32, sc *[8]int32, q8 *[QK_K]byte, q func(s, e int) int32) {
	for s := 0; s < 8; s++ {
		for k := 0; k < 8; k++ {
			var p int32
			for e := 4 * k; e < 4*k+4; e++ {
				p += q(s, e) * int32(int8(q8[32*s+e]))
			}
			sumi[k] += sc[s] * p
		}
	}
}

// dotQ4KQ8KGo is the pure-Go Q4_K·Q8_K dot over nb super-blocks. The mins go to a separate
// 4-lane accumulator (lane k: sub-blocks 2k and 2k+1), as in ggml.
func dotQ4KQ8KGo(nb int, w, x []byte) float32 {
	var acc [8]float32
	var accm [4]float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ4_K]byte)(w[b*BlockBytesQ4_K:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		sc, m := kScales((*[12]byte)(wb[4:16]))
		qs := (*[128]byte)(wb[16:])
		q8 := (*[QK_K]byte)(xb[4:])
		dx := q8kScale(xb)
		d := dx * halfToFloat(le16(wb[0:]))
		dmin := -(dx * halfToFloat(le16(wb[2:])))
		q8s := q8kGroupSums(xb)
		for k := 0; k < 4; k++ {
			accm[k] = lanes8FMA(dmin, float32(m[2*k]*q8s[2*k]+m[2*k+1]*q8s[2*k+1]), accm[k])
		}
		var sumi [8]int32
		kLanes(&sumi, &sc, q8, func(s, e int) int32 {
			return int32(qs[32*(s/2)+e] >> (4 * (s & 1)) & 15)
		})
		for k := 0; k < 8; k++ {
			acc[k] = lanes8FMA(d, float32(sumi[k]), acc[k])
		}
	}
	m0, m1 := accm[0]+accm[2], accm[1]+accm[3]
	return hsum8(&acc) + (m0 + m1)
}

// dotQ5KQ8KGo is the pure-Go Q5_K·Q8_K dot over nb super-blocks. The mins of each
// super-block are summed in integers and accumulated into one float with an FMA.
func dotQ5KQ8KGo(nb int, w, x []byte) float32 {
	var acc [8]float32
	var summs float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ5_K]byte)(w[b*BlockBytesQ5_K:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		sc, m := kScales((*[12]byte)(wb[4:16]))
		qh := (*[32]byte)(wb[16:])
		qs := (*[128]byte)(wb[48:])
		q8 := (*[QK_K]byte)(xb[4:])
		dx := q8kScale(xb)
		d := dx * halfToFloat(le16(wb[0:]))
		dmin := -(dx * halfToFloat(le16(wb[2:])))
		q8s := q8kGroupSums(xb)
		var ms int32
		for s := 0; s < 8; s++ {
			ms += m[s] * q8s[s]
		}
		summs = lanes8FMA(dmin, float32(ms), summs)
		var sumi [8]int32
		kLanes(&sumi, &sc, q8, func(s, e int) int32 {
			lo := int32(qs[32*(s/2)+e]>>(4*(s&1))) & 15
			return lo | int32(qh[e]>>s&1)<<4
		})
		for k := 0; k < 8; k++ {
			acc[k] = lanes8FMA(d, float32(sumi[k]), acc[k])
		}
	}
	return hsum8(&acc) + summs
}

// dotQ6KQ8KGo is the pure-Go Q6_K·Q8_K dot over nb super-blocks. Weights are used as
// unsigned 6-bit values; the −32 offset is subtracted per lane through the Q8_K bsums as ggml
// does it (lane k: 32·(bsum_2k·sc_2k + bsum_2k+1·sc_2k+1)), so the lanes hold the same
// integers as ggml's before the conversion to float.
func dotQ6KQ8KGo(nb int, w, x []byte) float32 {
	var acc [8]float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ6_K]byte)(w[b*BlockBytesQ6_K:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		ql := (*[128]byte)(wb[0:])
		qh := (*[64]byte)(wb[128:])
		sc := (*[16]byte)(wb[192:])
		q8 := (*[QK_K]byte)(xb[4:])
		var sumi [8]int32
		for c := 0; c < 8; c++ { // 32-element chunk c: elements 32c..32c+31
			j, m := c/4, c%4
			for k := 0; k < 8; k++ {
				var p int32
				for e := 4 * k; e < 4*k+4; e++ {
					lo := ql[64*j+32*(m&1)+e] >> (4 * (m >> 1)) & 15
					hi := qh[32*j+e] >> (2 * m) & 3
					p += int32(lo|hi<<4) * int32(int8(q8[32*c+e]))
				}
				sumi[k] += int32(int8(sc[2*c+k/4])) * p
			}
		}
		for k := 0; k < 8; k++ {
			b0 := int32(int16(le16(xb[4+QK_K+4*k:])))
			b1 := int32(int16(le16(xb[4+QK_K+4*k+2:])))
			sumi[k] -= 32 * (b0*int32(int8(sc[2*k])) + b1*int32(int8(sc[2*k+1])))
		}
		d := q8kScale(xb) * halfToFloat(le16(wb[208:]))
		for k := 0; k < 8; k++ {
			acc[k] = lanes8FMA(d, float32(sumi[k]), acc[k])
		}
	}
	return hsum8(&acc)
}
