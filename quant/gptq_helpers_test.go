package quant

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// gptqInputs returns ns input vectors (ns × n, row-major) with a non-trivial
// covariance: X = Z·A with Z ~ N(0,1) and A = I/2 + G/√n (G Gaussian), each column
// then scaled by a log-normal factor, and columns 5, 77, 300 and 701 (mod n) ×12
// as outlier channels. The rows of A mix every channel into every other, so
// neighbouring and distant columns are correlated, as in real activations.
func gptqInputs(seed uint64, ns, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x51ed27))
	a := make([]float64, n*n)
	for i := range a {
		a[i] = r.NormFloat64() / math.Sqrt(float64(n))
	}
	for i := 0; i < n; i++ {
		a[i*n+i] += 0.5
	}
	z := make([]float64, ns*n)
	for i := range z {
		z[i] = r.NormFloat64()
	}
	x := make([]float64, ns*n)
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1,
		blas64.General{Rows: ns, Cols: n, Stride: n, Data: z},
		blas64.General{Rows: n, Cols: n, Stride: n, Data: a}, 0,
		blas64.General{Rows: ns, Cols: n, Stride: n, Data: x})
	colScale := make([]float64, n)
	for c := range colScale {
		colScale[c] = math.Exp(0.5 * r.NormFloat64())
	}
	for _, c := range []int{5, 77, 300, 701} {
		colScale[c%n] *= 12
	}
	out := make([]float32, ns*n)
	for i, v := range x {
		out[i] = float32(v * colScale[i%n])
	}
	return out
}

// outputSSE returns ||(W − Q)·Xᵀ||²_F in float64 for W, Q (nrows × n) and X (ns × n).
func outputSSE(w, q, x []float32, nrows, n int) float64 {
	ns := len(x) / n
	d := make([]float64, nrows*n)
	for i := range d {
		d[i] = float64(w[i]) - float64(q[i])
	}
	xf := make([]float64, len(x))
	for i, v := range x {
		xf[i] = float64(v)
	}
	p := make([]float64, nrows*ns)
	blas64.Gemm(blas.NoTrans, blas.Trans, 1,
		blas64.General{Rows: nrows, Cols: n, Stride: n, Data: d},
		blas64.General{Rows: ns, Cols: n, Stride: n, Data: xf}, 0,
		blas64.General{Rows: nrows, Cols: ns, Stride: ns, Data: p})
	var s float64
	for _, v := range p {
		s += v * v
	}
	return s
}

func hessianOf(t testing.TB, x []float32, n int) *Hessian {
	t.Helper()
	h, err := NewHessian(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Add(x, len(x)/n); err != nil {
		t.Fatal(err)
	}
	return h
}

func hessianDiag(h *Hessian) []float32 {
	d := make([]float32, h.Cols())
	for i := range d {
		d[i] = float32(h.At(i, i))
	}
	return d
}

// gptqDeq quantizes with QuantizeGPTQ and returns the dequantized values.
func gptqDeq(t testing.TB, typ gguf.GGMLType, w []float32, nrows, n int, h *Hessian, opts *GPTQOptions) []float32 {
	t.Helper()
	q := make([]byte, nrows*mustRowSize(t, typ, n))
	if err := QuantizeGPTQ(typ, q, w, nrows, n, h, opts); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(w))
	mustDeq(t, typ, y, q)
	return y
}

func quantDeq(t testing.TB, typ gguf.GGMLType, w []float32, nrows, n int, opts *Options) []float32 {
	t.Helper()
	q := make([]byte, nrows*mustRowSize(t, typ, n))
	if err := Quantize(typ, q, w, nrows, n, opts); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(w))
	mustDeq(t, typ, y, q)
	return y
}
