package quant

// Legacy 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (facts §2.4).
// Byte layouts (little endian):
//
//	Q4_0  d:f16 | qs[16]            x = d·(q-8)      qs[j]: low nibble = elem j, high = elem j+16
//	Q4_1  d:f16 | m:f16 | qs[16]    x = d·q + m
//	Q5_0  d:f16 | qh:u32 | qs[16]   x = d·(q-16)     bit 4 of elem j in qh bit j
//	Q5_1  d:f16 | m:f16 | qh | qs   x = d·q + m
//	Q8_0  d:f16 | qs[32] int8       x = d·q

import (
	"encoding/binary"
	"math"

	"github.com/tq-project/tq/quant/kernels"
)

// truncI32 converts like C's float->int cast on x86-64 (cvttss2si): truncation
// toward zero, and 0x80000000 for NaN or out-of-range values. Using it on every
// platform keeps the bytes for degenerate input identical everywhere.
func truncI32(v float32) int32 {
	if !(v > -2147483904 && v < 2147483648) {
		return math.MinInt32
	}
	return int32(v)
}

func quantRowQ4_0Ref(dst []byte, x []float32) {
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeQ4_0*ib : sizeQ4_0*ib+sizeQ4_0]
		max, _ := signedMax(xb)
		d := max / -8
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(yb, d)
		for j := 0; j < 16; j++ {
			xi0 := uint8(min(15, int32(int8(truncI32(float32(xb[j]*id)+8.5)))))
			xi1 := uint8(min(15, int32(int8(truncI32(float32(xb[j+16]*id)+8.5)))))
			yb[2+j] = xi0 | xi1<<4
		}
	}
}

func minMax(x []float32) (mn, mx float32) {
	mn, mx = math.MaxFloat32, -math.MaxFloat32
	for _, v := range x {
		if v < mn {
			mn = v
		}
		if v > mx {
			mx = v
		}
	}
	return
}

func quantRowQ4_1Ref(dst []byte, x []float32) {
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeQ4_1*ib : sizeQ4_1*ib+sizeQ4_1]
		mn, mx := minMax(xb)
		d := (mx - mn) / 15
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(yb, d)
		putF16(yb[2:], mn)
		for j := 0; j < 16; j++ {
			xi0 := uint8(min(15, int32(int8(truncI32(float32((xb[j]-mn)*id)+0.5)))))
			xi1 := uint8(min(15, int32(int8(truncI32(float32((xb[j+16]-mn)*id)+0.5)))))
			yb[4+j] = xi0 | xi1<<4
		}
	}
}

func packQ5(qs []byte, qhOut []byte, lo, hi [16]uint8) {
	var qh uint32
	for j := 0; j < 16; j++ {
		xi0, xi1 := lo[j], hi[j]
		qs[j] = xi0&0x0f | (xi1&0x0f)<<4
		qh |= uint32(xi0&0x10) >> 4 << j
		qh |= uint32(xi1&0x10) >> 4 << (j + 16)
	}
	binary.LittleEndian.PutUint32(qhOut, qh)
}

func quantRowQ5_0Ref(dst []byte, x []float32) {
	var lo, hi [16]uint8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeQ5_0*ib : sizeQ5_0*ib+sizeQ5_0]
		max, _ := signedMax(xb)
		d := max / -16
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(yb, d)
		for j := 0; j < 16; j++ {
			lo[j] = uint8(min(31, int32(int8(truncI32(float32(xb[j]*id)+16.5)))))
			hi[j] = uint8(min(31, int32(int8(truncI32(float32(xb[j+16]*id)+16.5)))))
		}
		packQ5(yb[6:22], yb[2:6], lo, hi)
	}
}

func quantRowQ5_1Ref(dst []byte, x []float32) {
	var lo, hi [16]uint8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeQ5_1*ib : sizeQ5_1*ib+sizeQ5_1]
		mn, mx := minMax(xb)
		d := (mx - mn) / 31
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(yb, d)
		putF16(yb[2:], mn)
		for j := 0; j < 16; j++ {
			// ggml casts straight to uint8 here, without a clamp to 31.
			lo[j] = uint8(truncI32(float32((xb[j]-mn)*id) + 0.5))
			hi[j] = uint8(truncI32(float32((xb[j+16]-mn)*id) + 0.5))
		}
		packQ5(yb[8:24], yb[4:8], lo, hi)
	}
}

