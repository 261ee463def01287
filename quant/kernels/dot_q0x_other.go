//go:build !amd64 || purego

package kernels

func q0xDotQ5_0AVX2(w, x *byte, nb int, acc *[8]float32)            { panic(noAsm) }
func q0xDotIQ4NLPairsAVX2(w, x *byte, npairs int, acc *[16]float32) { panic(noAsm) }
func q0xDotIQ4NLAVX2(w, x *byte, nb int, acc *[8]float32)           { panic(noAsm) }
func q0xDotQ4_1AVX2(w, x *byte, nb int, acc *[8]float32) float32    { panic(noAsm) }
func q0xDotQ5_1AVX2(w, x *byte, nb int, acc *[8]float32) float32    { panic(noAsm) }
