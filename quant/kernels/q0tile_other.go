//go:build !amd64 || purego

package kernels

// Without assembly MatMulQ0 always takes its pure-Go path; these stubs only satisfy the
// shared driver code.

func q0tProd(R int, w *byte, rowBytes int, wb int, xs *float32, xsStride int, C int, nb int, p *float32) bool {
	panic(noAsm)
}

func q0tileQ8(R, C int, w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int) bool {
	panic(noAsm)
}

func q0tileQ4(R, C int, w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int) bool {
	panic(noAsm)
}

func q0tProdRow(w *byte, wb int, xs *float32, nb int, p *float32) { panic(noAsm) }

func q0tDecQ8(R int, w *byte, rowBytes int, x *byte, p *float32, nb int, y *float32) bool {
	panic(noAsm)
}

func q0tDecQ4(R int, w *byte, rowBytes int, x *byte, p *float32, nb int, y *float32) bool {
	panic(noAsm)
}

func q0tileQ50(R, C int, w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int) bool {
	panic(noAsm)
}

func q0tileIQ4(R, C int, w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int) bool {
	panic(noAsm)
}

func q0tileQ41(R, C int, w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int) bool {
	panic(noAsm)
}

func q0tileQ51(R, C int, w *byte, rowBytes int, x *byte, xRowBytes int, p *float32, nb int, y *float32, ldy int) bool {
	panic(noAsm)
}

func q0tProdM(R, C int, w *byte, rowBytes int, wb int, xd *float32, xsum *float32, xsStride int, nb int, p *float32) bool {
	panic(noAsm)
}
