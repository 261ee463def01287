package kernels

// The pure-Go twins reproduce the assembly (and ggml's x86 vec_dot_f32/f16/bf16) bit for bit:
// 4 accumulators of 8 lanes over 32-element steps, ggml's reductions, the leftovers after.

// reduceGGML is GGML_F32x8_REDUCE: x0+=x2, x1+=x3, x0+=x1, lo+hi, two horizontal adds.
func reduceGGML(acc *[4][8]float32) float32 {
	var x [8]float32
	for l := range x {
		x[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l])
	}
	a0, a1, a2, a3 := x[0]+x[4], x[1]+x[5], x[2]+x[6], x[3]+x[7]
	return (a0 + a1) + (a2 + a3)
}

func dotF32Go(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var acc [4][8]float32
	np := n &^ 31
	for i := 0; i < np; i += 32 {
		for j := 0; j < 4; j++ {
			for l := 0; l < 8; l++ {
				acc[j][l] = lanes8FMA(a[i+8*j+l], b[i+8*j+l], acc[j][l])
			}
		}
	}
	s := reduceGGML(&acc)
	// ggml's scalar leftover loop as GCC compiles it for AVX2: the products of the first
	// (n−np)&^3 leftovers rounded and added in order, the last (n−np)&3 fused.
	n4 := n &^ 3
	for i := np; i < n4; i++ {
		s += float32(a[i] * b[i])
	}
	for i := n4; i < n; i++ {
		s = lanes8FMA(a[i], b[i], s)
	}
	return s
}

func dotF16F32Go(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	var acc [4][8]float32
	np := n &^ 31
	for i := 0; i < np; i += 32 {
		for j := 0; j < 4; j++ {
			for l := 0; l < 8; l++ {
				k := i + 8*j + l
				acc[j][l] = lanes8FMA(halfToFloat(le16(w[2*k:])), x[k], acc[j][l])
			}
		}
	}
	s := float64(reduceGGML(&acc))
	for i := np; i < n; i++ {
		s += float64(float32(halfToFloat(le16(w[2*i:])) * x[i]))
	}
	return float32(s)
}

func dotBF16F32Go(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	var acc [4][8]float32
	np := n &^ 31
	for i := 0; i < np; i += 32 {
		for j := 0; j < 4; j++ {
			for l := 0; l < 8; l++ {
				k := i + 8*j + l
				acc[j][l] += float32(bf16ToFloat(le16(w[2*k:])) * x[k])
			}
		}
	}
	var c [8]float32
	for l := range c {
		c[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l])
	}
	a0, a1, a2, a3 := c[0]+c[4], c[1]+c[5], c[2]+c[6], c[3]+c[7]
	s := float64((a0 + a2) + (a1 + a3))
	for i := np; i < n; i++ {
		s += float64(float32(bf16ToFloat(le16(w[2*i:])) * x[i]))
	}
	return float32(s)
}
