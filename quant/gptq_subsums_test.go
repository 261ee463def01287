package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
)

// TestSubBlockSums checks the sub-block row sums Refine uses for H·v when v is constant on each
// sub-block: against a float64 product of the whole block row with such a v.
func TestSubBlockSums(t *testing.T) {
	const n, bs, sub = 512, 256, 32
	r := rand.New(rand.NewPCG(1, 2))
	hf := randomSymF32(r, n)
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

// TestGPTQRefineGradient checks the gradient Refine keeps up to date lazily: when a block is
// entered, its g_b must be (H+λI)·(w − y) with y the refined values of the blocks before it and
// the column loop's values from the block on, computed here directly in float64 (the run's
// float32 products allow 1e-5 of the sum of the terms' magnitudes). Rows and blocks of Q4_0
// (16 blocks of 32) and Q4_K (2 blocks of 256, sub-block mins) are checked.
func TestGPTQRefineGradient(t *testing.T) {
	const ns, n, nrows = 1200, 512, 5
	x := gptqInputs(81, ns, n)
	h := hessianOf(t, x, n)
	w := studentT3(82, nrows*n)
	f, err := h.factor(gptqDefaultDamp, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []gguf.GGMLType{gguf.TypeQ4_0, gguf.TypeQ4_K} {
		rs := mustRowSize(t, typ, n)
		qa, qb := make([]byte, nrows*rs), make([]byte, nrows*rs)
		if err := QuantizeGPTQ(typ, qa, w, nrows, n, h, nil); err != nil {
			t.Fatal(err)
		}
		rec := &gptqRecord{used: make([]float32, nrows*n), loss: make([]float64, nrows), grad: make([]float32, nrows*n)}
		if err := quantizeGPTQ(typ, qb, w, nrows, n, h, &GPTQOptions{Refine: true}, rec); err != nil {
			t.Fatal(err)
		}
		ya, yb := make([]float32, nrows*n), make([]float32, nrows*n)
		mustDeq(t, typ, ya, qa)
		mustDeq(t, typ, yb, qb)
		bs := gptqSpecs[typ].bs
		changed := 0
		for r := range nrows {
			for c0 := 0; c0 < n; c0 += bs {
				d := make([]float64, n)
				for j := range n {
					y := ya[r*n+j]
					if j < c0 {
						y = yb[r*n+j]
					}
					d[j] = float64(w[r*n+j]) - float64(y)
				}
				for i := c0; i < c0+bs; i++ {
					want, mag := f.lambda*d[i], math.Abs(f.lambda*d[i])
					for j := range n {
						p := h.At(i, j) * d[j]
						want += p
						mag += math.Abs(p)
					}
					if got := float64(rec.grad[r*n+i]); math.Abs(got-want) > 1e-5*mag {
						t.Fatalf("%v row %d column %d (block at %d): g %g, want %g (Σ|terms| %g)", typ, r, i, c0, got, want, mag)
					}
				}
			}
			for j := range n {
				if ya[r*n+j] != yb[r*n+j] {
					changed++
				}
			}
		}
		if changed == 0 {
			t.Fatalf("%v: Refine changed nothing: the check above saw no update", typ)
		}
		t.Logf("%v: %d of %d values changed by Refine; every block's gradient matches", typ, changed, nrows*n)
	}
}

// TestHMul checks Refine's H·x against a float64 product, for the shapes it is called with
// (the whole block; a sub-block's rows; the rows around a sub-block; the second block of
// the row), with zeros in x, and that no other output is written. The error is bounded by
// float32 accumulation, 2⁻²⁰ of Σ|H_ij·x_j| over 32-256 terms.
func TestHMul(t *testing.T) {
	const n, bs = 512, 256
	r := rand.New(rand.NewPCG(3, 4))
	hf := randomSymF32(r, n)
	g := &gptqRun{n: n, hf: hf}
	rw := newGPTQRefineWork(n, bs, 144)
	x := make([]float64, bs)
	out := make([]float64, bs)
	for _, c := range []struct{ c0, rlo, rhi, lo, hi int }{
		{0, 0, bs, 0, bs}, {256, 0, bs, 0, bs}, {256, 32, 64, 32, 64}, {0, 0, 96, 96, 128}, {256, 128, bs, 96, 128},
	} {
		for j := range x {
			x[j] = 0
			if r.IntN(4) > 0 {
				x[j] = r.NormFloat64() * 3
			}
		}
		for i := range out {
			out[i] = math.NaN()
		}
		g.hMul(rw, out, x, c.c0, c.rlo, c.rhi, c.lo, c.hi)
		for i := range bs {
			if i < c.rlo || i >= c.rhi {
				if !math.IsNaN(out[i]) {
					t.Fatalf("%+v: output %d outside the rows was written", c, i)
				}
				continue
			}
			var want, mag float64
			for j := c.lo; j < c.hi; j++ {
				p := float64(hf[(c.c0+i)*n+c.c0+j]) * float64(float32(x[j]))
				want += p
				mag += math.Abs(p)
			}
			if d := math.Abs(out[i] - want); d > mag*0x1p-20 {
				t.Errorf("%+v: output %d = %v, float64 %v (difference %g, Σ|terms| %g)", c, i, out[i], want, d, mag)
			}
		}
	}
}

// randomSymF32 returns a symmetric n×n float32 matrix, standard normal off the diagonal and
// n on it (positive definite).
func randomSymF32(r *rand.Rand, n int) []float32 {
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
	return hf
}
