package kernels

func dotF32Go(a, b []float32) float32 {
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		aa := (*[4]float32)(a[i:])
		bb := (*[4]float32)(b[i:])
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotF16F32Go(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		ww := (*[8]byte)(w[2*i:])
		xx := (*[4]float32)(x[i:])
		s0 += halfToFloat(le16(ww[0:])) * xx[0]
		s1 += halfToFloat(le16(ww[2:])) * xx[1]
		s2 += halfToFloat(le16(ww[4:])) * xx[2]
		s3 += halfToFloat(le16(ww[6:])) * xx[3]
	}
	for ; i < n; i++ {
		s0 += halfToFloat(le16(w[2*i:])) * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func dotBF16F32Go(w []byte, x []float32) float32 {
	n := len(x)
	w = w[:2*n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		ww := (*[8]byte)(w[2*i:])
		xx := (*[4]float32)(x[i:])
		s0 += bf16ToFloat(le16(ww[0:])) * xx[0]
		s1 += bf16ToFloat(le16(ww[2:])) * xx[1]
		s2 += bf16ToFloat(le16(ww[4:])) * xx[2]
		s3 += bf16ToFloat(le16(ww[6:])) * xx[3]
	}
	for ; i < n; i++ {
		s0 += bf16ToFloat(le16(w[2*i:])) * x[i]
	}
	return (s0 + s1) + (s2 + s3)
}