// roundHalfAway is C roundf: round half away from zero.
func roundHalfAway(v float32) float32 { return float32(math.Round(float64(v))) }

func quantRowQ8_0Ref(dst []byte, x []float32) {
	if kernels.QuantizeRowQ8_0Ref(dst, x) {
		return
	}
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeQ8_0*ib : sizeQ8_0*ib+sizeQ8_0]
		var amax float32
		for _, v := range xb {
			if av := fabs(v); !(amax > av) {
				amax = av
			}
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		putF16(yb, d)
		for j, v := range xb {
			yb[2+j] = byte(int8(truncI32(roundHalfAway(v * id))))
		}
	}
}

// rowSigma2 is Σx²/n over a whole row (the legacy imatrix quantizers' σ²).
func rowSigma2(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += float32(v * v)
	}
	return s / float32(len(x))
}

// superBlockSigma2 is 2·Σx²/QK_K over one super-block x (QK_K values), the σ² of ggml's
// importance weighting for Q3_K, Q4_K and Q5_K, rounded as ggml rounds it.
func superBlockSigma2(x []float32) float32 {
	var s float32
	for _, v := range x {
		s += float32(v * v)
	}
	return float32(2 * s / QK_K)
}

// imatrixWeights fills w[j] = qw[j]·sqrt(sigma2 + x[j]²) (ggml's imatrix weighting).
func imatrixWeights(w, x, qw []float32, sigma2 float32) { kernels.ImatrixWeights(w, x, qw, sigma2) }

// quantRowQ4_0Imp is quantize_row_q4_0_impl (imatrix present).
func quantRowQ4_0Imp(dst []byte, x, qw []float32, s *scratch) {
	sigma2 := rowSigma2(x)
	w := s.w[:32]
	L := s.L[:32]
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeQ4_0*ib : sizeQ4_0*ib+sizeQ4_0]
		imatrixWeights(w, xb, qw[32*ib:32*ib+32], sigma2)
		d := ggmlQxQuants(xb, L, 8, w)
		putF16(yb, d)
		for j := 0; j < 16; j++ {
			yb[2+j] = uint8(L[j]) | uint8(L[j+16])<<4
		}
	}
}

// quantRowQ5_0Imp is quantize_row_q5_0_impl.
func quantRowQ5_0Imp(dst []byte, x, qw []float32, s *scratch) {
	sigma2 := rowSigma2(x)
	w := s.w[:32]
	L := s.L[:32]
	var lo, hi [16]uint8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeQ5_0*ib : sizeQ5_0*ib+sizeQ5_0]
		imatrixWeights(w, xb, qw[32*ib:32*ib+32], sigma2)
		d := ggmlQxQuants(xb, L, 16, w)
		putF16(yb, d)
		for j := 0; j < 16; j++ {
			lo[j], hi[j] = uint8(L[j]), uint8(L[j+16])
		}
		packQ5(yb[6:22], yb[2:6], lo, hi)
	}
}

// quantRowQ4_1Imp is quantize_row_q4_1_impl.
func quantRowQ4_1Imp(dst []byte, x, qw []float32, s *scratch) {
	sigma2 := rowSigma2(x)
	w := s.w[:32]
	L := s.Lu[:32]
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeQ4_1*ib : sizeQ4_1*ib+sizeQ4_1]
		imatrixWeights(w, xb, qw[32*ib:32*ib+32], sigma2)
		var mn float32
		d := ggmlQkxQuants(xb, w, L, s.Laux[:32], &mn, 15, -0.9, 0.05, 36, false, true)
		putF16(yb, d)
		putF16(yb[2:], -mn)
		for j := 0; j < 16; j++ {
			yb[4+j] = L[j] | L[j+16]<<4
		}
	}
}

