package kernels

import (
	"encoding/binary"
	"math"
)

// elem is one weight decoded into its integer parts: w = (d·sc)·q − dmin·m. The test
// dequantizer below is written from the layout tables only and checked against ggml's own
// dequantized floats in TestDequantHelperGolden.
type elem struct {
	d    float32
	sc   int32
	q    int32
	dmin float32
	m    int32
}

// exact returns the weight in float64 (exact: fp16 × small integers).
func (e elem) exact() float64 {
	return float64(e.d)*float64(e.sc)*float64(e.q) - float64(e.dmin)*float64(e.m)
}

// mag returns |scale part| + |min part|, the magnitude the tolerances are relative to.
func (e elem) mag() float64 {
	return math.Abs(float64(e.d)*float64(e.sc)*float64(e.q)) + math.Abs(float64(e.dmin)*float64(e.m))
}

// ggml returns the weight with ggml's float32 rounding order.
func (e elem) ggml() float32 {
	a := float32(e.d * float32(e.sc))
	a = float32(a * float32(e.q))
	return a - float32(e.dmin*float32(e.m))
}

func h16(b []byte) float32 { return halfToFloat(binary.LittleEndian.Uint16(b)) }

// decodeRow decodes n elements of a row of type t (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q8_K).
func decodeRow(t Type, row []byte, n int) []elem {
	out := make([]elem, 0, n)
	switch t {
	case Q8_0:
		for b := 0; b < n/32; b++ {
			blk := row[b*34:]
			d := h16(blk)
			for j := 0; j < 32; j++ {
				out = append(out, elem{d: d, sc: 1, q: int32(int8(blk[2+j]))})
			}
		}
	case Q4_0:
		for b := 0; b < n/32; b++ {
			blk := row[b*18:]
			d := h16(blk)
			for j := 0; j < 32; j++ {
				v := blk[2+j%16]
				if j >= 16 {
					v >>= 4
				}
				out = append(out, elem{d: d, sc: 1, q: int32(v&15) - 8})
			}
		}
	case Q4_K, Q5_K:
		bs := BlockBytesQ4_K
		if t == Q5_K {
			bs = BlockBytesQ5_K
		}
		for b := 0; b < n/256; b++ {
			blk := row[b*bs:]
			d, dmin := h16(blk), h16(blk[2:])
			s := blk[4:16]
			for e := 0; e < 256; e++ {
				j := e / 32
				var sc, m int32
				if j < 4 {
					sc, m = int32(s[j]&63), int32(s[j+4]&63)
				} else {
					sc = int32(s[j+4]&15) | int32(s[j-4]>>6)<<4
					m = int32(s[j+4]>>4) | int32(s[j]>>6)<<4
				}
				c, l := e/64, e%64
				qs := blk[16:]
				if t == Q5_K {
					qs = blk[48:]
				}
				var q int32
				if l < 32 {
					q = int32(qs[32*c+l] & 15)
				} else {
					q = int32(qs[32*c+l-32] >> 4)
				}
				if t == Q5_K {
					if blk[16+e%32]>>(e/32)&1 != 0 {
						q += 16
					}
				}
				out = append(out, elem{d: d, sc: sc, q: q, dmin: dmin, m: m})
			}
		}
	case Q6_K:
		for b := 0; b < n/256; b++ {
			blk := row[b*210:]
			d := h16(blk[208:])
			for e := 0; e < 256; e++ {
				nh, r := e/128, e%128
				k, l := r/32, r%32
				var lo int32
				switch k {
				case 0:
					lo = int32(blk[64*nh+l] & 15)
				case 1:
					lo = int32(blk[64*nh+32+l] & 15)
				case 2:
					lo = int32(blk[64*nh+l] >> 4)
				case 3:
					lo = int32(blk[64*nh+32+l] >> 4)
				}
				hi := int32(blk[128+32*nh+l]>>(2*k)) & 3
				sc := int32(int8(blk[192+e/16]))
				out = append(out, elem{d: d, sc: sc, q: lo | hi<<4 - 32})
			}
		}
	case Q8_K:
		for b := 0; b < n/256; b++ {
			blk := row[b*292:]
			d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
			for j := 0; j < 256; j++ {
				out = append(out, elem{d: d, sc: 1, q: int32(int8(blk[4+j]))})
			}
		}
	default:
		panic("decodeRow: unsupported type")
	}
	return out
}

// refDot returns the float64 reference Σ w·x of a weight row and an activation row (both
// decoded exactly) and S = Σ mag(w)·|x|, the scale of the tolerances.
func refDot(wt Type, w []byte, at Type, x []byte, n int) (ref, s float64) {
	we := decodeRow(wt, w, n)
	xe := decodeRow(at, x, n)
	for i := range we {
		xv := xe[i].exact()
		ref += we[i].exact() * xv
		s += we[i].mag() * math.Abs(xv)
	}
	return ref, s
}
