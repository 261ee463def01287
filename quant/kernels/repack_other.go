//go:build !amd64 || purego

package kernels

func dotQ4KRepackAVX2(w, x *byte, nb int) float32                              { panic(noAsm) }
func dotQ4KRepack4RowsAVX2(w *byte, stride int, x *byte, nb int, out *float32) { panic(noAsm) }
func dotQ4KRepackGemmAVX2(w, x *byte, xStride int, pre *uint32, nb int, out *float32) {
	panic(noAsm)
}
func dotQ4RepackAVX2(w, x *byte, nb int, lut *byte) float32 { panic(noAsm) }
func dotQ4Repack4RowsAVX2(w *byte, stride int, x *byte, nb int, lut *byte, out *float32) {
	panic(noAsm)
}
func dotQ4RepackGemmAVX2(w, x *byte, xStride int, xs *float32, nb int, lut *byte, out *float32) {
	panic(noAsm)
}
func dotQ4Repack8RowsAVX2(w *byte, stride int, x *byte, xs *float32, nb int, lut *byte, out *float32) {
	panic(noAsm)
}
