//go:build ignore

// ktile_gen.go writes ktile_amd64.s and ktile_kern_amd64.go: the register-tiled
// Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS × Q8_K kernels behind MatMulK. Run with
//
//	go run ktile_gen.go
//
// Per weight row and super-block a prepare kernel (ktPrepQ4/Q5/Q6) writes a table: the 256
// unsigned weight values decoded as dotk_amd64.s forms them (32 bytes per 32-element group),
// the 8 VPMADDWD scale vectors (one per group), d broadcast, and for Q6_K the 16 scales
// times −32 as int16 words, for Q4_K/Q5_K the mins as dwords m·(1 + 2¹⁶) and dmin broadcast.
//
// A tile kernel then computes R weight rows × C activation rows (tokens) from the tables.
// Per super-block and output it keeps the 8 int32 lanes of dotQ{4,5,6}KQ8KAVX2 in a
// register of its own: VPMADDUBSW of the weight values with the Q8_K quants, VPMADDWD by the
// group's scale vector, VPADDD. Integer sums are exact (wrapping int32 addition is
// associative and commutative), so the lanes hold the same integers as the one-row kernel
// whatever the order; the Q6_K offset −32·(sc·bsum) starts the lanes instead of ending them.
// The float steps are the one-row kernel's per output: VCVTDQ2PS of the lanes, one FMA with
// the broadcast product d·dx into an 8-lane float accumulator (kept on the stack), and
// hsum8 at the end. The weight values and scales are loaded once per row for the C tokens,
// the activations once per token for the R rows.
//
// The Q4_K/Q5_K minimum term, a separate float accumulator in ggml, is computed for 8
// tokens at a time by ktMinsQ4 / ktMinsQ5 (lane = token) with the one-row kernel's
// operations per token; the tile kernel adds it after hsum8.
//
// Q2_K, Q3_K and IQ4_XS (ktPrepQ2/Q3/IQ4, tiles ktQ2/ktQ3/ktIQ4) follow dot_kx_amd64.s:
// Q2_K FMAs its min term −(dmin·dx)·float(mins·bsums) into the same float lanes just before
// the block's main FMA; Q3_K's signed values (−4..3) meet the activations biased by 128
// (x ⊕ 0x80, unsigned for VPMADDUBSW) and its lanes start at −128·Σ sc·q, which cancels the
// bias exactly; IQ4_XS multiplies |v| by sign(x, v) with VPSIGNB as ggml does (so x = −128
// wraps the same way).
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
)

type kind int

const (
	q4k kind = iota
	q5k
	q6k
)

func (k kind) String() string { return [...]string{"Q4", "Q5", "Q6"}[k] }

// wb returns the weight block bytes of kind k.
func (k kind) wb() int { return [...]int{144, 176, 210}[k] }

// Table layout per row and super-block (see the prepare kernels).
const (
	tabDec   = 0   // decoded weight values, group g at 32g
	tabScale = 256 // VPMADDWD scale vector of group g at 256 + 32g
	tabD     = 512 // d broadcast
	tabQ6Off = 544 // Q6_K: the 16 scales times −32 as int16
	tabMins  = 544 // Q4_K/Q5_K: mins m_j·(1 + 2¹⁶) as 8 dwords
	tabDmin  = 576 // Q4_K/Q5_K: dmin broadcast
	tabQ6    = 576 // table bytes, Q6_K
	tabQ45   = 608 // table bytes, Q4_K/Q5_K
)

// maxAcc is the number of YMM accumulators a tile may use (R·C ≤ maxAcc): the others hold
// the weight values, the scale vector and a product temporary.
const maxAcc = 12

// tileRs lists the row counts generated; each gets C = 1..maxC(R). MatMulK uses 3-row tiles;
// 1 and 2 rows only at the end of a row range, where wider tiles would gain little.
var tileRs = []int{1, 2, 3}

func maxC(R int) int { return min(maxAcc/R, 4) }

type gen struct {
	b    bytes.Buffer
	tk   string // tile kind: Q45, Q6, Q2, Q3 or IQ4
	R, C int
}

// tileKinds lists the tile kernel families: Q45 (Q4_K/Q5_K: zero start, min term from mb),
// Q6 (offset start), Q2 (Q2_K: min FMA before the main FMA), Q3 (Q3_K: signed weights, the
// activations biased by 128, lanes start at −128·Σsc·q) and IQ4 (IQ4_XS: |v|·sign(x, v)).
var tileKinds = []string{"Q45", "Q6", "Q2", "Q3", "IQ4"}

// Table layouts of the Q2_K, Q3_K and IQ4_XS tables (written by ktPrepQ2/Q3/IQ4; values
// at 0, scale vectors at 256, d at 512 as for the others).
const (
	tabQ2Mins = 544 // Q2_K: the 16 mins as int16 words
	tabQ2Dmin = 576 // Q2_K: dmin broadcast
	tabQ2     = 608
	tabQ3Corr = 544 // Q3_K: −128·Σ sc·q per lane (8 dwords)
	tabQ3     = 576
	tabIQ4Val = 544 // IQ4_XS: signed values of group g at 544 + 32g (|v| at 32g)
	tabIQ4    = 800
)

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.b, "\t"+format+"\n", args...) }

func name(tk string, R, C int) string { return fmt.Sprintf("kt%sR%dC%d", tk, R, C) }

// xBase are the base registers of tokens 0-2, 3-5, 6-8, 9-11 (R12 = xRowBytes apart).
var xBase = []string{"DI", "R8", "R10", "R11"}

