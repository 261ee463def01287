package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDequantize: arbitrary bytes and lengths never panic; a matching length
// always decodes.
func FuzzDequantize(f *testing.F) {
	types := SupportedTypes()
	for i := range types {
		f.Add(uint8(i), bytes.Repeat([]byte{0xff, 0x7b, 0x00, 0x80}, 80), uint16(256))
		f.Add(uint8(i), []byte{}, uint16(0))
	}
	f.Add(uint8(3), []byte("TQGV\x01"), uint16(33))
	f.Fuzz(func(t *testing.T, ti uint8, data []byte, n uint16) {
		typ := types[int(ti)%len(types)]
		tr, _ := typ.Traits()
		_ = Dequantize(typ, make([]float32, int(n)), data) // any outcome but a panic
		nb := len(data) / tr.TypeSize
		y := make([]float32, nb*tr.BlockSize)
		if err := Dequantize(typ, y, data[:nb*tr.TypeSize]); err != nil {
			t.Fatalf("%v: %d whole blocks: %v", typ, nb, err)
		}
	})
}

// FuzzQuantize: arbitrary float32 bit patterns either quantize to blocks that decode
// to finite values, or are rejected with an error (NaN/Inf input, fp16 overflow).
func FuzzQuantize(f *testing.F) {
	f.Add(uint8(4), false, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0})
	f.Add(uint8(9), true, []byte{1, 0, 0, 0, 0xff, 0xff, 0x7f, 0x7f})
	f.Add(uint8(14), true, bytes.Repeat([]byte{0x12, 0x34, 0x56}, 50))
	f.Fuzz(func(t *testing.T, ti uint8, improved bool, raw []byte) {
		typ := weightTypes[int(ti)%len(weightTypes)]
		const n = 512
		x := make([]float32, n)
		if len(raw) >= 4 {
			for i := range x {
				o := (4 * i) % (len(raw) - 3)
				x[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[o:]))
			}
		}
		mode := ModeReference
		var im []float32
		if improved {
			mode = ModeImproved
			im = make([]float32, n)
			for i := range im {
				im[i] = float32(i%7) * 0.5 // includes zero weights
			}
		}
		dst := make([]byte, mustRowSize(t, typ, n))
		if err := Quantize(typ, dst, x, 1, n, &Options{Mode: mode, Importance: im, TensorName: "fuzz"}); err != nil {
			return
		}
		y := make([]float32, n)
		if err := Dequantize(typ, y, dst); err != nil {
			t.Fatal(err)
		}
		for i, v := range y {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%v mode %v: finite input x[%d]=%v decoded to %v", typ, mode, i, x[i], v)
			}
		}
	})
}
