//go:build !amd64 || purego

package kernels

func dotQ2KQ8KAVX2(w, x *byte, nb int) float32   { panic(noAsm) }
func dotQ3KQ8KAVX2(w, x *byte, nb int) float32   { panic(noAsm) }
func dotIQ4XSQ8KAVX2(w, x *byte, nb int) float32 { panic(noAsm) }
