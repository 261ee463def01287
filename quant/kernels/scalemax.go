package kernels

import "math"

// ScaleMax sets x[i] *= scale and returns the largest scaled value as Go's max builtin
// folds it from −Inf in index order: NaN if any value is NaN, +0 rather than −0 when the
// largest is a zero. The assembly path scales and takes the maximum 32 values at a time;
// when its maximum is a zero or a NaN was seen it folds the scaled values again in Go, so
// both paths return the same bits (softmax over attention scores calls this per row).
func ScaleMax(x []float32, scale float32) float32 {
	mx := float32(math.Inf(-1))
	i := 0
	if useAsm() && len(x) >= 8 {
		i = len(x) &^ 7
		m, nan := scaleMaxAVX2(&x[0], scale, i)
		if nan || m == 0 {
			return maxFold(x[:i], x[i:], scale)
		}
		mx = m
	}
	for ; i < len(x); i++ {
		x[i] *= scale
		mx = max(mx, x[i])
	}
	return mx
}

// maxFold returns the fold of max over done (already scaled) then over rest scaled in place.
func maxFold(done, rest []float32, scale float32) float32 {
	mx := float32(math.Inf(-1))
	for _, v := range done {
		mx = max(mx, v)
	}
	for i := range rest {
		rest[i] *= scale
		mx = max(mx, rest[i])
	}
	return mx
}