func xAddr(t, off int) string {
	b := xBase[t/3]
	switch t % 3 {
	case 0:
		return fmt.Sprintf("%d(%s)", off, b)
	case 1:
		return fmt.Sprintf("%d(%s)(R12*1)", off, b)
	}
	return fmt.Sprintf("%d(%s)(R12*2)", off, b)
}

func (g *gen) tb() int {
	switch g.tk {
	case "Q6":
		return tabQ6
	case "Q2":
		return tabQ2
	case "Q3":
		return tabQ3
	case "IQ4":
		return tabIQ4
	}
	return tabQ45
}

// tab returns the address of byte off of row r's table of the current super-block (SI).
func (g *gen) tab(r, off int) string { return fmt.Sprintf("%d(SI)", r*g.tb()+off) }

// facc is the stack slot of output (r, t)'s float accumulator.
func (g *gen) facc(r, t int) string { return fmt.Sprintf("%d(SP)", 32*(r*g.C+t)) }

func (g *gen) kernel() {
	R, C := g.R, g.C
	nm := name(g.tk, R, C)
	acc := func(r, t int) string { return fmt.Sprintf("Y%d", r*C+t) }
	n := R * C
	W, Q, T := fmt.Sprintf("Y%d", n), fmt.Sprintf("Y%d", n+1), fmt.Sprintf("Y%d", n+2)
	fmt.Fprintf(&g.b, "// func %s(tab *byte, x *byte, xRowBytes int, nb int, y *float32, ldy int, mb *float32, mbStride int)\n", nm)
	fmt.Fprintf(&g.b, "TEXT ·%s(SB), NOSPLIT, $%d-64\n", nm, 32*R*C)
	g.p("MOVQ tab+0(FP), SI")
	g.p("MOVQ x+8(FP), DI")
	g.p("MOVQ xRowBytes+16(FP), R12")
	g.p("MOVQ nb+24(FP), CX")
	if C > 3 {
		g.p("LEAQ (R12)(R12*2), AX")
		for i := 1; i*3 < C; i++ {
			g.p("LEAQ (%s)(AX*1), %s", xBase[i-1], xBase[i])
		}
	}
	g.p("VXORPS Y0, Y0, Y0")
	for r := 0; r < R; r++ {
		for t := 0; t < C; t++ {
			g.p("VMOVUPS Y0, %s", g.facc(r, t))
		}
	}
	lbl := nm + "loop"
	fmt.Fprintf(&g.b, "%s:\n", lbl)
	// Lanes start at −32·(sc·bsum) (Q6_K), −128·Σ sc·q (Q3_K) or zero.
	for r := 0; r < R; r++ {
		switch g.tk {
		case "Q6":
			g.p("VMOVDQU %s, %s", g.tab(r, tabQ6Off), W)
			for t := 0; t < C; t++ {
				g.p("VPMADDWD %s, %s, %s", xAddr(t, 260), W, acc(r, t))
			}
		case "Q3":
			for t := 0; t < C; t++ {
				g.p("VMOVDQU %s, %s", g.tab(r, tabQ3Corr), acc(r, t))
			}
		default:
			for t := 0; t < C; t++ {
				g.p("VPXOR %s, %s, %s", acc(r, t), acc(r, t), acc(r, t))
			}
		}
	}
	switch g.tk {
	case "Q3":
		// (x ⊕ 0x80) = x + 128 unsigned times the signed weights; T holds 0x80 bytes.
		g.p("VPBROADCASTB kt80<>(SB), %s", T)
		for gi := 0; gi < 8; gi++ {
			for t := 0; t < C; t++ {
				g.p("VPXOR %s, %s, %s", xAddr(t, 4+32*gi), T, W)
				for r := 0; r < R; r++ {
					g.p("VPMADDUBSW %s, %s, %s", g.tab(r, tabDec+32*gi), W, Q)
					g.p("VPMADDWD %s, %s, %s", g.tab(r, tabScale+32*gi), Q, Q)
					g.p("VPADDD %s, %s, %s", Q, acc(r, t), acc(r, t))
				}
			}
		}
	case "IQ4":
		// |v| (W) times sign(x, v), v in Q.
		for gi := 0; gi < 8; gi++ {
			for r := 0; r < R; r++ {
				g.p("VMOVDQU %s, %s", g.tab(r, tabDec+32*gi), W)
				g.p("VMOVDQU %s, %s", g.tab(r, tabIQ4Val+32*gi), Q)
				for t := 0; t < C; t++ {
					g.p("VMOVDQU %s, %s", xAddr(t, 4+32*gi), T)
					g.p("VPSIGNB %s, %s, %s", Q, T, T)
					g.p("VPMADDUBSW %s, %s, %s", T, W, T)
					g.p("VPMADDWD %s, %s, %s", g.tab(r, tabScale+32*gi), T, T)
					g.p("VPADDD %s, %s, %s", T, acc(r, t), acc(r, t))
				}
			}
		}
	default:
		for gi := 0; gi < 8; gi++ {
			for r := 0; r < R; r++ {
				g.p("VMOVDQU %s, %s", g.tab(r, tabDec+32*gi), W)
				g.p("VMOVDQU %s, %s", g.tab(r, tabScale+32*gi), Q)
				for t := 0; t < C; t++ {
					g.p("VPMADDUBSW %s, %s, %s", xAddr(t, 4+32*gi), W, T)
					g.p("VPMADDWD %s, %s, %s", Q, T, T)
					g.p("VPADDD %s, %s, %s", T, acc(r, t), acc(r, t))
				}
			}
		}
	}
	// facc = (d·dx)·float(lanes) + facc, one rounding, as VFMADD231PS in dotk_amd64.s. Q2_K
	// first adds its min term: facc = −(dmin·dx)·float(mins·bsums) + facc.
	for r := 0; r < R; r++ {
		for t := 0; t < C; t++ {
			a := acc(r, t)
			if g.tk == "Q2" {
				g.p("VMOVDQU %s, %s", xAddr(t, 260), Q)
				g.p("VPMADDWD %s, %s, %s", g.tab(r, tabQ2Mins), Q, Q)
				g.p("VCVTDQ2PS %s, %s", Q, Q)
				g.p("VBROADCASTSS %s, %s", xAddr(t, 0), T)
				g.p("VMULPS %s, %s, %s", g.tab(r, tabQ2Dmin), T, W)
				g.p("VFNMADD213PS %s, %s, %s", g.facc(r, t), W, Q)
				g.p("VCVTDQ2PS %s, %s", a, a)
				g.p("VMULPS %s, %s, %s", g.tab(r, tabD), T, T)
				g.p("VFMADD213PS %s, %s, %s", Q, T, a)
				g.p("VMOVUPS %s, %s", a, g.facc(r, t))
				continue
			}
			g.p("VCVTDQ2PS %s, %s", a, a)
			g.p("VBROADCASTSS %s, %s", xAddr(t, 0), T)
			g.p("VMULPS %s, %s, %s", g.tab(r, tabD), T, T)
			g.p("VFMADD213PS %s, %s, %s", g.facc(r, t), T, a)
			g.p("VMOVUPS %s, %s", a, g.facc(r, t))
		}
	}
	g.p("ADDQ $%d, SI", R*g.tb())
	for i := 0; i*3 < C; i++ {
		g.p("ADDQ $292, %s", xBase[i])
	}
	g.p("DECQ CX")
	g.p("JNZ %s", lbl)

	// hsum8 of every accumulator in its order ((a4+a0, a5+a1, a6+a2, a7+a3), then
	// (r0+r2, r1+r3), then their sum), plus the min term for Q4_K/Q5_K; y[t·ldy + r].
	q45 := g.tk == "Q45"
	g.p("MOVQ y+32(FP), AX")
	g.p("MOVQ ldy+40(FP), DX")
	g.p("SHLQ $2, DX")
	if q45 {
		g.p("MOVQ mb+48(FP), BX")
		g.p("MOVQ mbStride+56(FP), R9")
		g.p("SHLQ $2, R9")
		if R > 3 {
			g.p("LEAQ (R9)(R9*2), R13")
		}
	}
	mbAddr := []string{"(BX)", "(BX)(R9*1)", "(BX)(R9*2)", "(BX)(R13*1)"}
	for t := 0; t < C; t++ {
		for r := 0; r < R; r++ {
			g.p("VMOVUPS %s, Y0", g.facc(r, t))
			g.p("VEXTRACTF128 $1, Y0, X1")
			g.p("VADDPS X0, X1, X1")
			g.p("VMOVHLPS X1, X1, X2")
			g.p("VADDPS X2, X1, X2")
			g.p("VMOVSHDUP X2, X0")
			g.p("VADDSS X0, X2, X0")
			if q45 {
				g.p("VADDSS %d%s, X0, X0", 4*t, mbAddr[r])
			}
			g.p("VMOVSS X0, %d(AX)", 4*r)
		}
		if t+1 < C {
			g.p("ADDQ DX, AX")
		}
	}
	g.p("VZEROUPPER")
	g.p("RET")
	g.b.WriteString("\n")
}

