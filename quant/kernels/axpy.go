package kernels

// Element-wise vector updates of ggml's CPU backend, each element computed independently (so
// the assembly and pure-Go paths agree bit for bit with ggml's AVX2 code for any length).

// AxpyFMA sets y[i] = fma(x[i], a, y[i]), one rounding per element, as ggml_vec_mad_f32 does
// (its vector part uses FMA; its scalar tail is contracted to FMA by the compiler). x must be at
// least as long as y.
func AxpyFMA(y []float32, a float32, x []float32) {
	n := len(y)
	if len(x) < n {
		lengthPanic("AxpyFMA", "len(x) = %d < len(y) = %d", len(x), n)
	}
	if n == 0 {
		return
	}
	if useAsm() {
		axpyFMAAVX2(&y[0], a, &x[0], n)
		return
	}
	for i := range y {
		y[i] = lanes8FMA(x[i], a, y[i])
	}
}

// ScaleF32 sets y[i] *= a, as ggml_vec_scale_f32 does.
func ScaleF32(y []float32, a float32) {
	if len(y) == 0 {
		return
	}
	if useAsm() {
		scaleF32AVX2(&y[0], a, len(y))
		return
	}
	for i := range y {
		y[i] *= a
	}
}
