package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSubBlockSums checks the sub-block row sums Refine uses for H·v when v is constant on each
// sub-block: against a float64 product of the whole block row with such a v.
func TestSubBlockSums(t *testing.T) {
	const n, bs, sub = 512, 256, 32
	r := rand.New(rand.NewPCG(1, 2))
	hf := make([]float32, n*n)
	for i := range n {
		for j := 0; j <= i; j++ {
			v := float32(r.NormFloat64())
			if i == j {
				v = float32(n)
			}
			hf[i*n+j], hf[j*n+i] = v, v
		}
	}
	s := subBlockSums(hf, n, bs, sub)
	ns := bs / sub
	if len(s) != n*ns {
		t.Fatalf("%d sums, want %d", len(s), n*ns)
	}
	for c := range n {
		c0 := c / bs * bs
		vals := make([]float64, ns)
		for k := range vals {
			vals[k] = r.NormFloat64()
		}
		var want, got, mag float64
		for j := range bs {
			p := float64(hf[c*n+c0+j]) * vals[j/sub]
			want += p
			mag += math.Abs(p)
		}
		for k := range ns {
			got += vals[k] * s[c*ns+k]
		}
		if math.Abs(got-want) > 1e-12*mag {
			t.Fatalf("column %d: H·v from the sums %v, direct %v", c, got, want)
		}
	}
}