// decode writes the 32 unsigned weight values of group gi (elements 32gi..32gi+31) of the
// super-block at SI to W, as dotk_amd64.s forms them (Y15 = 0x0f bytes; Q is a temporary).
func decode(g *gen, k kind, gi int, W, Q string) {
	switch k {
	case q4k, q5k:
		c, h := gi/2, gi%2
		qs := 16 + 32*c
		if k == q5k {
			qs = 48 + 32*c
		}
		if h == 0 {
			g.p("VPAND %d(SI), Y15, %s", qs, W)
		} else {
			g.p("VMOVDQU %d(SI), %s", qs, W)
			g.p("VPSRLW $4, %s, %s", W, W)
			g.p("VPAND Y15, %s, %s", W, W)
		}
		if k == q5k {
			// Bit gi of each qh byte to bit 4.
			g.p("VMOVDQU 16(SI), %s", Q)
			if s := 4 - gi; s > 0 {
				g.p("VPSLLW $%d, %s, %s", s, Q, Q)
			} else if s < 0 {
				g.p("VPSRLW $%d, %s, %s", -s, Q, Q)
			}
			g.p("VPAND ktbit4<>(SB), %s, %s", Q, Q)
			g.p("VPOR %s, %s, %s", Q, W, W)
		}
	case q6k:
		n, m := gi/4, gi%4
		ql := 64*n + 32*(m&1)
		qh := 128 + 32*n
		if m < 2 {
			g.p("VPAND %d(SI), Y15, %s", ql, W)
		} else {
			g.p("VMOVDQU %d(SI), %s", ql, W)
			g.p("VPSRLW $4, %s, %s", W, W)
			g.p("VPAND Y15, %s, %s", W, W)
		}
		// Bits 2m, 2m+1 of each qh byte to bits 4, 5.
		g.p("VMOVDQU %d(SI), %s", qh, Q)
		switch m {
		case 0:
			g.p("VPSLLW $4, %s, %s", Q, Q)
		case 1:
			g.p("VPSLLW $2, %s, %s", Q, Q)
		case 3:
			g.p("VPSRLW $2, %s, %s", Q, Q)
		}
		g.p("VPAND kthi2<>(SB), %s, %s", Q, Q)
		g.p("VPOR %s, %s, %s", Q, W, W)
	}
}