// quantRowQ5_1Imp is quantize_row_q5_1_impl.
func quantRowQ5_1Imp(dst []byte, x, qw []float32, s *scratch) {
	sigma2 := rowSigma2(x)
	w := s.w[:32]
	L := s.Lu[:32]
	var lo, hi [16]uint8
	for ib := 0; ib < len(x)/32; ib++ {
		xb := x[32*ib : 32*ib+32]
		yb := dst[sizeQ5_1*ib : sizeQ5_1*ib+sizeQ5_1]
		imatrixWeights(w, xb, qw[32*ib:32*ib+32], sigma2)
		var mn float32
		d := ggmlQkxQuants(xb, w, L, s.Laux[:32], &mn, 31, -0.9, 0.05, 36, false, true)
		putF16(yb, d)
		putF16(yb[2:], -mn)
		for j := 0; j < 16; j++ {
			lo[j], hi[j] = L[j], L[j+16]
		}
		packQ5(yb[8:24], yb[4:8], lo, hi)
	}
}

func dequantQ4_0(y []float32, b []byte) {
	for ib := 0; ib < len(y)/32; ib++ {
		yb := y[32*ib : 32*ib+32]
		bb := b[sizeQ4_0*ib : sizeQ4_0*ib+sizeQ4_0]
		d := getF16(bb)
		qs := bb[2:18]
		for j := 0; j < 16; j++ {
			yb[j] = float32(int32(qs[j]&0x0f)-8) * d
			yb[j+16] = float32(int32(qs[j]>>4)-8) * d
		}
	}
}

func dequantQ4_1(y []float32, b []byte) {
	for ib := 0; ib < len(y)/32; ib++ {
		yb := y[32*ib : 32*ib+32]
		bb := b[sizeQ4_1*ib : sizeQ4_1*ib+sizeQ4_1]
		d, m := getF16(bb), getF16(bb[2:])
		qs := bb[4:20]
		for j := 0; j < 16; j++ {
			yb[j] = float32(float32(qs[j]&0x0f)*d) + m
			yb[j+16] = float32(float32(qs[j]>>4)*d) + m
		}
	}
}

func dequantQ5_0(y []float32, b []byte) {
	for ib := 0; ib < len(y)/32; ib++ {
		yb := y[32*ib : 32*ib+32]
		bb := b[sizeQ5_0*ib : sizeQ5_0*ib+sizeQ5_0]
		d := getF16(bb)
		qh := binary.LittleEndian.Uint32(bb[2:])
		qs := bb[6:22]
		for j := 0; j < 16; j++ {
			h0 := uint8(qh>>j<<4) & 0x10
			h1 := uint8(qh>>(j+12)) & 0x10
			yb[j] = float32(int32(qs[j]&0x0f|h0)-16) * d
			yb[j+16] = float32(int32(qs[j]>>4|h1)-16) * d
		}
	}
}

func dequantQ5_1(y []float32, b []byte) {
	for ib := 0; ib < len(y)/32; ib++ {
		yb := y[32*ib : 32*ib+32]
		bb := b[sizeQ5_1*ib : sizeQ5_1*ib+sizeQ5_1]
		d, m := getF16(bb), getF16(bb[2:])
		qh := binary.LittleEndian.Uint32(bb[4:])
		qs := bb[8:24]
		for j := 0; j < 16; j++ {
			h0 := uint8(qh>>j<<4) & 0x10
			h1 := uint8(qh>>(j+12)) & 0x10
			yb[j] = float32(float32(qs[j]&0x0f|h0)*d) + m
			yb[j+16] = float32(float32(qs[j]>>4|h1)*d) + m
		}
	}
}

func dequantQ8_0(y []float32, b []byte) {
	for ib := 0; ib < len(y)/32; ib++ {
		yb := y[32*ib : 32*ib+32]
		bb := b[sizeQ8_0*ib : sizeQ8_0*ib+sizeQ8_0]
		d := getF16(bb)
		qs := bb[2:34]
		for j := range yb {
			yb[j] = float32(int8(qs[j])) * d
		}
	}
}
