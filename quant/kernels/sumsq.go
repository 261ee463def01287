package kernels

import "math"

// SumSqMaxAbs accumulates one activation row x into per-column statistics:
// sum[i] += float64(x[i])² (the square rounded to float64, then added: no fused multiply-add)
// and mx[i] = |x[i]| when |x[i]| > mx[i] or |x[i]| is NaN (a NaN in mx stays). The assembly
// and pure-Go paths give the same bits. It panics with a *LengthError if sum or mx is
// shorter than x.
func SumSqMaxAbs(sum []float64, mx []float32, x []float32) {
	n := len(x)
	if len(sum) < n || len(mx) < n {
		lengthPanic("SumSqMaxAbs", "sum has %d and mx %d elements, x has %d", len(sum), len(mx), n)
	}
	i := 0
	if useAsm() && n >= 8 {
		i = n &^ 7
		sumSqMaxAbsAVX2(&sum[0], &mx[0], &x[0], i)
	}
	sumSqMaxAbsGo(sum[i:n], mx[i:n], x[i:])
}

func sumSqMaxAbsGo(sum []float64, mx []float32, x []float32) {
	sum = sum[:len(x)]
	mx = mx[:len(x)]
	for i, v := range x {
		f := float64(v)
		sum[i] += float64(f * f)
		a := math.Float32frombits(math.Float32bits(v) &^ (1 << 31))
		if a > mx[i] || a != a {
			mx[i] = a
		}
	}
}