// prep writes the prepare kernel of kind k:
// func ktPrep{Q4,Q5,Q6}(w *byte, nb int, tab *byte, stride int): the tables of nb
// super-blocks (k.wb() bytes apart from w), stride bytes apart from tab.
func prep(b *bytes.Buffer, k kind) {
	g := &gen{}
	nm := "ktPrep" + k.String()
	fmt.Fprintf(&g.b, "// func %s(w *byte, nb int, tab *byte, stride int)\n", nm)
	fmt.Fprintf(&g.b, "TEXT ·%s(SB), NOSPLIT, $0-32\n", nm)
	g.p("MOVQ w+0(FP), SI")
	g.p("MOVQ nb+8(FP), CX")
	g.p("MOVQ tab+16(FP), DI")
	g.p("MOVQ stride+24(FP), R9")
	g.p("VPBROADCASTB ktnib<>(SB), Y15")
	fmt.Fprintf(&g.b, "%sloop:\n", nm)
	for gi := 0; gi < 8; gi++ {
		W, Q := fmt.Sprintf("Y%d", 2*(gi%4)), fmt.Sprintf("Y%d", 2*(gi%4)+1)
		decode(g, k, gi, W, Q)
		g.p("VMOVDQU %s, %d(DI)", W, tabDec+32*gi)
	}
	if k == q6k {
		// Scale vectors: low lane int16 scale 2g, high lane scale 2g+1.
		g.p("VMOVDQU 192(SI), X0")
		g.p("VPMOVSXBW X0, Y0")
		for h, perm := range []string{"0x44", "0xee"} {
			g.p("VPERMQ $%s, Y0, Y1", perm)
			for j := 0; j < 4; j++ {
				g.p("VPSHUFB ktq6scale<>+%d(SB), Y1, Y2", 32*j)
				g.p("VMOVDQU Y2, %d(DI)", tabScale+32*(4*h+j))
			}
		}
		g.p("VPMULLW ktm32<>(SB), Y0, Y0")
		g.p("VMOVDQU Y0, %d(DI)", tabQ6Off)
		g.p("MOVWLZX 208(SI), AX")
		g.p("VMOVD AX, X3")
		g.p("VCVTPH2PS X3, X3")
		g.p("VBROADCASTSS X3, Y3")
		g.p("VMOVUPS Y3, %d(DI)", tabD)
	} else {
		g.p("MOVL 4(SI), AX")
		g.p("MOVL 8(SI), BX")
		g.p("MOVL 12(SI), DX")
		g.b.WriteString("\t// scales: s[j]&63 (j < 4), s[j+8]&15 | (s[j]>>6)<<4\n")
		for _, ins := range []string{
			"MOVL AX, R8", "ANDL $0x3f3f3f3f, R8",
			"MOVL DX, R11", "ANDL $0x0f0f0f0f, R11",
			"MOVL AX, R12", "SHRL $2, R12", "ANDL $0x30303030, R12", "ORL R12, R11",
			"SHLQ $32, R11", "ORQ R8, R11",
			"VMOVQ R11, X0", "VPMOVZXBW X0, X0", "VINSERTI128 $1, X0, Y0, Y0",
		} {
			g.p("%s", ins)
		}
		for j := 0; j < 8; j++ {
			g.p("VPSHUFB ktkscale<>+%d(SB), Y0, Y1", 32*j)
			g.p("VMOVDQU Y1, %d(DI)", tabScale+32*j)
		}
		g.b.WriteString("\t// mins: s[j+4]&63 (j < 4), s[j+8]>>4 | (s[j+4]>>6)<<4\n")
		for _, ins := range []string{
			"MOVL BX, R8", "ANDL $0x3f3f3f3f, R8",
			"MOVL DX, R11", "SHRL $4, R11", "ANDL $0x0f0f0f0f, R11",
			"MOVL BX, R12", "SHRL $2, R12", "ANDL $0x30303030, R12", "ORL R12, R11",
			"SHLQ $32, R11", "ORQ R8, R11",
			"VMOVQ R11, X1", "VPUNPCKLBW X1, X1, X1", "VPMOVZXBW X1, Y1",
		} {
			g.p("%s", ins)
		}
		g.p("VMOVDQU Y1, %d(DI)", tabMins)
		g.b.WriteString("\t// d, dmin\n")
		g.p("VMOVD 0(SI), X2")
		g.p("VCVTPH2PS X2, X2")
		g.p("VBROADCASTSS X2, Y3")
		g.p("VMOVUPS Y3, %d(DI)", tabD)
		g.p("VMOVSHDUP X2, X2")
		g.p("VBROADCASTSS X2, Y3")
		g.p("VMOVUPS Y3, %d(DI)", tabDmin)
	}
	g.p("ADDQ $%d, SI", k.wb())
	g.p("ADDQ R9, DI")
	g.p("DECQ CX")
	g.p("JNZ %sloop", nm)
	g.p("VZEROUPPER")
	g.p("RET")
	g.b.WriteString("\n")
	b.Write(g.b.Bytes())
}

// scaleVecs writes the 8 VPMADDWD scale vectors of a super-block from the 16 int16 scales in
// Y0 (low lane of vector g: scale 2g, high lane: scale 2g+1) to 256 + 32g(DI).
func scaleVecs(g *gen) {
	for h, perm := range []string{"0x44", "0xee"} {
		g.p("VPERMQ $%s, Y0, Y8", perm)
		for j := 0; j < 4; j++ {
			g.p("VPSHUFB ktq6scale<>+%d(SB), Y8, Y9", 32*j)
			g.p("VMOVDQU Y9, %d(DI)", tabScale+32*(4*h+j))
		}
	}
}

