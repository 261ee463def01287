//go:build ignore

// q0tile_gen.go writes q0tile_amd64.s and q0tile_kern_amd64.go: the register-tiled
// Q8_0·Q8_0 and Q4_0·Q8_0 micro-kernels behind MatMulQ0. Run with
//
//	go run q0tile_gen.go
//
// Each kernel computes an R×C tile (R weight rows × C activation rows) with one YMM
// accumulator per output, in exactly the operation order of dotQ8_0Q8_0AVX2 /
// dotQ4_0Q8_0AVX2 (dotq_amd64.s) per output: per block the 8 int32 lanes are converted to
// float and added with VFMADD231PS against the broadcast float32 product fp16(w.d)·x.d; the
// lanes are summed at the end in hsum8's order. Only the sharing of loads and the
// interleaving of independent outputs differ.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"sort"
)

// shapes lists the R×C tiles generated. MatMulQ0 uses qtR×qtC tiles, R×1..qtC-1 on the
// token edge, 1×1..qtC on the row edge, and decR×1 for T = 1 (see q0tile.go).
var shapes = [][2]int{
	{1, 1}, {1, 2}, {1, 3},
	{4, 1}, {4, 2}, {4, 3},
	{8, 1},
}

type gen struct {
	b          bytes.Buffer
	q4         bool
	R, C       int
	acc        []string // acc[r*C+t]
	A, T, S    string   // |w| (Q8) or nibbles (Q4); temporary; broadcast scale
	ones       string   // register with int16 ones, or "" for the memory constant
	xr         []string // x rows in registers (Q8), or nil
	cr         []string // Q4: 8·x pair sums in registers, or nil (then on the stack)
	dec        bool     // decode (C = 1) variant: products row-major, p[r·nb + b]
	frameBytes int
}

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.b, "\t"+format+"\n", args...) }

// wAddr is the address of byte off of weight row r (rows 0..3 from SI, 4..7 from R11).
func wAddr(r, off int) string {
	base := "SI"
	if r >= 4 {
		base = "R11"
	}
	switch r % 4 {
	case 0:
		return fmt.Sprintf("%d(%s)", off, base)
	case 1:
		return fmt.Sprintf("%d(%s)(R9*1)", off, base)
	case 2:
		return fmt.Sprintf("%d(%s)(R9*2)", off, base)
	}
	return fmt.Sprintf("%d(%s)(R10*1)", off, base)
}

// xAddr is the address of byte off of activation row t (t < 3).
func xAddr(t, off int) string {
	switch t {
	case 0:
		return fmt.Sprintf("%d(DI)", off)
	case 1:
		return fmt.Sprintf("%d(DI)(R12*1)", off)
	}
	return fmt.Sprintf("%d(DI)(R12*2)", off)
}

func name(q4 bool, R, C int) string {
	if C == 0 { // decode variant
		if q4 {
			return fmt.Sprintf("q0tQ4R%dD", R)
		}
		return fmt.Sprintf("q0tQ8R%dD", R)
	}
	if q4 {
		return fmt.Sprintf("q0tQ4R%dC%d", R, C)
	}
	return fmt.Sprintf("q0tQ8R%dC%d", R, C)
}

func (g *gen) alloc() {
	n := 0
	next := func() string { s := fmt.Sprintf("Y%d", n); n++; return s }
	for i := 0; i < g.R*g.C; i++ {
		g.acc = append(g.acc, next())
	}
	g.A, g.T, g.S = next(), next(), next()
	free := func() int { return 16 - n }
	if free() >= 1 {
		g.ones = next()
	}
	if g.q4 {
		if free() >= g.C {
			for t := 0; t < g.C; t++ {
				g.cr = append(g.cr, next())
			}
		}
	} else if free() >= g.C {
		for t := 0; t < g.C; t++ {
			g.xr = append(g.xr, next())
		}
	}
	// Stack: scale products (32 bytes per token), then the Q4 8·x sums if not in registers.
	if g.q4 && g.cr == nil {
		g.frameBytes = 32 * g.C
	}
}

func (g *gen) onesOp() string {
	if g.ones != "" {
		return g.ones
	}
	return "q0tone16<>(SB)"
}

