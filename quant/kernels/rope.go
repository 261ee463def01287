package kernels

// RoPE rotations as ggml's CPU rope computes them after the C compiler contracted them into
// FMAs: for a pair (x0, x1) with cos c and sin s from the cache,
// x0' = fma(x0, c, −(x1·s)) and x1' = fma(x0, s, x1·c), each rounded once to float32. cs
// holds (c, s) for pair j at cs[2j], cs[2j+1]. The assembly path computes 8 pairs at a time
// with VFMSUB231PS/VFMADD231PS, the same single roundings, so both paths give the same bits
// for finite values.

// RopeNeox rotates the pairs (x[j], x[j+h]), h = len(x)/2, j < h (GPT-NeoX layout). cs must
// hold len(x) values; len(x) must be even.
func RopeNeox(x, cs []float32) {
	n := len(x)
	if n%2 != 0 || len(cs) < n {
		lengthPanic("RopeNeox", "x has %d values (must be even), cs %d", n, len(cs))
	}
	h := n / 2
	j := 0
	if useAsm() && h >= 8 {
		j = h &^ 7
		ropeNeoxAVX2(&x[0], &x[h], &cs[0], j)
	}
	for ; j < h; j++ {
		c, s := cs[2*j], cs[2*j+1]
		x0, x1 := x[j], x[j+h]
		x[j] = lanes8FMA(x0, c, -float32(x1*s))
		x[j+h] = lanes8FMA(x0, s, float32(x1*c))
	}
}

// RopeNorm rotates the adjacent pairs (x[i], x[i+1]), i even (the original, GPT-J layout).
// cs must hold len(x) values; len(x) must be even.
func RopeNorm(x, cs []float32) {
	n := len(x)
	if n%2 != 0 || len(cs) < n {
		lengthPanic("RopeNorm", "x has %d values (must be even), cs %d", n, len(cs))
	}
	i := 0
	if useAsm() && n >= 8 {
		i = n &^ 7
		ropeNormAVX2(&x[0], &cs[0], i)
	}
	for ; i < n; i += 2 {
		c, s := cs[i], cs[i+1]
		x0, x1 := x[i], x[i+1]
		x[i] = lanes8FMA(x0, c, -float32(x1*s))
		x[i+1] = lanes8FMA(x0, s, float32(x1*c))
	}
}