// halfAt writes fp16 at off(SI), widened and broadcast, to dst(DI).
func halfAt(g *gen, off, dst int) {
	g.p("MOVWLZX %d(SI), AX", off)
	g.p("VMOVD AX, X3")
	g.p("VCVTPH2PS X3, X3")
	g.p("VBROADCASTSS X3, Y3")
	g.p("VMOVUPS Y3, %d(DI)", dst)
}

// prepKX writes the prepare kernel ktPrep{Q2,Q3,IQ4}(w *byte, nb int, tab *byte, stride int)
// of the Q2_K, Q3_K or IQ4_XS tables (layouts: see the tab* constants; ktPrepKXGo in
// ktile_ref_test.go is its Go model).
func prepKX(b *bytes.Buffer, tk string) {
	g := &gen{}
	nm := "ktPrep" + tk
	wb := map[string]int{"Q2": 84, "Q3": 110, "IQ4": 136}[tk]
	fmt.Fprintf(&g.b, "// func %s(w *byte, nb int, tab *byte, stride int)\n", nm)
	fmt.Fprintf(&g.b, "TEXT ·%s(SB), NOSPLIT, $0-32\n", nm)
	g.p("MOVQ w+0(FP), SI")
	g.p("MOVQ nb+8(FP), CX")
	g.p("MOVQ tab+16(FP), DI")
	g.p("MOVQ stride+24(FP), R9")
	g.p("VPBROADCASTB ktnib<>(SB), Y15")
	switch tk {
	case "Q2":
		g.p("VMOVDQU ktb03<>(SB), Y14")
	case "Q3":
		g.p("VMOVDQU ktb03<>(SB), Y15")
		g.p("VMOVDQU ktb04<>(SB), Y14")
		g.p("VPBROADCASTB kt80<>(SB), Y13")
	case "IQ4":
		g.p("VBROADCASTI128 ktiq4<>(SB), Y14")
	}
	fmt.Fprintf(&g.b, "%sloop:\n", nm)
	switch tk {
	case "Q2":
		for gi := 0; gi < 8; gi++ {
			j, p := gi/4, gi%4
			g.p("VMOVDQU %d(SI), Y2", 16+32*j)
			if p > 0 {
				g.p("VPSRLW $%d, Y2, Y2", 2*p)
			}
			g.p("VPAND Y14, Y2, Y2")
			g.p("VMOVDQU Y2, %d(DI)", tabDec+32*gi)
		}
		g.p("VMOVDQU 0(SI), X1")
		g.p("VPAND X15, X1, X0")
		g.p("VPMOVZXBW X0, Y0")
		scaleVecs(g)
		g.p("VPSRLW $4, X1, X1")
		g.p("VPAND X15, X1, X1")
		g.p("VPMOVZXBW X1, Y1")
		g.p("VMOVDQU Y1, %d(DI)", tabQ2Mins)
		g.p("VMOVD 80(SI), X2")
		g.p("VCVTPH2PS X2, X2")
		g.p("VBROADCASTSS X2, Y3")
		g.p("VMOVUPS Y3, %d(DI)", tabD)
		g.p("VMOVSHDUP X2, X2")
		g.p("VBROADCASTSS X2, Y3")
		g.p("VMOVUPS Y3, %d(DI)", tabQ2Dmin)
	case "Q3":
		g.b.WriteString("\t// scales: low nibbles of s[0..7], then high nibbles; bits from s[8..11]\n")
		for _, ins := range []string{
			"MOVQ 96(SI), AX", "MOVL 104(SI), BX", "MOVQ $0x0f0f0f0f0f0f0f0f, R13",
			"MOVQ AX, R8", "ANDQ R13, R8", "MOVQ AX, R10", "SHRQ $4, R10", "ANDQ R13, R10",
			"MOVL BX, R11", "ANDL $0x03030303, R11",
			"MOVL BX, R12", "SHRL $2, R12", "ANDL $0x03030303, R12",
			"SHLQ $32, R12", "ORQ R12, R11", "SHLQ $4, R11", "ORQ R11, R8",
			"MOVL BX, R11", "SHRL $4, R11", "ANDL $0x03030303, R11",
			"MOVL BX, R12", "SHRL $6, R12", "ANDL $0x03030303, R12",
			"SHLQ $32, R12", "ORQ R12, R11", "SHLQ $4, R11", "ORQ R11, R10",
			"VMOVQ R8, X0", "VPINSRQ $1, R10, X0, X0", "VPSUBB ktb20<>(SB), X0, X0", "VPMOVSXBW X0, Y0",
		} {
			g.p("%s", ins)
		}
		scaleVecs(g)
		g.p("VPXOR Y12, Y12, Y12")
		for gi := 0; gi < 8; gi++ {
			j, p := gi/4, gi%4
			g.p("VMOVDQU %d(SI), Y2", 32+32*j)
			if p > 0 {
				g.p("VPSRLW $%d, Y2, Y2", 2*p)
			}
			g.p("VPAND Y15, Y2, Y2")
			g.p("VMOVDQU 0(SI), Y3")
			if s := 2 - (4*j + p); s > 0 {
				g.p("VPSLLW $%d, Y3, Y3", s)
			} else if s < 0 {
				g.p("VPSRLW $%d, Y3, Y3", -s)
			}
			g.p("VPAND Y14, Y3, Y3")
			g.p("VPOR Y3, Y2, Y2")
			g.p("VPSUBB Y14, Y2, Y2")
			g.p("VMOVDQU Y2, %d(DI)", tabDec+32*gi)
			g.p("VPMADDUBSW Y2, Y13, Y3")
			g.p("VPMADDWD %d(DI), Y3, Y3", tabScale+32*gi)
			g.p("VPADDD Y3, Y12, Y12")
		}
		g.p("VPXOR Y11, Y11, Y11")
		g.p("VPSUBD Y12, Y11, Y11")
		g.p("VMOVDQU Y11, %d(DI)", tabQ3Corr)
		halfAt(g, 108, tabD)
	case "IQ4":
		for ib := 0; ib < 8; ib++ {
			g.p("VMOVDQU %d(SI), X0", 8+16*ib)
			g.p("VPSRLW $4, X0, X1")
			g.p("VPAND X15, X0, X0")
			g.p("VPAND X15, X1, X1")
			g.p("VINSERTI128 $1, X1, Y0, Y0")
			g.p("VPSHUFB Y0, Y14, Y0")
			g.p("VPABSB Y0, Y1")
			g.p("VMOVDQU Y1, %d(DI)", tabDec+32*ib)
			g.p("VMOVDQU Y0, %d(DI)", tabIQ4Val+32*ib)
		}
		g.b.WriteString("\t// scales: nibble ib of scales_l | bits 2ib, 2ib+1 of scales_h << 4, spread to bytes\n")
		for _, ins := range []string{
			"MOVL 4(SI), AX", "MOVWLZX 2(SI), BX",
			"MOVQ AX, R8", "SHLQ $16, R8", "ORQ AX, R8", "MOVQ $0x0000ffff0000ffff, R13", "ANDQ R13, R8",
			"MOVQ R8, R10", "SHLQ $8, R10", "ORQ R10, R8", "MOVQ $0x00ff00ff00ff00ff, R13", "ANDQ R13, R8",
			"MOVQ R8, R10", "SHLQ $4, R10", "ORQ R10, R8", "MOVQ $0x0f0f0f0f0f0f0f0f, R13", "ANDQ R13, R8",
			"MOVQ BX, R11", "SHLQ $24, R11", "ORQ BX, R11", "MOVQ $0x000000ff000000ff, R13", "ANDQ R13, R11",
			"MOVQ R11, R10", "SHLQ $12, R10", "ORQ R10, R11", "MOVQ $0x000f000f000f000f, R13", "ANDQ R13, R11",
			"MOVQ R11, R10", "SHLQ $6, R10", "ORQ R10, R11", "MOVQ $0x0303030303030303, R13", "ANDQ R13, R11",
			"SHLQ $4, R11", "ORQ R11, R8",
			"VMOVQ R8, X0", "VPSUBB ktb20<>(SB), X0, X0", "VPMOVSXBW X0, X0", "VINSERTI128 $1, X0, Y0, Y0",
		} {
			g.p("%s", ins)
		}
		for j := 0; j < 8; j++ {
			g.p("VPSHUFB ktkscale<>+%d(SB), Y0, Y1", 32*j)
			g.p("VMOVDQU Y1, %d(DI)", tabScale+32*j)
		}
		halfAt(g, 0, tabD)
	}
	g.p("ADDQ $%d, SI", wb)
	g.p("ADDQ R9, DI")
	g.p("DECQ CX")
	g.p("JNZ %sloop", nm)
	g.p("VZEROUPPER")
	g.p("RET")
	g.b.WriteString("\n")
	b.Write(g.b.Bytes())
}