func (g *gen) kernel() {
	R, C := g.R, g.C
	wb := 34
	if g.q4 {
		wb = 18
	}
	nm := name(g.q4, R, C)
	if g.dec {
		nm = name(g.q4, R, 0)
	}
	fmt.Fprintf(&g.b, "// func %s(w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int)\n", nm)
	fmt.Fprintf(&g.b, "TEXT ·%s(SB), NOSPLIT, $%d-64\n", nm, g.frameBytes)
	g.p("MOVQ w+0(FP), SI")
	g.p("MOVQ rowBytes+8(FP), R9")
	g.p("LEAQ (R9)(R9*2), R10")
	if R > 4 {
		g.p("LEAQ (SI)(R9*4), R11")
	}
	g.p("MOVQ x+16(FP), DI")
	g.p("MOVQ xRowBytes+24(FP), R12")
	g.p("MOVQ p+32(FP), DX")
	g.p("MOVQ nb+40(FP), CX")
	if g.dec {
		// Row r's products at DX + r·4nb: bases DX and BX (= DX + 4·4nb), strides R13 = 4nb
		// and AX = 12nb.
		g.p("LEAQ (CX*4), R13")
		g.p("LEAQ (R13)(R13*2), AX")
		g.p("LEAQ (DX)(R13*4), BX")
	}
	for _, a := range g.acc {
		g.p("VXORPS %s, %s, %s", a, a, a)
	}
	if g.ones != "" {
		g.p("VPBROADCASTW q0tone16<>(SB), %s", g.ones)
	}
	lbl := nm + "loop"
	fmt.Fprintf(&g.b, "%s:\n", lbl)

	if g.q4 {
		// Per token: the int16 pair sums of 8·x, subtracted from nibble·x below.
		for t := 0; t < C; t++ {
			dst := g.T
			if g.cr != nil {
				dst = g.cr[t]
			}
			g.p("VPBROADCASTB q0teight<>(SB), %s", dst)
			g.p("VPMADDUBSW %s, %s, %s", xAddr(t, 2), dst, dst)
			if g.cr == nil {
				g.p("VMOVDQU %s, %d(SP)", dst, 32*t)
			}
		}
		for r := 0; r < R; r++ {
			g.p("VBROADCASTI128 %s, %s", wAddr(r, 2), g.A)
			g.p("VPSRLVQ q0thishift<>(SB), %s, %s", g.A, g.A)
			g.p("VPAND q0tnib<>(SB), %s, %s", g.A, g.A)
			for t := 0; t < C; t++ {
				g.p("VPMADDUBSW %s, %s, %s", xAddr(t, 2), g.A, g.T)
				if g.cr != nil {
					g.p("VPSUBW %s, %s, %s", g.cr[t], g.T, g.T)
				} else {
					g.p("VPSUBW %d(SP), %s, %s", 32*t, g.T, g.T)
				}
				g.pairTail(r, t)
			}
		}
	} else {
		for t, xr := range g.xr {
			g.p("VMOVDQU %s, %s", xAddr(t, 2), xr)
		}
		for r := 0; r < R; r++ {
			g.p("VPABSB %s, %s", wAddr(r, 2), g.A)
			for t := 0; t < C; t++ {
				if g.xr != nil {
					g.p("VPSIGNB %s, %s, %s", wAddr(r, 2), g.xr[t], g.T)
				} else {
					g.p("VMOVDQU %s, %s", xAddr(t, 2), g.T)
					g.p("VPSIGNB %s, %s, %s", wAddr(r, 2), g.T, g.T)
				}
				g.p("VPMADDUBSW %s, %s, %s", g.T, g.A, g.T)
				g.pairTail(r, t)
			}
		}
	}
	g.p("ADDQ $%d, SI", wb)
	if R > 4 {
		g.p("ADDQ $%d, R11", wb)
	}
	g.p("ADDQ $34, DI")
	if g.dec {
		g.p("ADDQ $4, DX")
		if R > 4 {
			g.p("ADDQ $4, BX")
		}
	} else {
		g.p("ADDQ $%d, DX", 4*R*C)
	}
	g.p("DECQ CX")
	g.p("JNZ %s", lbl)

	// hsum8 of every accumulator, in its operand order: (a4+a0, a5+a1, a6+a2, a7+a3), then
	// (r0+r2, r1+r3), then their sum; outputs to y[t·ldy + r].
	g.p("MOVQ y+48(FP), AX")
	g.p("MOVQ ldy+56(FP), BX")
	g.p("SHLQ $2, BX")
	x := func(y string) string { return "X" + y[1:] }
	for t := 0; t < C; t++ {
		for r := 0; r < R; r++ {
			a := g.acc[r*C+t]
			g.p("VEXTRACTF128 $1, %s, %s", a, x(g.T))
			g.p("VADDPS %s, %s, %s", x(a), x(g.T), x(g.T))
			g.p("VMOVHLPS %s, %s, %s", x(g.T), x(g.T), x(g.S))
			g.p("VADDPS %s, %s, %s", x(g.S), x(g.T), x(g.S))
			g.p("VMOVSHDUP %s, %s", x(g.S), x(g.A))
			g.p("VADDSS %s, %s, %s", x(g.A), x(g.S), x(g.A))
			g.p("VMOVSS %s, %d(AX)", x(g.A), 4*r)
		}
		if t+1 < C {
			g.p("ADDQ BX, AX")
		}
	}
	g.p("VZEROUPPER")
	g.p("RET")
	g.b.WriteString("\n")
}

