//go:build amd64 && !purego

package kernels

// Repack-order assembly kernels (repack_amd64.s). Callers guarantee the lengths; lut points
// to the 16 signed nibble values (lutQ4_0 or kvaluesIQ4NL).

// dotQ4KRepackAVX2 is DotQ4_KQ8KRepack over nb super-blocks.
//
//go:noescape
func dotQ4KRepackAVX2(w, x *byte, nb int) float32

// dotQ4KRepack4RowsAVX2 writes the gemv-order dots of the 4 Q4_K rows at w, w+stride, …
// with the Q8_K row x to out[0:4].
//
//go:noescape
func dotQ4KRepack4RowsAVX2(w *byte, stride int, x *byte, nb int, out *float32)

// dotQ4KRepackGemmAVX2 writes the gemm-order dots of the Q4_K row w with the 4 Q8_K rows at
// x, x+xStride, … to out[0:4]; pre is their table from gemmPreQ4K.
//
//go:noescape
func dotQ4KRepackGemmAVX2(w, x *byte, xStride int, pre *uint32, nb int, out *float32)

// dotQ4RepackAVX2 is the gemv-order Q4_0/IQ4_NL · Q8_0 dot over nb blocks.
//
//go:noescape
func dotQ4RepackAVX2(w, x *byte, nb int, lut *byte) float32

// dotQ4Repack4RowsAVX2 writes the gemv-order dots of the 4 rows at w, w+stride, … with the
// Q8_0 row x to out[0:4].
//
//go:noescape
func dotQ4Repack4RowsAVX2(w *byte, stride int, x *byte, nb int, lut *byte, out *float32)

// dotQ4Repack8RowsAVX2 writes the gemv-order dots of the 8 rows at w, w+stride, … with the
// Q8_0 row x to out[0:8]; xs[b] is the float32 scale of activation block b.
//
//go:noescape
func dotQ4Repack8RowsAVX2(w *byte, stride int, x *byte, xs *float32, nb int, lut *byte, out *float32)

// dotQ4RepackGemmAVX2 writes the gemm-order dots of the row w with the 4 Q8_0 rows at x,
// x+xStride, … to out[0:4]; xs[4b+k] is the float32 scale of block b of activation row k.
//
//go:noescape
func dotQ4RepackGemmAVX2(w, x *byte, xStride int, xs *float32, nb int, lut *byte, out *float32)