const minsKernels = `// The Q4_K/Q5_K minimum term of one weight row for 8·ntg tokens, lane = token. xt holds,
// per super-block b and token group g (288 bytes each, groups consecutive, then the next
// super-block): 8 vectors of bsum pairs j (int16 bsum_2j, bsum_2j+1 of the 8 tokens as
// dwords), then the 8 tokens' dx. tab is the row's prepare table (stride bytes per
// super-block). out must be zero on entry.

// func ktMinsQ5(tab *byte, stride int, nb int, xt *byte, ntg int, out *float32)
//
// out[token] = summs of dotQ5KQ8KAVX2: per super-block
// summs = −(dmin·dx)·float(Σ_j m_j·(bsum_2j + bsum_2j+1)) + summs (one rounding).
TEXT ·ktMinsQ5(SB), NOSPLIT, $0-48
	MOVQ tab+0(FP), SI
	MOVQ stride+8(FP), R9
	MOVQ nb+16(FP), CX
	MOVQ xt+24(FP), DX
ktMinsQ5sb:
	VPBROADCASTD 544(SI), Y0
	VPBROADCASTD 548(SI), Y1
	VPBROADCASTD 552(SI), Y2
	VPBROADCASTD 556(SI), Y3
	VPBROADCASTD 560(SI), Y4
	VPBROADCASTD 564(SI), Y5
	VPBROADCASTD 568(SI), Y6
	VPBROADCASTD 572(SI), Y7
	VMOVUPS      576(SI), Y8
	MOVQ out+40(FP), DI
	MOVQ ntg+32(FP), BX
ktMinsQ5tok:
	VPMADDWD    0(DX), Y0, Y9
	VPMADDWD    32(DX), Y1, Y10
	VPMADDWD    64(DX), Y2, Y11
	VPMADDWD    96(DX), Y3, Y12
	VPADDD      Y10, Y9, Y9
	VPADDD      Y12, Y11, Y11
	VPMADDWD    128(DX), Y4, Y10
	VPMADDWD    160(DX), Y5, Y12
	VPADDD      Y10, Y9, Y9
	VPADDD      Y12, Y11, Y11
	VPMADDWD    192(DX), Y6, Y10
	VPMADDWD    224(DX), Y7, Y12
	VPADDD      Y10, Y9, Y9
	VPADDD      Y12, Y11, Y11
	VPADDD      Y11, Y9, Y9
	VCVTDQ2PS   Y9, Y9
	VMULPS      256(DX), Y8, Y10
	VMOVUPS     (DI), Y11
	VFNMADD231PS Y10, Y9, Y11
	VMOVUPS     Y11, (DI)
	ADDQ $288, DX
	ADDQ $32, DI
	DECQ BX
	JNZ  ktMinsQ5tok
	ADDQ R9, SI
	DECQ CX
	JNZ  ktMinsQ5sb
	VZEROUPPER
	RET

// func ktMinsQ4(tab *byte, stride int, nb int, xt *byte, ntg int, out *float32, tp int)
//
// The 4 lanes of dotQ4KQ8KAVX2's min accumulator, lane k of token t at out[k·tp + t]: per
// super-block lane k = −(dmin·dx)·float(m_2k·s_2k + m_2k+1·s_2k+1) + lane k. At the end
// out[t] = (lane0 + lane2) + (lane1 + lane3), as the one-row kernel reduces them.
TEXT ·ktMinsQ4(SB), NOSPLIT, $0-56
	MOVQ tab+0(FP), SI
	MOVQ stride+8(FP), R9
	MOVQ nb+16(FP), CX
	MOVQ xt+24(FP), DX
	MOVQ tp+48(FP), R8
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R10
ktMinsQ4sb:
	VPBROADCASTD 544(SI), Y0
	VPBROADCASTD 548(SI), Y1
	VPBROADCASTD 552(SI), Y2
	VPBROADCASTD 556(SI), Y3
	VPBROADCASTD 560(SI), Y4
	VPBROADCASTD 564(SI), Y5
	VPBROADCASTD 568(SI), Y6
	VPBROADCASTD 572(SI), Y7
	VMOVUPS      576(SI), Y8
	MOVQ out+40(FP), DI
	MOVQ ntg+32(FP), BX
ktMinsQ4tok:
	VMULPS      256(DX), Y8, Y13
	VPMADDWD    0(DX), Y0, Y9
	VPMADDWD    32(DX), Y1, Y10
	VPADDD      Y10, Y9, Y9
	VCVTDQ2PS   Y9, Y9
	VMOVUPS     (DI), Y11
	VFNMADD231PS Y13, Y9, Y11
	VMOVUPS     Y11, (DI)
	VPMADDWD    64(DX), Y2, Y9
	VPMADDWD    96(DX), Y3, Y10
	VPADDD      Y10, Y9, Y9
	VCVTDQ2PS   Y9, Y9
	VMOVUPS     (DI)(R8*1), Y11
	VFNMADD231PS Y13, Y9, Y11
	VMOVUPS     Y11, (DI)(R8*1)
	VPMADDWD    128(DX), Y4, Y9
	VPMADDWD    160(DX), Y5, Y10
	VPADDD      Y10, Y9, Y9
	VCVTDQ2PS   Y9, Y9
	VMOVUPS     (DI)(R8*2), Y11
	VFNMADD231PS Y13, Y9, Y11
	VMOVUPS     Y11, (DI)(R8*2)
	VPMADDWD    192(DX), Y6, Y9
	VPMADDWD    224(DX), Y7, Y10
	VPADDD      Y10, Y9, Y9
	VCVTDQ2PS   Y9, Y9
	VMOVUPS     (DI)(R10*1), Y11
	VFNMADD231PS Y13, Y9, Y11
	VMOVUPS     Y11, (DI)(R10*1)
	ADDQ $288, DX
	ADDQ $32, DI
	DECQ BX
	JNZ  ktMinsQ4tok
	ADDQ R9, SI
	DECQ CX
	JNZ  ktMinsQ4sb
	MOVQ out+40(FP), DI
	MOVQ ntg+32(FP), BX
ktMinsQ4fin:
	VMOVUPS (DI), Y0
	VADDPS  (DI)(R8*2), Y0, Y0
	VMOVUPS (DI)(R8*1), Y1
	VADDPS  (DI)(R10*1), Y1, Y1
	VADDPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	DECQ BX
	JNZ  ktMinsQ4fin
	VZEROUPPER
	RET

`

