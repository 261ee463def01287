//go:build ignore

// q0tile_gen.go writes q0tile_amd64.s and q0tile_kern_amd64.go: the register-tiled
// Q8_0·Q8_0 and Q4_0·Q8_0 micro-kernels behind MatMulQ0, and (T ≥ 2 tiles only) those of
// Q5_0·Q8_0, IQ4_NL·Q8_0 (tinyBLAS order), Q4_1·Q8_1 and Q5_1·Q8_1 (see extBody, prodM).
// Run with
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
	q4         bool   // Q4_0 (kind "q4")
	kind       string // "q8", "q4", "q50", "iq4", "q41", "q51"
	u          string // iq4 without |x| registers: register that loads |x| from the stack
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

// kname is the kernel name of kind k (q8/q4 use name).
func kname(k string, R, C int) string {
	switch k {
	case "q8":
		return name(false, R, C)
	case "q4":
		return name(true, R, C)
	}
	return fmt.Sprintf("q0t%sR%dC%d", map[string]string{"q50": "Q50", "iq4": "I4", "q41": "Q41", "q51": "Q51"}[k], R, C)
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
	if g.kind == "" {
		g.kind = "q8"
		if g.q4 {
			g.kind = "q4"
		}
	}
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
	if g.kind == "iq4" {
		if free() >= g.C {
			for t := 0; t < g.C; t++ {
				g.cr = append(g.cr, next())
			}
		} else {
			// |x| from the stack needs a register (the unsigned operand of VPMADDUBSW).
			if g.ones != "" {
				g.u, g.ones = g.ones, ""
			} else {
				g.u = next()
			}
		}
		if g.cr == nil {
			g.frameBytes = 32 * g.C
		}
		return
	}
	if g.kind == "q41" || g.kind == "q51" {
		return
	}
	if g.q4 || g.kind == "q50" {
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
	if (g.q4 || g.kind == "q50") && g.cr == nil {
		g.frameBytes = 32 * g.C
	}
}

func (g *gen) onesOp() string {
	if g.ones != "" {
		return g.ones
	}
	return "q0tones<>(SB)"
}

func (g *gen) kernel() {
	R, C := g.R, g.C
	wb := map[string]int{"q8": 34, "q4": 18, "q50": 22, "iq4": 18, "q41": 20, "q51": 24}[g.kind]
	xb, xo := 34, 2 // activation block bytes and quant offset (Q8_0, or Q8_1)
	if g.kind == "q41" || g.kind == "q51" {
		xb, xo = 36, 4
	}
	nm := kname(g.kind, R, C)
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

	if g.kind != "q8" && g.kind != "q4" {
		g.extBody(xo)
	} else if g.q4 {
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
	g.p("ADDQ $%d, DI", xb)
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
			if g.kind == "q41" || g.kind == "q51" {
				// + summs, stored by q0tProdM right after the nb·R·C scale products.
				g.p("VADDSS %d(DX), %s, %s", 4*(t*R+r), x(g.A), x(g.A))
			}
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

// q0tPrefetch is how far ahead (bytes) q0tProdRow prefetches the weight rows.
const q0tPrefetch = 4096

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
	// This pass is the first touch of the row (the kernel that follows reads it from L1),
	// so it prefetches q0tPrefetch bytes ahead: the hardware prefetcher stops at every
	// 4 KiB page. Five lines cover the 8 blocks of one step (at most 272 bytes).
	for k := 0; k < 5; k++ {
		g.p("PREFETCHT0 %d(SI)", q0tPrefetch+64*k)
	}
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

// extBody writes one block step of the Q5_0, IQ4_NL, Q4_1 and Q5_1 kernels (activation
// quants at xo within each block). Per weight row the 32 weights are decoded once into A
// (T as scratch), then combined with every token's quants:
//
//	q50: u = nibble | h·16 in [0, 31] (unsigned); u·x − 16·x pair sums, as q4 does with 8;
//	iq4: q = codebook[nibble] (signed); |x|·(sign(x)·q), exact for every activation byte;
//	q41, q51: u = nibble (| h·16) unsigned; u·x pair sums (the offsets enter via summs).
//
// All pair sums fit int16 exactly, so the int32 lanes equal those of the one-row kernels.
func (g *gen) extBody(xo int) {
	R, C := g.R, g.C
	qs := map[string]int{"q50": 6, "iq4": 2, "q41": 4, "q51": 8}[g.kind]
	qh := map[string]int{"q50": 2, "q51": 4}[g.kind]
	// Per-token preparation: 16·x pair sums (q50) or |x| (iq4).
	for t := 0; t < C; t++ {
		switch g.kind {
		case "q50":
			dst := g.T
			if g.cr != nil {
				dst = g.cr[t]
			}
			g.p("VPBROADCASTB q0tsixteen<>(SB), %s", dst)
			g.p("VPMADDUBSW %s, %s, %s", xAddr(t, xo), dst, dst)
			if g.cr == nil {
				g.p("VMOVDQU %s, %d(SP)", dst, 32*t)
			}
		case "iq4":
			dst := g.T
			if g.cr != nil {
				dst = g.cr[t]
			}
			g.p("VPABSB %s, %s", xAddr(t, xo), dst)
			if g.cr == nil {
				g.p("VMOVDQU %s, %d(SP)", dst, 32*t)
			}
		}
	}
	for r := 0; r < R; r++ {
		g.p("VBROADCASTI128 %s, %s", wAddr(r, qs), g.A)
		g.p("VPSRLVQ q0thishift<>(SB), %s, %s", g.A, g.A)
		g.p("VPAND q0tnib<>(SB), %s, %s", g.A, g.A)
		switch g.kind {
		case "q50", "q51":
			g.p("VPBROADCASTD %s, %s", wAddr(r, qh), g.T)
			g.p("VPSHUFB q0tbshuf<>(SB), %s, %s", g.T, g.T)
			g.p("VPAND q0tbit<>(SB), %s, %s", g.T, g.T)
			g.p("VPCMPEQB q0tbit<>(SB), %s, %s", g.T, g.T)
			g.p("VPAND q0thbit<>(SB), %s, %s", g.T, g.T)
			g.p("VPOR %s, %s, %s", g.T, g.A, g.A)
		case "iq4":
			g.p("VBROADCASTI128 q0tiq4nl<>(SB), %s", g.T)
			g.p("VPSHUFB %s, %s, %s", g.A, g.T, g.A)
		}
		for t := 0; t < C; t++ {
			switch g.kind {
			case "q50":
				g.p("VPMADDUBSW %s, %s, %s", xAddr(t, xo), g.A, g.T)
				if g.cr != nil {
					g.p("VPSUBW %s, %s, %s", g.cr[t], g.T, g.T)
				} else {
					g.p("VPSUBW %d(SP), %s, %s", 32*t, g.T, g.T)
				}
			case "iq4":
				g.p("VPSIGNB %s, %s, %s", xAddr(t, xo), g.A, g.T)
				ax := g.u
				if g.cr != nil {
					ax = g.cr[t]
				} else {
					g.p("VMOVDQU %d(SP), %s", 32*t, ax)
				}
				g.p("VPMADDUBSW %s, %s, %s", g.T, ax, g.T)
			default:
				g.p("VPMADDUBSW %s, %s, %s", xAddr(t, xo), g.A, g.T)
			}
			g.pairTail(r, t)
		}
	}
}

// prodM writes q0tProdMR{R}C{C} for Q4_1/Q5_1 weights (wb bytes per block, fp16 d at 0,
// fp16 m at 2) and Q8_1 activation scales xd (d) and xsum (s), both xsStride floats per
// block: p[(b·C + t)·R + r] = d_w·d_x as q0tProd does, and after the nb·R·C products the
// R·C sums summs[t·R + r] = fma(m_w, s_x, summs) over the blocks in order, from 0 (as
// dot_q0x_amd64.s's MSCALE accumulates them; m_w·s_x is exact in float32).
func prodM(b *bytes.Buffer, R, C int) {
	g := &gen{R: R}
	nm := fmt.Sprintf("q0tProdMR%dC%d", R, C)
	fmt.Fprintf(b, "// func %s(w *byte, rowBytes int, wb int, xd *float32, xsum *float32, xsStride int, nb int, p *float32)\n", nm)
	fmt.Fprintf(b, "TEXT ·%s(SB), NOSPLIT, $0-64\n", nm)
	g.p("MOVQ w+0(FP), SI")
	g.p("MOVQ rowBytes+8(FP), R9")
	g.p("LEAQ (R9)(R9*2), R10")
	g.p("MOVQ wb+16(FP), R12")
	g.p("MOVQ xd+24(FP), DX")
	g.p("MOVQ xsum+32(FP), R14")
	g.p("MOVQ xsStride+40(FP), R8")
	g.p("SHLQ $2, R8")
	g.p("MOVQ nb+48(FP), CX")
	g.p("MOVQ p+56(FP), DI")
	for t := 0; t < C; t++ {
		g.p("VXORPS X%d, X%d, X%d", 8+t, 8+t, 8+t)
	}
	fmt.Fprintf(&g.b, "%sloop:\n", nm)
	for k, off := range []int{0, 2} {
		g.p("MOVWLZX %s, AX", wAddr(R-1, off))
		for r := R - 2; r >= 0; r-- {
			g.p("SHLQ $16, AX")
			g.p("MOVWLZX %s, BX", wAddr(r, off))
			g.p("ORQ BX, AX")
		}
		g.p("VMOVQ AX, X%d", k)
		g.p("VCVTPH2PS X%d, X%d", k, k)
	}
	for t := 0; t < C; t++ {
		if R > 1 {
			g.p("VBROADCASTSS %d(DX), X5", 4*t)
			g.p("VMULPS X5, X0, X5")
			g.p("VMOVUPS X5, %d(DI)", 4*t*R)
			g.p("VBROADCASTSS %d(R14), X6", 4*t)
		} else {
			g.p("VMOVSS %d(DX), X5", 4*t)
			g.p("VMULSS X5, X0, X5")
			g.p("VMOVSS X5, %d(DI)", 4*t*R)
			g.p("VMOVSS %d(R14), X6", 4*t)
		}
		g.p("VFMADD231PS X6, X1, X%d", 8+t)
	}
	g.p("ADDQ R12, SI")
	g.p("ADDQ R8, DX")
	g.p("ADDQ R8, R14")
	g.p("ADDQ $%d, DI", 4*R*C)
	g.p("DECQ CX")
	g.p("JNZ %sloop", nm)
	for t := 0; t < C; t++ {
		if R > 1 {
			g.p("VMOVUPS X%d, %d(DI)", 8+t, 4*t*R)
		} else {
			g.p("VMOVSS X%d, %d(DI)", 8+t, 4*t*R)
		}
	}
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

// Register-tiled Q8_0·Q8_0, Q4_0·Q8_0, Q5_0·Q8_0, IQ4_NL·Q8_0, Q4_1·Q8_1 and Q5_1·Q8_1
// products (see q0tile_gen.go and q0tile.go). Every output follows its one-row kernel
// (dotq_amd64.s, dot_q0x_amd64.s) in the float operations and their order.

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

// int16 ones (VPMADDWD's memory operand when no register holds them).
DATA q0tones<>+0(SB)/8, $0x0001000100010001
DATA q0tones<>+8(SB)/8, $0x0001000100010001
DATA q0tones<>+16(SB)/8, $0x0001000100010001
DATA q0tones<>+24(SB)/8, $0x0001000100010001
GLOBL q0tones<>(SB), RODATA|NOPTR, $32

DATA q0tsixteen<>+0(SB)/1, $0x10
GLOBL q0tsixteen<>(SB), RODATA|NOPTR, $1

// 0x10 in every byte: the fifth weight bit of Q5_0/Q5_1.
DATA q0thbit<>+0(SB)/8, $0x1010101010101010
DATA q0thbit<>+8(SB)/8, $0x1010101010101010
DATA q0thbit<>+16(SB)/8, $0x1010101010101010
DATA q0thbit<>+24(SB)/8, $0x1010101010101010
GLOBL q0thbit<>(SB), RODATA|NOPTR, $32

// VPSHUFB mask spreading the 4 bytes of a broadcast dword: byte i takes byte i/8.
DATA q0tbshuf<>+0(SB)/8, $0x0000000000000000
DATA q0tbshuf<>+8(SB)/8, $0x0101010101010101
DATA q0tbshuf<>+16(SB)/8, $0x0202020202020202
DATA q0tbshuf<>+24(SB)/8, $0x0303030303030303
GLOBL q0tbshuf<>(SB), RODATA|NOPTR, $32

// Byte i: 1 << (i mod 8).
DATA q0tbit<>+0(SB)/8, $0x8040201008040201
DATA q0tbit<>+8(SB)/8, $0x8040201008040201
DATA q0tbit<>+16(SB)/8, $0x8040201008040201
DATA q0tbit<>+24(SB)/8, $0x8040201008040201
GLOBL q0tbit<>(SB), RODATA|NOPTR, $32

// ggml's IQ4_NL codebook (kvalues_iq4nl) as 16 int8.
DATA q0tiq4nl<>+0(SB)/8, $0xf6eaddcfbfad9881
DATA q0tiq4nl<>+8(SB)/8, $0x7159453526190d01
GLOBL q0tiq4nl<>(SB), RODATA|NOPTR, $16

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
	// Q5_0, IQ4_NL, Q4_1, Q5_1 tiles (T ≥ 2 only) and the Q4_1/Q5_1 scale kernels.
	exts := []struct{ kind, fn string }{{"q50", "Q50"}, {"iq4", "IQ4"}, {"q41", "Q41"}, {"q51", "Q51"}}
	for _, e := range exts {
		for _, sh := range shapes {
			if sh[0] > 4 {
				continue
			}
			g := &gen{kind: e.kind, R: sh[0], C: sh[1]}
			g.alloc()
			g.kernel()
			s.Write(g.b.Bytes())
			fmt.Fprintf(&d, "//go:noescape\nfunc %s(w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int)\n\n", kname(e.kind, sh[0], sh[1]))
		}
		fmt.Fprintf(&d, "// q0tile%s runs the generated %s kernel of shape R×C; it reports false for a shape that was not generated.\n", e.fn, e.kind)
		fmt.Fprintf(&d, "func q0tile%s(R, C int, w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int) bool {\n\tswitch R<<8 | C {\n", e.fn)
		for _, sh := range shapes {
			if sh[0] > 4 {
				continue
			}
			fmt.Fprintf(&d, "\tcase %d<<8 | %d:\n\t\t%s(w, rowBytes, x, xRowBytes, p, nb, y, ldy)\n", sh[0], sh[1], kname(e.kind, sh[0], sh[1]))
		}
		d.WriteString("\tdefault:\n\t\treturn false\n\t}\n\treturn true\n}\n\n")
	}
	var pm []string
	for _, sh := range shapes {
		if sh[0] > 4 {
			continue
		}
		prodM(&s, sh[0], sh[1])
		nm := fmt.Sprintf("q0tProdMR%dC%d", sh[0], sh[1])
		fmt.Fprintf(&d, "//go:noescape\nfunc %s(w *byte, rowBytes int, wb int, xd *float32, xsum *float32, xsStride int, nb int, p *float32)\n\n", nm)
		pm = append(pm, fmt.Sprintf("\tcase %d<<8 | %d:\n\t\t%s(w, rowBytes, wb, xd, xsum, xsStride, nb, p)\n", sh[0], sh[1], nm))
	}
	d.WriteString("// q0tProdM runs the generated Q4_1/Q5_1 scale kernel of shape R×C; it reports false for a shape that was not generated.\n")
	d.WriteString("func q0tProdM(R, C int, w *byte, rowBytes int, wb int, xd *float32, xsum *float32, xsStride int, nb int, p *float32) bool {\n\tswitch R<<8 | C {\n")
	for _, c := range pm {
		d.WriteString(c)
	}
	d.WriteString("\tdefault:\n\t\treturn false\n\t}\n\treturn true\n}\n\n")
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
