//go:build amd64 && !purego

package kernels

// toLanes16AVX512 is ToLanes16's assembly (n a multiple of 16; qw nil: W = X·X).
//
//go:noescape
func toLanes16AVX512(X, W, x, qw *float32, n int)

// fromLanes16AVX512 is FromLanes16's assembly (n a multiple of 16).
//
//go:noescape
func fromLanes16AVX512(L *uint8, src *int32, n int)

// toLanes8AVX2 is ToLanes8's assembly (n a multiple of 8; qw nil: W = X·X).
//
//go:noescape
func toLanes8AVX2(X, W, x, qw *float32, n int)

// fromLanes8AVX2 is FromLanes8's assembly (n a multiple of 8).
//
//go:noescape
func fromLanes8AVX2(L *uint8, src *int32, n int)

// transpose8PanelAVX2 transposes eight rows of nb·8 values (src, rows lds values apart) into
// nb·8 rows of eight values (dst, ldd values apart).
//
//go:noescape
func transpose8PanelAVX2(dst *float32, ldd int, src *float32, lds int, nb int)