func header() string {
	var b bytes.Buffer
	b.WriteString(`// Code generated by ktile_gen.go; DO NOT EDIT.

//go:build amd64 && !purego

#include "textflag.h"

// Register-tiled K-quant and IQ4_XS × Q8_K products (see ktile_gen.go and ktile.go). Every
// output follows dotQ4KQ8KAVX2 / dotQ5KQ8KAVX2 / dotQ6KQ8KAVX2 operation for operation in its
// float steps; the integer lanes hold the same (exact) sums.

DATA ktnib<>+0(SB)/1, $0x0f
GLOBL ktnib<>(SB), RODATA|NOPTR, $1

DATA kt80<>+0(SB)/1, $0x80
GLOBL kt80<>(SB), RODATA|NOPTR, $1

`)
	const32 := func(name string, v uint64) {
		for i := 0; i < 4; i++ {
			fmt.Fprintf(&b, "DATA %s<>+%d(SB)/8, $0x%016x\n", name, 8*i, v)
		}
		fmt.Fprintf(&b, "GLOBL %s<>(SB), RODATA|NOPTR, $32\n\n", name)
	}
	const32("ktbit4", 0x1010101010101010)
	const32("kthi2", 0x3030303030303030)
	const32("ktm32", 0xffe0ffe0ffe0ffe0) // int16 −32
	const32("ktb03", 0x0303030303030303)
	const32("ktb04", 0x0404040404040404)
	const32("ktb20", 0x2020202020202020)
	// ktiq4<>: ggml's kvalues_iq4nl as signed bytes.
	iq4 := []int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
	for i := 0; i < 2; i++ {
		var v uint64
		for k := 0; k < 8; k++ {
			v |= uint64(uint8(iq4[8*i+k])) << (8 * k)
		}
		fmt.Fprintf(&b, "DATA ktiq4<>+%d(SB)/8, $0x%016x\n", 8*i, v)
	}
	b.WriteString("GLOBL ktiq4<>(SB), RODATA|NOPTR, $16\n\n")
	// ktkscale<>+32j: VPSHUFB mask broadcasting int16 word j of each lane to all 8 words.
	for j := 0; j < 8; j++ {
		v := uint64(2*j) | uint64(2*j+1)<<8
		v |= v << 16
		v |= v << 32
		for i := 0; i < 4; i++ {
			fmt.Fprintf(&b, "DATA ktkscale<>+%d(SB)/8, $0x%016x\n", 32*j+8*i, v)
		}
	}
	b.WriteString("GLOBL ktkscale<>(SB), RODATA|NOPTR, $256\n\n")
	// ktq6scale<>+32k: low lane word 2k, high lane word 2k+1.
	for k := 0; k < 4; k++ {
		for i := 0; i < 4; i++ {
			j := 2*k + i/2
			v := uint64(2*j) | uint64(2*j+1)<<8
			v |= v << 16
			v |= v << 32
			fmt.Fprintf(&b, "DATA ktq6scale<>+%d(SB)/8, $0x%016x\n", 32*k+8*i, v)
		}
	}
	b.WriteString("GLOBL ktq6scale<>(SB), RODATA|NOPTR, $128\n\n")
	return b.String()
}

