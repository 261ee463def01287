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

// haveDP is true when the CPU and OS run AVX-512F with AVX512-BF16, unless TQ_BF16DP=off.
var haveDP = have512 && cpu.X86.HasAVX512BF16 && os.Getenv("TQ_BF16DP") != "off"

func haveBF16DP() bool { return haveDP }
