package kernels

import (
	"encoding/binary"
	"math"
)

func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

// dotQ8_0Q8_0Go is the pure-Go Q8_0·Q8_0 dot over nb blocks.
func dotQ8_0Q8_0Go(nb int, w, x []byte) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ8_0]byte)(w[b*BlockBytesQ8_0:])
		xb := (*[BlockBytesQ8_0]byte)(x[b*BlockBytesQ8_0:])
		var s0, s1 int32
		for j := 2; j < BlockBytesQ8_0; j += 2 {
			s0 += int32(int8(wb[j])) * int32(int8(xb[j]))
			s1 += int32(int8(wb[j+1])) * int32(int8(xb[j+1]))
		}
		d := halfToFloat(le16(wb[0:])) * halfToFloat(le16(xb[0:]))
		sum += d * float32(s0+s1)
	}
	return sum
}

// dotQ4_0Q8_0Go is the pure-Go Q4_0·Q8_0 dot over nb blocks.
func dotQ4_0Q8_0Go(nb int, w, x []byte) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ4_0]byte)(w[b*BlockBytesQ4_0:])
		xb := (*[BlockBytesQ8_0]byte)(x[b*BlockBytesQ8_0:])
		var s0, s1 int32
		for j := 0; j < 16; j++ {
			q := wb[2+j]
			s0 += (int32(q&15) - 8) * int32(int8(xb[2+j]))
			s1 += (int32(q>>4) - 8) * int32(int8(xb[18+j]))
		}
		d := halfToFloat(le16(wb[0:])) * halfToFloat(le16(xb[0:]))
		sum += d * float32(s0+s1)
	}
	return sum
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

// q8kMins returns Σ_j m_j·(bsum_2j + bsum_2j+1) for a Q8_K block (exact in int32).
func q8kMins(xb *[BlockBytesQ8_K]byte, m *[8]int32) int32 {
	var s int32
	for j := 0; j < 8; j++ {
		b0 := int32(int16(le16(xb[4+QK_K+4*j:])))
		b1 := int32(int16(le16(xb[4+QK_K+4*j+2:])))
		s += m[j] * (b0 + b1)
	}
	return s
}

func q8kScale(xb *[BlockBytesQ8_K]byte) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(xb[0:]))
}

// dotQ4KQ8KGo is the pure-Go Q4_K·Q8_K dot over nb super-blocks.
func dotQ4KQ8KGo(nb int, w, x []byte) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ4_K]byte)(w[b*BlockBytesQ4_K:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		sc, m := kScales((*[12]byte)(wb[4:16]))
		qs := (*[128]byte)(wb[16:])
		q8 := (*[QK_K]byte)(xb[4:])
		var isum int32
		for c := 0; c < 4; c++ {
			var s0, s1 int32
			for l := 0; l < 32; l++ {
				q := qs[32*c+l]
				s0 += int32(q&15) * int32(int8(q8[64*c+l]))
				s1 += int32(q>>4) * int32(int8(q8[64*c+32+l]))
			}
			isum += sc[2*c]*s0 + sc[2*c+1]*s1
		}
		imin := q8kMins(xb, &m)
		dx := q8kScale(xb)
		d := halfToFloat(le16(wb[0:])) * dx
		dmin := halfToFloat(le16(wb[2:])) * dx
		sum += d*float32(isum) - dmin*float32(imin)
	}
	return sum
}

// dotQ5KQ8KGo is the pure-Go Q5_K·Q8_K dot over nb super-blocks.
func dotQ5KQ8KGo(nb int, w, x []byte) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ5_K]byte)(w[b*BlockBytesQ5_K:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		sc, m := kScales((*[12]byte)(wb[4:16]))
		qh := (*[32]byte)(wb[16:])
		qs := (*[128]byte)(wb[48:])
		q8 := (*[QK_K]byte)(xb[4:])
		var isum int32
		for c := 0; c < 4; c++ {
			var s0, s1 int32
			for l := 0; l < 32; l++ {
				q := qs[32*c+l]
				h := qh[l] >> (2 * c)
				s0 += int32(q&15|(h&1)<<4) * int32(int8(q8[64*c+l]))
				s1 += int32(q>>4|(h&2)<<3) * int32(int8(q8[64*c+32+l]))
			}
			isum += sc[2*c]*s0 + sc[2*c+1]*s1
		}
		imin := q8kMins(xb, &m)
		dx := q8kScale(xb)
		d := halfToFloat(le16(wb[0:])) * dx
		dmin := halfToFloat(le16(wb[2:])) * dx
		sum += d*float32(isum) - dmin*float32(imin)
	}
	return sum
}

// dotQ6KQ8KGo is the pure-Go Q6_K·Q8_K dot over nb super-blocks. The −32 offset is applied
// through the Q8_K bsums: Σ sc_s·Σ q·x − 32·Σ sc_s·bsum_s, in int64 (exact for any bytes).
func dotQ6KQ8KGo(nb int, w, x []byte) float32 {
	var sum float32
	for b := 0; b < nb; b++ {
		wb := (*[BlockBytesQ6_K]byte)(w[b*BlockBytesQ6_K:])
		xb := (*[BlockBytesQ8_K]byte)(x[b*BlockBytesQ8_K:])
		ql := (*[128]byte)(wb[0:])
		qh := (*[64]byte)(wb[128:])
		sc := (*[16]byte)(wb[192:])
		q8 := (*[QK_K]byte)(xb[4:])
		var isum int64
		for n := 0; n < 2; n++ {
			for half := 0; half < 2; half++ { // l in [16·half, 16·half+16) → sub-block offset half
				var s0, s1, s2, s3 int32
				for l := 16 * half; l < 16*half+16; l++ {
					a := ql[64*n+l]
					c := ql[64*n+32+l]
					h := qh[32*n+l]
					s0 += int32(a&15|(h&3)<<4) * int32(int8(q8[128*n+l]))
					s1 += int32(c&15|(h>>2&3)<<4) * int32(int8(q8[128*n+32+l]))
					s2 += int32(a>>4|(h>>4&3)<<4) * int32(int8(q8[128*n+64+l]))
					s3 += int32(c>>4|(h>>6)<<4) * int32(int8(q8[128*n+96+l]))
				}
				base := 8*n + half
				isum += int64(int8(sc[base]))*int64(s0) + int64(int8(sc[base+2]))*int64(s1) +
					int64(int8(sc[base+4]))*int64(s2) + int64(int8(sc[base+6]))*int64(s3)
			}
		}
		var ioff int64
		for s := 0; s < 16; s++ {
			ioff += int64(int8(sc[s])) * int64(int16(le16(xb[4+QK_K+2*s:])))
		}
		isum -= 32 * ioff
		d := halfToFloat(le16(wb[208:])) * q8kScale(xb)
		sum += d * float32(isum)
	}
	return sum
}