// prod writes the scale-product kernel for R rows: for each block b and token t < C,
// p[(b·C + t)·R + r] = fp16(w_r[b].d) · xs[b·xsStride + t] (weight scale first, as
// dotq_amd64.s multiplies them). The tile kernels read these with broadcast loads; computing
// them in a separate pass keeps the tile loop free of store-to-load forwarding.
func prod(b *bytes.Buffer, R int) {
	g := &gen{R: R}
	fmt.Fprintf(b, "// func q0tProdR%d(w *byte, rowBytes int, wb int, xs *float32, xsStride int, C int, nb int, p *float32)\n", R)
	fmt.Fprintf(b, "TEXT ·q0tProdR%d(SB), NOSPLIT, $0-64\n", R)
	g.p("MOVQ w+0(FP), SI")
	g.p("MOVQ rowBytes+8(FP), R9")
	g.p("LEAQ (R9)(R9*2), R10")
	if R > 4 {
		g.p("LEAQ (SI)(R9*4), R11")
	}
	g.p("MOVQ wb+16(FP), R12")
	g.p("MOVQ xs+24(FP), DX")
	g.p("MOVQ xsStride+32(FP), R8")
	g.p("SHLQ $2, R8")
	g.p("MOVQ C+40(FP), R13")
	g.p("MOVQ nb+48(FP), CX")
	g.p("MOVQ p+56(FP), DI")
	fmt.Fprintf(&g.b, "q0tProdR%dloop:\n", R)
	for grp := 0; grp*4 < R; grp++ {
		hi := min(R, grp*4+4)
		g.p("MOVWLZX %s, AX", wAddr(hi-1, 0))
		for r := hi - 2; r >= grp*4; r-- {
			g.p("SHLQ $16, AX")
			g.p("MOVWLZX %s, BX", wAddr(r, 0))
			g.p("ORQ BX, AX")
		}
		if grp == 0 {
			g.p("VMOVQ AX, X0")
		} else {
			g.p("VPINSRQ $1, AX, X0, X0")
		}
	}
	if R > 4 {
		g.p("VCVTPH2PS X0, Y0")
	} else {
		g.p("VCVTPH2PS X0, X0")
	}
	g.p("MOVQ DX, AX")
	g.p("MOVQ R13, BX")
	fmt.Fprintf(&g.b, "q0tProdR%dtok:\n", R)
	switch {
	case R > 4:
		g.p("VBROADCASTSS (AX), Y1")
		g.p("VMULPS Y1, Y0, Y1")
		g.p("VMOVUPS Y1, (DI)")
	case R > 1:
		g.p("VBROADCASTSS (AX), X1")
		g.p("VMULPS X1, X0, X1")
		g.p("VMOVUPS X1, (DI)")
	default:
		g.p("VMOVSS (AX), X1")
		g.p("VMULSS X1, X0, X1")
		g.p("VMOVSS X1, (DI)")
	}
	g.p("ADDQ $4, AX")
	g.p("ADDQ $%d, DI", 4*R)
	g.p("DECQ BX")
	g.p("JNZ q0tProdR%dtok", R)
	g.p("ADDQ R12, SI")
	if R > 4 {
		g.p("ADDQ R12, R11")
	}
	g.p("ADDQ R8, DX")
	g.p("DECQ CX")
	g.p("JNZ q0tProdR%dloop", R)
	g.p("VZEROUPPER")
	g.p("RET")
	g.b.WriteString("\n")
	b.Write(g.b.Bytes())
}

// decRs lists the row counts of the decode (T = 1) kernels.
var decRs = []int{1, 4, 8}