func main() {
	var s bytes.Buffer
	s.WriteString(header())
	for _, k := range []kind{q4k, q5k, q6k} {
		prep(&s, k)
	}
	for _, tk := range []string{"Q2", "Q3", "IQ4"} {
		prepKX(&s, tk)
	}
	s.WriteString(minsKernels)
	var d bytes.Buffer
	fmt.Fprintf(&d, `// Code generated by ktile_gen.go; DO NOT EDIT.

//go:build amd64 && !purego

package kernels

// Table bytes per row and super-block written by the prepare kernels.
const (
	ktTabQ6  = %d
	ktTabQ45 = %d
	ktTabQ2  = %d
	ktTabQ3  = %d
	ktTabIQ4 = %d
)

//go:noescape
func ktPrepQ4(w *byte, nb int, tab *byte, stride int)

//go:noescape
func ktPrepQ5(w *byte, nb int, tab *byte, stride int)

//go:noescape
func ktPrepQ6(w *byte, nb int, tab *byte, stride int)

//go:noescape
func ktPrepQ2(w *byte, nb int, tab *byte, stride int)

//go:noescape
func ktPrepQ3(w *byte, nb int, tab *byte, stride int)

//go:noescape
func ktPrepIQ4(w *byte, nb int, tab *byte, stride int)

//go:noescape
func ktMinsQ5(tab *byte, stride int, nb int, xt *byte, ntg int, out *float32)

//go:noescape
func ktMinsQ4(tab *byte, stride int, nb int, xt *byte, ntg int, out *float32, tp int)

`, tabQ6, tabQ45, tabQ2, tabQ3, tabIQ4)
	fmt.Fprintf(&d, "// ktMaxC[R] is the widest tile (tokens) generated for R rows (0: none).\nvar ktMaxC = [...]int{0")
	for R := 1; R <= tileRs[len(tileRs)-1]; R++ {
		c := 0
		for _, r := range tileRs {
			if r == R {
				c = maxC(R)
			}
		}
		fmt.Fprintf(&d, ", %d", c)
	}
	d.WriteString("}\n\n")
	for _, tk := range tileKinds {
		for _, R := range tileRs {
			for C := 1; C <= maxC(R); C++ {
				g := &gen{tk: tk, R: R, C: C}
				g.kernel()
				s.Write(g.b.Bytes())
				fmt.Fprintf(&d, "//go:noescape\nfunc %s(tab *byte, x *byte, xRowBytes int, nb int, y *float32, ldy int, mb *float32, mbStride int)\n\n", name(tk, R, C))
			}
		}
	}
	for _, tk := range tileKinds {
		tn := tk
		fmt.Fprintf(&d, "// ktile%s runs the generated %s tile kernel of shape R×C; it reports false for a shape that was not generated.\n", tn, tn)
		fmt.Fprintf(&d, "func ktile%s(R, C int, tab *byte, x *byte, xRowBytes int, nb int, y *float32, ldy int, mb *float32, mbStride int) bool {\n\tswitch R<<8 | C {\n", tn)
		for _, R := range tileRs {
			for C := 1; C <= maxC(R); C++ {
				fmt.Fprintf(&d, "\tcase %d<<8 | %d:\n\t\t%s(tab, x, xRowBytes, nb, y, ldy, mb, mbStride)\n", R, C, name(tk, R, C))
			}
		}
		d.WriteString("\tdefault:\n\t\treturn false\n\t}\n\treturn true\n}\n\n")
	}
	src, err := format.Source(d.Bytes())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile("ktile_amd64.s", s.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile("ktile_kern_amd64.go", src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
