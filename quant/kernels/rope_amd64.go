//go:build amd64 && !purego

package kernels

// ropeNeoxAVX2 rotates pairs (x0[j], x1[j]) for j < n (a multiple of 8) with cs[2j], cs[2j+1].
//
//go:noescape
func ropeNeoxAVX2(x0, x1, cs *float32, n int)

// ropeNormAVX2 rotates the adjacent pairs of x[0:n] (n a multiple of 8) with cs[0:n].
//
//go:noescape
func ropeNormAVX2(x, cs *float32, n int)