// prodRow writes q0tProdRow(w, wb, xs, nb, p): p[b] = fp16(w[b].d) · xs[b] for the nb blocks
// of one weight row (blocks wb bytes apart), 8 blocks per step.
func prodRow(b *bytes.Buffer) {
	g := &gen{}
	b.WriteString("// func q0tProdRow(w *byte, wb int, xs *float32, nb int, p *float32)\n")
	b.WriteString("TEXT ·q0tProdRow(SB), NOSPLIT, $0-40\n")
	g.p("MOVQ w+0(FP), SI")
	g.p("MOVQ wb+8(FP), R9")
	g.p("MOVQ xs+16(FP), DX")
	g.p("MOVQ nb+24(FP), CX")
	g.p("MOVQ p+32(FP), DI")
	g.p("LEAQ (R9)(R9*2), R10")
	g.p("CMPQ CX, $8")
	g.p("JLT q0tProdRowTail")
	g.b.WriteString("q0tProdRow8:\n")
	g.p("LEAQ (SI)(R9*4), R11")
	g.p("VMOVD 0(SI), X0")
	g.p("VPINSRW $1, 0(SI)(R9*1), X0, X0")
	g.p("VPINSRW $2, 0(SI)(R9*2), X0, X0")
	g.p("VPINSRW $3, 0(SI)(R10*1), X0, X0")
	g.p("VPINSRW $4, 0(R11), X0, X0")
	g.p("VPINSRW $5, 0(R11)(R9*1), X0, X0")
	g.p("VPINSRW $6, 0(R11)(R9*2), X0, X0")
	g.p("VPINSRW $7, 0(R11)(R10*1), X0, X0")
	g.p("VCVTPH2PS X0, Y0")
	g.p("VMULPS 0(DX), Y0, Y0")
	g.p("VMOVUPS Y0, 0(DI)")
	g.p("LEAQ (R11)(R9*4), SI")
	g.p("ADDQ $32, DX")
	g.p("ADDQ $32, DI")
	g.p("SUBQ $8, CX")
	g.p("CMPQ CX, $8")
	g.p("JGE q0tProdRow8")
	g.b.WriteString("q0tProdRowTail:\n")
	g.p("TESTQ CX, CX")
	g.p("JZ q0tProdRowDone")
	g.b.WriteString("q0tProdRow1:\n")
	g.p("MOVWLZX 0(SI), AX")
	g.p("VMOVD AX, X0")
	g.p("VCVTPH2PS X0, X0")
	g.p("VMULSS 0(DX), X0, X0")
	g.p("VMOVSS X0, 0(DI)")
	g.p("ADDQ R9, SI")
	g.p("ADDQ $4, DX")
	g.p("ADDQ $4, DI")
	g.p("DECQ CX")
	g.p("JNZ q0tProdRow1")
	g.b.WriteString("q0tProdRowDone:\n")
	g.p("VZEROUPPER")
	g.p("RET")
	g.b.WriteString("\n")
	b.Write(g.b.Bytes())
}

func (g *gen) pairTail(r, t int) {
	g.p("VPMADDWD %s, %s, %s", g.onesOp(), g.T, g.T)
	g.p("VCVTDQ2PS %s, %s", g.T, g.T)
	if g.dec {
		base := "DX"
		if r >= 4 {
			base = "BX"
		}
		idx := []string{"", "(R13*1)", "(R13*2)", "(AX*1)"}[r%4]
		g.p("VBROADCASTSS (%s)%s, %s", base, idx, g.S)
	} else {
		g.p("VBROADCASTSS %d(DX), %s", 4*(t*g.R+r), g.S)
	}
	g.p("VFMADD231PS %s, %s, %s", g.S, g.T, g.acc[r*g.C+t])
}

const header = `// Code generated by q0tile_gen.go; DO NOT EDIT.

//go:build amd64 && !purego

#include "textflag.h"

// Register-tiled Q8_0·Q8_0 and Q4_0·Q8_0 products (see q0tile_gen.go and q0tile.go).
// Every output follows dotQ8_0Q8_0AVX2 / dotQ4_0Q8_0AVX2 operation for operation.

DATA q0tone16<>+0(SB)/2, $1
GLOBL q0tone16<>(SB), RODATA|NOPTR, $2

DATA q0teight<>+0(SB)/1, $0x08
GLOBL q0teight<>(SB), RODATA|NOPTR, $1

DATA q0tnib<>+0(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q0tnib<>+8(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q0tnib<>+16(SB)/8, $0x0f0f0f0f0f0f0f0f
DATA q0tnib<>+24(SB)/8, $0x0f0f0f0f0f0f0f0f
GLOBL q0tnib<>(SB), RODATA|NOPTR, $32

// Per-qword shift counts: low 128-bit lane unshifted (nibbles 0..15), high lane by 4.
DATA q0thishift<>+0(SB)/8, $0
DATA q0thishift<>+8(SB)/8, $0
DATA q0thishift<>+16(SB)/8, $4
DATA q0thishift<>+24(SB)/8, $4
GLOBL q0thishift<>(SB), RODATA|NOPTR, $32

`

