package quant

// The input Gram matrix ("Hessian") that QuantizeGPTQ minimises the output error
// under, and its factorisation (see docs/quantization.md, "Error-compensating search").

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// MaxHessianCols bounds the size of a Hessian: n×n float64 values are held, so
// 65536 columns already need 32 GiB.
const MaxHessianCols = 1 << 16

// Hessian is the Gram matrix H = XᵀX/s of the s input vectors X (s × n) that a
// linear layer multiplies its weight rows with: for a row w and its quantized q,
// (w−q)·H·(w−q)ᵀ is the mean squared error the quantization adds to that output
// channel. QuantizeGPTQ minimises this error.
//
// A Hessian holds n×n float64 values and, after the first QuantizeGPTQ call, a
// cached factorisation of n×n float32 values that later calls with the same
// damping reuse (so tensors that read the same input, like the q, k and v
// projections, factorise once). Add drops the cache. Add must not run concurrently
// with other methods; QuantizeGPTQ calls may share a Hessian concurrently.
type Hessian struct {
	n     int
	sum   []float64 // Σ xᵀx, upper triangle (row-major, element (i,j) at i·n+j for i <= j)
	count float64   // number of samples summed (1 for NewHessianFromGram)

	mu  sync.Mutex
	fac *gptqFactor
	act *gptqActOrder // the factorisation in activation order (GPTQOptions.ActOrder)
}

// gptqActOrder is a Hessian's factorisation with its columns in activation order: perm[p]
// is the column processed p-th (descending H_jj, ties by index), fac the factorisation of
// the permuted H (P·H·Pᵀ), hf (for Refine) H + λI in the natural order.
type gptqActOrder struct {
	perm []int
	fac  *gptqFactor
	hf   []float32
}

// NewHessian returns an empty Hessian for rows of n columns (1 <= n <= MaxHessianCols).
func NewHessian(n int) (*Hessian, error) {
	if n <= 0 || n > MaxHessianCols {
		return nil, fmt.Errorf("quant: Hessian: %d columns is outside 1..%d", n, MaxHessianCols)
	}
	return &Hessian{n: n, sum: make([]float64, n*n)}, nil
}

// NewHessianFromGram builds a Hessian from a symmetric n×n matrix given row-major
// (for example XᵀX/s computed elsewhere). The values are copied. It fails for a
// wrong length, a non-finite entry, a negative diagonal entry or an asymmetry larger
// than 1e-6·sqrt(g_ii·g_jj) (plus 1e-30 absolute).
func NewHessianFromGram(n int, gram []float64) (*Hessian, error) {
	return AdoptGram(n, slices.Clone(gram))
}

// AdoptGram is NewHessianFromGram without the copy: the Hessian takes gram over as its own
// storage (nobody may change it afterwards), so a wide input's n² float64 values are
// held once rather than twice while it is built. The checks and the result are those of
// NewHessianFromGram; on an error gram is left unchanged.
func AdoptGram(n int, gram []float64) (*Hessian, error) {
	if n <= 0 || n > MaxHessianCols {
		return nil, fmt.Errorf("quant: Hessian: %d columns is outside 1..%d", n, MaxHessianCols)
	}
	if len(gram) != n*n {
		return nil, fmt.Errorf("quant: Hessian: have %d values, want %d×%d", len(gram), n, n)
	}
	for i := 0; i < n; i++ {
		if g := gram[i*n+i]; !(g >= 0) || math.IsInf(g, 1) {
			return nil, fmt.Errorf("quant: Hessian: diagonal entry (%d,%d) = %v is negative or not finite", i, i, g)
		}
	}
	for i := 0; i < n; i++ {
		for j := i; j < n; j++ {
			a, b := gram[i*n+j], gram[j*n+i]
			if math.IsNaN(a) || math.IsInf(a, 0) || math.IsNaN(b) || math.IsInf(b, 0) {
				return nil, fmt.Errorf("quant: Hessian: entry (%d,%d) is not finite", i, j)
			}
			if math.Abs(a-b) > 1e-6*math.Sqrt(gram[i*n+i]*gram[j*n+j])+1e-30 {
				return nil, fmt.Errorf("quant: Hessian: not symmetric at (%d,%d): %v vs %v", i, j, a, b)
			}
		}
	}
	// sum holds the upper triangle (i <= j), which gram already has in place; the lower
	// triangle is never read.
	return &Hessian{n: n, sum: gram, count: 1}, nil
}

// Cols returns n, the number of columns (the layer's input size).
func (h *Hessian) Cols() int { return h.n }

// Samples returns the number of input vectors added (1 for NewHessianFromGram).
func (h *Hessian) Samples() float64 { return h.count }

