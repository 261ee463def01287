//go:build amd64 && !purego

#include "textflag.h"

// func ropeNeoxAVX2(x0, x1, cs *float32, n int)
TEXT ·ropeNeoxAVX2(SB), NOSPLIT, $0-32
	MOVQ x0+0(FP), DI
	MOVQ x1+8(FP), SI
	MOVQ cs+16(FP), DX
	MOVQ n+24(FP), CX

neoxloop:
	VMOVUPS     0(DX), Y0           // c0 s0 c1 s1 c2 s2 c3 s3
	VMOVUPS     32(DX), Y1          // c4 s4 ... c7 s7
	VSHUFPS     $0x88, Y1, Y0, Y2   // c0 c1 c4 c5 | c2 c3 c6 c7
	VSHUFPS     $0xdd, Y1, Y0, Y3   // s0 s1 s4 s5 | s2 s3 s6 s7
	VPERMPD     $0xd8, Y2, Y2       // c0..c7
	VPERMPD     $0xd8, Y3, Y3       // s0..s7
	VMOVUPS     0(DI), Y4           // x0
	VMOVUPS     0(SI), Y5           // x1
	VMULPS      Y3, Y5, Y6          // x1·s
	VMULPS      Y2, Y5, Y7          // x1·c
	VFMSUB231PS Y2, Y4, Y6          // x0·c − x1·s
	VFMADD231PS Y3, Y4, Y7          // x0·s + x1·c
	VMOVUPS     Y6, 0(DI)
	VMOVUPS     Y7, 0(SI)
	ADDQ        $32, DI
	ADDQ        $32, SI
	ADDQ        $64, DX
	SUBQ        $8, CX
	JNZ         neoxloop
	VZEROUPPER
	RET

// func ropeNormAVX2(x, cs *float32, n int)
// Even lanes hold x0 and c, odd lanes x1 and s. With xs = the pair-swapped x, cc = c in both
// lanes of a pair and ss = s: A = x·cc − xs·ss is x0' in the even lanes, B = xs·ss + x·cc is
// x1' in the odd lanes (xs·ss = x0·s there, x·cc = x1·c).
TEXT ·ropeNormAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), DI
	MOVQ cs+8(FP), DX
	MOVQ n+16(FP), CX

normloop:
	VMOVUPS     0(DI), Y0           // x0 x1 ...
	VMOVUPS     0(DX), Y1           // c s ...
	VPERMILPS   $0xb1, Y0, Y2       // x1 x0 ...
	VMOVSLDUP   Y1, Y3              // c c ...
	VMOVSHDUP   Y1, Y4              // s s ...
	VMULPS      Y4, Y2, Y5          // even: x1·s
	VFMSUB231PS Y3, Y0, Y5          // even: x0·c − x1·s
	VMULPS      Y3, Y0, Y6          // odd: x1·c
	VFMADD231PS Y4, Y2, Y6          // odd: x0·s + x1·c
	VBLENDPS    $0xaa, Y6, Y5, Y5   // odd lanes from Y6
	VMOVUPS     Y5, 0(DI)
	ADDQ        $32, DI
	ADDQ        $32, DX
	SUBQ        $8, CX
	JNZ         normloop
	VZEROUPPER
	RET
