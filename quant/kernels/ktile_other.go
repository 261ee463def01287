//go:build !amd64 || purego

package kernels

// Without assembly MatMulK always takes its pure-Go path; these stubs only satisfy the
// shared driver code.

const (
	ktTabQ6  = 0
	ktTabQ45 = 0
	ktTabQ2  = 0
	ktTabQ3  = 0
	ktTabIQ4 = 0
)

var ktMaxC = [...]int{0, 1, 1, 1}

func ktPrepQ4(w *byte, nb int, tab *byte, stride int)  { panic(noAsm) }
func ktPrepQ5(w *byte, nb int, tab *byte, stride int)  { panic(noAsm) }
func ktPrepQ6(w *byte, nb int, tab *byte, stride int)  { panic(noAsm) }
func ktPrepQ2(w *byte, nb int, tab *byte, stride int)  { panic(noAsm) }
func ktPrepQ3(w *byte, nb int, tab *byte, stride int)  { panic(noAsm) }
func ktPrepIQ4(w *byte, nb int, tab *byte, stride int) { panic(noAsm) }
func ktMinsQ5(tab *byte, stride int, nb int, xt *byte, ntg int, out *float32) {
	panic(noAsm)
}
func ktMinsQ4(tab *byte, stride int, nb int, xt *byte, ntg int, out *float32, tp int) {
	panic(noAsm)
}

func ktileQ45(R, C int, tab *byte, x *byte, xRowBytes int, nb int, y *float32, ldy int, mb *float32, mbStride int) bool {
	panic(noAsm)
}

func ktileQ6(R, C int, tab *byte, x *byte, xRowBytes int, nb int, y *float32, ldy int, mb *float32, mbStride int) bool {
	panic(noAsm)
}

func ktileQ2(R, C int, tab *byte, x *byte, xRowBytes int, nb int, y *float32, ldy int, mb *float32, mbStride int) bool {
	panic(noAsm)
}

func ktileQ3(R, C int, tab *byte, x *byte, xRowBytes int, nb int, y *float32, ldy int, mb *float32, mbStride int) bool {
	panic(noAsm)
}

func ktileIQ4(R, C int, tab *byte, x *byte, xRowBytes int, nb int, y *float32, ldy int, mb *float32, mbStride int) bool {
	panic(noAsm)
}