// At returns H[i][j] = (Σ x_i·x_j)/samples (0 before any sample was added).
func (h *Hessian) At(i, j int) float64 {
	if i > j {
		i, j = j, i
	}
	if h.count == 0 {
		return 0
	}
	return h.sum[i*h.n+j] / h.count
}

// Add accumulates rows input vectors x (rows × n, row-major). It fails, naming the
// row and column, on a NaN or Inf value, and leaves the Hessian unchanged then.
// The cost is rows·n² multiply-adds (gonum's float64 DSYRK).
func (h *Hessian) Add(x []float32, rows int) error {
	n := h.n
	if rows < 0 || (rows > 0 && n > math.MaxInt/rows) || len(x) != rows*n {
		return fmt.Errorf("quant: Hessian.Add: have %d values, want %d rows × %d", len(x), rows, n)
	}
	for i, v := range x {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("quant: Hessian.Add: sample %d, column %d: value %v is not finite", i/n, i%n, v)
		}
	}
	h.mu.Lock()
	h.fac, h.act = nil, nil
	h.mu.Unlock()
	const chunk = 64
	buf := make([]float64, min(rows, chunk)*n)
	c := blas64.Symmetric{Uplo: blas.Upper, N: n, Stride: n, Data: h.sum}
	for r0 := 0; r0 < rows; r0 += chunk {
		m := min(chunk, rows-r0)
		for i, v := range x[r0*n : (r0+m)*n] {
			buf[i] = float64(v)
		}
		a := blas64.General{Rows: m, Cols: n, Stride: n, Data: buf[:m*n]}
		blas64.Syrk(blas.Trans, 1, a, 1, c)
	}
	h.count += float64(rows)
	return nil
}

// gptqFactor is what the GPTQ column loop needs from H + λI = V·Vᵀ, V upper
// triangular (a "UL" Cholesky factorisation, obtained from the ordinary Cholesky
// factor of the column-reversed matrix):
//
//	vc[j·n+i] = V[i][j] / V[j][j] for i < j   (the feedback coefficients Ṽ, column-major)
//	vdiag[j]  = V[j][j]
//	diag[j]   = H[j][j] + λ
//	hf        = H + λI as float32 (only built for Refine)
//
// With r = w − q the residual of a row, the weight that column j is rounded from is
// w'_j = w_j + Σ_{i<j} r_i·Ṽ[i][j], which is GPTQ's update written without H⁻¹
// (docs/quantization.md derives it). Column-major storage makes the lazy update of
// the columns after a batch an ordinary C += A·Bᵀ product (kernels.Sgemm).
type gptqFactor struct {
	n      int
	damp   float64 // relative damping asked for
	used   float64 // relative damping that gave a positive definite matrix
	lambda float64
	vc     []float32
	vdiag  []float64
	diag   []float64
	hf     []float32
	dead   []bool // H_jj = 0
	// coupled reports whether any rounding error is fed back (an off-diagonal entry of Ṽ is
	// not zero), i.e. whether H had correlations left after dropping dead columns.
	coupled bool
}

// gptqMaxDampTries is how often the damping is multiplied by 10 when the Cholesky
// factorisation fails.
const gptqMaxDampTries = 4

// factor returns the (cached) factorisation for relative damping damp; withH
// also makes sure its float32 copy of H + λI is present (for Refine).
func (h *Hessian) factor(damp float64, withH bool) (*gptqFactor, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fac == nil || h.fac.damp != damp {
		f, err := h.factorize(damp)
		if err != nil {
			return nil, err
		}
		h.fac = f
	}
	if withH && h.fac.hf == nil {
		h.fac.hf = h.dampedF32(h.fac)
	}
	return h.fac, nil
}

// dampedF32 returns H + λI as float32 n×n (both triangles), with the dead columns
// decoupled exactly as in the factorisation.
func (h *Hessian) dampedF32(f *gptqFactor) []float32 {
	n := h.n
	scale := 1.0
	if h.count > 0 {
		scale = 1 / h.count
	}
	hf := make([]float32, n*n)
	for i := 0; i < n; i++ {
		hf[i*n+i] = float32(f.diag[i])
		if f.dead[i] { // H_ii = 0: no off-diagonal terms
			continue
		}
		for j := i + 1; j < n; j++ {
			if f.dead[j] {
				continue
			}
			v := float32(h.sum[i*n+j] * scale)
			hf[i*n+j], hf[j*n+i] = v, v
		}
	}
	return hf
}

