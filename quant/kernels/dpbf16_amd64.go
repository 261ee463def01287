//go:build amd64 && !purego

package kernels

import (
	"os"

	"golang.org/x/sys/cpu"
)

// dpKernel8x32 computes the 8×32 block C (+)= A·B over ks steps of 32 k values (dpbf16.go's
// layouts; a rows lda bytes apart, c rows ldc bytes apart).
//
//go:noescape
func dpKernel8x32(ks int, a *byte, lda int, b *uint32, c *float32, ldc int, acc bool)

// roundBF16AVX512 writes RoundBF16 of n values (a multiple of 16) of src into dst.
//
//go:noescape
func roundBF16AVX512(dst *byte, src *float32, n int)

// haveDP is true when the CPU and OS run AVX-512F with AVX512-BF16.
var haveDP = have512 && cpu.X86.HasAVX512BF16

func haveBF16DP() bool { return haveDP }

// cpuidVendor returns CPUID leaf 0's vendor string in its three registers
// ("GenuineIntel": "Genu", "ineI", "ntel").
//
//go:noescape
func cpuidVendor() (ebx, edx, ecx uint32)

// vendor is the CPU's vendor string ("GenuineIntel", "AuthenticAMD", ...).
func vendor() string {
	b, d, c := cpuidVendor()
	var v [12]byte
	for i, r := range [3]uint32{b, d, c} {
		v[4*i], v[4*i+1], v[4*i+2], v[4*i+3] = byte(r), byte(r>>8), byte(r>>16), byte(r>>24)
	}
	return string(v[:])
}

// dpDefault is whether the rounded products take the VDPBF16PS kernel where AMX is not in
// use: TQ_BF16DP=off or on decides for a whole process, else dpPays.
func dpDefault() bool {
	switch os.Getenv("TQ_BF16DP") {
	case "off":
		return false
	case "on":
		return haveDP
	}
	return haveDP && dpPays(vendor())
}
