//go:build amd64 && !purego

package kernels

// scaleMaxAVX2 scales x[0:n] (n a multiple of 8) in place and returns the VMAXPS maximum of
// the scaled values and whether any of them is NaN.
//
//go:noescape
func scaleMaxAVX2(x *float32, scale float32, n int) (mx float32, nan bool)
