//go:build amd64 && !purego

package kernels

import (
	"os"
	"sync"

	"golang.org/x/sys/cpu"
)

// amxKernel32x32BF16 computes the 32×32 block C (+)= A·B over ks steps of 32 k values (see
// amx.go for the layouts): a0 and a1 are rows 0-15 and 16-31 of the split rows at the first
// step (3 KiB per step), b the packed tiles (2 KiB per step), c rows ldc bytes apart; cfg is
// amxConfig.
//
//go:noescape
func amxKernel32x32BF16(ks int, a0, a1 *uint16, b *uint32, c *float32, ldc int, acc bool, cfg *byte)

// amxKernel32x32BF16R is amxKernel32x32BF16 for rounded rows (dpbf16.go's RoundedRows
// layout): a points at row 0 of the 32 rows at the first step, rows lda bytes apart, one bf16
// per value (64 bytes per step).
//
//go:noescape
func amxKernel32x32BF16R(ks int, a *byte, lda int, b *uint32, c *float32, ldc int, acc bool, cfg *byte)

var amxOnce struct {
	sync.Once
	ok bool
}

// haveAMX reports whether the CPU has AMX-TILE and AMX-BF16 and the kernel let this process
// use the tile data (Linux's arch_prctl permission, asked for on first use), unless TQ_AMX=off.
func haveAMX() bool {
	amxOnce.Do(func() {
		amxOnce.ok = haveAsm && cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16 &&
			os.Getenv("TQ_AMX") != "off" && amxPermit()
	})
	return amxOnce.ok
}

// splitBF16x3AVX512 splits steps·32 floats of src into dst in SplitRows' layout (192 bytes per
// step), with splitBF16x3's arithmetic.
//
//go:noescape
func splitBF16x3AVX512(dst *uint16, src *float32, steps int)

// packTilesBF16AVX512 packs 16 bf16 rows (ldb bytes apart) of steps·32 values into one tile
// per step (2,048 bytes apart), as packBF16AMX does.
//
//go:noescape
func packTilesBF16AVX512(dst *uint32, src *byte, ldb int, steps int)
