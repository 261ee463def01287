//go:build amd64 && !purego

package kernels

//go:noescape
func sumSqMaxAbsAVX2(sum *float64, mx *float32, x *float32, n int)