func main() {
	sort.Slice(shapes, func(i, j int) bool {
		if shapes[i][0] != shapes[j][0] {
			return shapes[i][0] < shapes[j][0]
		}
		return shapes[i][1] < shapes[j][1]
	})
	var s bytes.Buffer
	s.WriteString(header)
	var d bytes.Buffer
	d.WriteString("// Code generated by q0tile_gen.go; DO NOT EDIT.\n\n//go:build amd64 && !purego\n\npackage kernels\n\n")
	prodRs := map[int]bool{}
	for _, sh := range shapes {
		prodRs[sh[0]] = true
	}
	var rs []int
	for r := range prodRs {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	for _, R := range rs {
		prod(&s, R)
		fmt.Fprintf(&d, "//go:noescape\nfunc q0tProdR%d(w *byte, rowBytes int, wb int, xs *float32, xsStride int, C int, nb int, p *float32)\n\n", R)
	}
	fmt.Fprintf(&d, "// q0tProd runs the generated scale-product kernel for R rows; it reports false for an R that was not generated.\n")
	fmt.Fprintf(&d, "func q0tProd(R int, w *byte, rowBytes int, wb int, xs *float32, xsStride int, C int, nb int, p *float32) bool {\n\tswitch R {\n")
	for _, R := range rs {
		fmt.Fprintf(&d, "\tcase %d:\n\t\tq0tProdR%d(w, rowBytes, wb, xs, xsStride, C, nb, p)\n", R, R)
	}
	d.WriteString("\tdefault:\n\t\treturn false\n\t}\n\treturn true\n}\n\n")
	prodRow(&s)
	d.WriteString("//go:noescape\nfunc q0tProdRow(w *byte, wb int, xs *float32, nb int, p *float32)\n\n")
	for _, q4 := range []bool{false, true} {
		for _, R := range decRs {
			g := &gen{q4: q4, R: R, C: 1, dec: true}
			g.alloc()
			g.kernel()
			s.Write(g.b.Bytes())
			fmt.Fprintf(&d, "//go:noescape\nfunc %s(w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int)\n\n", name(q4, R, 0))
		}
	}
	for _, q4 := range []bool{false, true} {
		tn := "Q8"
		if q4 {
			tn = "Q4"
		}
		fmt.Fprintf(&d, "// q0tDec%s runs the generated %s decode kernel for R rows; it reports false for an R that was not generated.\n", tn, tn)
		fmt.Fprintf(&d, "func q0tDec%s(R int, w *byte, rowBytes int, x *byte, p *float32, nb int, y *float32) bool {\n\tswitch R {\n", tn)
		for _, R := range decRs {
			fmt.Fprintf(&d, "\tcase %d:\n\t\t%s(w, rowBytes, x, 0, p, nb, y, 0)\n", R, name(q4, R, 0))
		}
		d.WriteString("\tdefault:\n\t\treturn false\n\t}\n\treturn true\n}\n\n")
	}
	for _, q4 := range []bool{false, true} {
		for _, sh := range shapes {
			g := &gen{q4: q4, R: sh[0], C: sh[1]}
			g.alloc()
			g.kernel()
			s.Write(g.b.Bytes())
			fmt.Fprintf(&d, "//go:noescape\nfunc %s(w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int)\n\n", name(q4, sh[0], sh[1]))
		}
	}
	// Dispatch by shape.
	for _, q4 := range []bool{false, true} {
		tn := "Q8"
		if q4 {
			tn = "Q4"
		}
		fmt.Fprintf(&d, "// q0tile%s runs the generated %s kernel of shape R×C; it reports false for a shape that was not generated.\n", tn, tn)
		fmt.Fprintf(&d, "func q0tile%s(R, C int, w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int) bool {\n\tswitch R<<8 | C {\n", tn)
		for _, sh := range shapes {
			fmt.Fprintf(&d, "\tcase %d<<8 | %d:\n\t\t%s(w, rowBytes, x, xRowBytes, p, nb, y, ldy)\n", sh[0], sh[1], name(q4, sh[0], sh[1]))
		}
		d.WriteString("\tdefault:\n\t\treturn false\n\t}\n\treturn true\n}\n\n")
	}
	src, err := format.Source(d.Bytes())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile("q0tile_amd64.s", s.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile("q0tile_kern_amd64.go", src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
