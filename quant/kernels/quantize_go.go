package kernels

import (
	"encoding/binary"
	"math"
)

// quantizeQ8_0Go quantizes nb blocks of 32 floats to Q8_0 exactly like ggml's x86 CPU
// from_float: d = amax/127 stored as fp16, q = round-half-even(x·(127/amax)), saturated to int8.
func quantizeQ8_0Go(dst []byte, x []float32, nb int) {
	for b := 0; b < nb; b++ {
		xb := (*[QK8_0]float32)(x[b*QK8_0 : b*QK8_0+QK8_0])
		yb := (*[BlockBytesQ8_0]byte)(dst[b*BlockBytesQ8_0 : b*BlockBytesQ8_0+BlockBytesQ8_0])
		var amax float32
		for _, v := range xb {
			a := float32(math.Abs(float64(v)))
			if a > amax {
				amax = a
			}
		}
		d := amax / 127
		binary.LittleEndian.PutUint16(yb[0:], floatToHalf(d))
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		for j, v := range xb {
			yb[2+j] = byte(satInt8(math.RoundToEven(float64(float32(v * id)))))
		}
	}
}

// quantizeQ8KGo quantizes nb super-blocks of 256 floats to Q8_K exactly like ggml's
// quantize_row_q8_K_ref: max is the first element of largest |x|, iscale = −127/max,
// q = min(127, round-half-even(iscale·x)), d = 1/iscale (float32), bsums = sums of 16 q.
// An all-zero block gets d = 0, q = 0 and bsums = 0.
func quantizeQ8KGo(dst []byte, x []float32, nb int) {
	for b := 0; b < nb; b++ {
		xb := (*[QK_K]float32)(x[b*QK_K : b*QK_K+QK_K])
		yb := (*[BlockBytesQ8_K]byte)(dst[b*BlockBytesQ8_K : b*BlockBytesQ8_K+BlockBytesQ8_K])
		var amax, max float32
		for _, v := range xb {
			a := float32(math.Abs(float64(v)))
			if a > amax {
				amax, max = a, v
			}
		}
		if amax == 0 {
			clear(yb[:])
			continue
		}
		iscale := -127 / max
		for j, v := range xb {
			q := math.RoundToEven(float64(float32(iscale * v)))
			if q > 127 {
				q = 127
			}
			yb[4+j] = byte(satInt8(q))
		}
		for g := 0; g < QK_K/16; g++ {
			var s int16
			for _, q := range yb[4+16*g : 4+16*g+16] {
				s += int16(int8(q))
			}
			binary.LittleEndian.PutUint16(yb[4+QK_K+2*g:], uint16(s))
		}
		binary.LittleEndian.PutUint32(yb[0:], math.Float32bits(1/iscale))
	}
}

// satInt8 converts an integral float64 to int8 with saturation, as the x86 pack
// instructions do. NaN maps to 0.
func satInt8(v float64) int8 {
	switch {
	case v >= 127:
		return 127
	case v <= -128:
		return -128
	case v == v:
		return int8(v)
	}
	return 0
}