// actOrder returns the (cached) activation-order factorisation for relative damping damp;
// withH also makes its natural-order float32 H + λI present.
func (h *Hessian) actOrder(damp float64, withH bool) (*gptqActOrder, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n
	if h.act == nil || h.act.fac.damp != damp {
		perm := make([]int, n)
		for i := range perm {
			perm[i] = i
		}
		sort.SliceStable(perm, func(a, b int) bool { return h.sum[perm[a]*n+perm[a]] > h.sum[perm[b]*n+perm[b]] })
		f, err := h.factorizePerm(damp, perm)
		if err != nil {
			return nil, err
		}
		h.act = &gptqActOrder{perm: perm, fac: f}
	}
	if withH && h.act.hf == nil {
		a := h.act
		nat := &gptqFactor{n: n, diag: make([]float64, n), dead: make([]bool, n)}
		for p, c := range a.perm {
			nat.diag[c], nat.dead[c] = a.fac.diag[p], a.fac.dead[p]
		}
		a.hf = h.dampedF32(nat)
	}
	return h.act, nil
}

func (h *Hessian) factorize(damp float64) (*gptqFactor, error) {
	return h.factorizePerm(damp, nil)
}

// factorizePerm factorises P·H·Pᵀ, the matrix whose element (p, q) is H[perm[p]][perm[q]]
// (perm nil: H itself), reading H in place rather than from a permuted copy: a wide input's
// n² float64 values are not held twice while it is factorised.
func (h *Hessian) factorizePerm(damp float64, perm []int) (*gptqFactor, error) {
	n := h.n
	scale := 1.0
	if h.count > 0 {
		scale = 1 / h.count
	}
	at := func(i, j int) float64 { // element (i, j) of the permuted matrix, i >= j
		if perm != nil {
			i, j = perm[i], perm[j]
			if j > i {
				i, j = j, i
			}
		}
		return h.sum[j*n+i]
	}
	diag := make([]float64, n)
	var mean float64
	for i := range diag {
		diag[i] = at(i, i) * scale
		if !(diag[i] >= 0) || math.IsInf(diag[i], 1) {
			return nil, fmt.Errorf("Hessian diagonal entry %d = %v is negative or not finite", i, diag[i])
		}
		mean += diag[i]
	}
	mean /= float64(n)
	if mean == 0 { // no information (no samples): every column counts the same
		mean = 1
	}
	if math.IsInf(mean, 0) {
		return nil, fmt.Errorf("Hessian diagonal sums to Inf")
	}
	// a[p][q] = H[n-1-p][n-1-q] for p <= q: the reversed matrix, upper triangle.
	// A dead column (H_jj = 0) is decoupled from the others; damping alone keeps
	// its pivot positive.
	a := make([]float64, n*n)
	fill := func(lambda float64) {
		for p := 0; p < n; p++ {
			i := n - 1 - p
			for q := p; q < n; q++ {
				j := n - 1 - q // j <= i
				v := at(i, j) * scale
				if diag[i] == 0 || diag[j] == 0 {
					v = 0
				}
				a[p*n+q] = v
			}
			a[p*n+p] = diag[i] + lambda
		}
	}
	f := &gptqFactor{n: n, damp: damp, diag: diag}
	ok := false
	rel := damp
	for try := 0; try < gptqMaxDampTries && !ok; try, rel = try+1, rel*10 {
		f.used, f.lambda = rel, rel*mean
		fill(f.lambda)
		ok = cholUpper(a, n, 0)
	}
	if !ok {
		return nil, fmt.Errorf("Hessian is not positive semi-definite: Cholesky factorisation failed even with damping %g × mean diagonal", f.used)
	}
	f.dead = make([]bool, n)
	for i := range diag {
		f.dead[i] = diag[i] == 0
		diag[i] += f.lambda
	}
	// a now holds R (upper) with reversed(H+λI) = RᵀR, so H+λI = V·Vᵀ with
	// V[i][j] = R[n-1-j][n-1-i].
	f.vdiag = make([]float64, n)
	for j := 0; j < n; j++ {
		p := n - 1 - j
		f.vdiag[j] = a[p*n+p]
		if !(f.vdiag[j] > 0) || math.IsInf(f.vdiag[j], 0) {
			return nil, fmt.Errorf("Hessian factorisation has a non-positive pivot at column %d", j)
		}
	}
	f.vc = make([]float32, n*n)
	for p := 0; p < n; p++ { // row p of R is column j = n-1-p of V
		j := n - 1 - p
		inv := 1 / a[p*n+p]
		row := a[p*n : p*n+n]
		col := f.vc[j*n : j*n+n]
		for q := p + 1; q < n; q++ {
			i := n - 1 - q
			v := float32(row[q] * inv)
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("Hessian factorisation overflowed at (%d,%d)", i, j)
			}
			col[i] = v
			f.coupled = f.coupled || v != 0
		}
	}
	return f, nil
}
