//go:build !amd64 || purego

package kernels

func toLanes16AVX512(X, W, x, qw *float32, n int)                              { panic(noAsm) }
func fromLanes16AVX512(L *uint8, src *int32, n int)                            { panic(noAsm) }
func toLanes8AVX2(X, W, x, qw *float32, n int)                                 { panic(noAsm) }
func fromLanes8AVX2(L *uint8, src *int32, n int)                               { panic(noAsm) }
func transpose8PanelAVX2(dst *float32, ldd int, src *float32, lds int, nb int) { panic(noAsm) }
