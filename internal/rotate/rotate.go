// Package rotate rotates a model's residual stream by a fixed orthogonal matrix Q, folded
// exactly into standard weights so that llama.cpp runs the result unchanged (docs/rotation.md).
//
// With x' = x·Q for every residual-stream vector x, RMSNorm commutes with Q (‖x·Q‖ = ‖x‖), so
// a linear weight W (rows = outputs) that reads a normalised residual with norm weight g
// becomes W·diag(g)·Q with the norm weight set to 1; a weight that writes into the residual
// becomes Qᵀ·W; the token embedding's rows become e·Q. The model computes the same function
// (up to float rounding), but the weights that read the residual no longer see its outlier
// channels: the rotation spreads them over all columns, which 4-bit blocks quantize better.
//
// Q = S·(R ⊗ Hₙ) for a hidden size d = m·n with n a power of two: S a diagonal of random signs,
// Hₙ the normalised Walsh–Hadamard matrix, R a random m×m orthogonal matrix (m = 1 for
// power-of-two widths). Both come from a seeded generator, so the rotation is reproducible
// from (d, seed), which the GGUF records under MetaKey.
package rotate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// MetaKey is the GGUF metadata key recording the rotation a file was written with.
const MetaKey = "tq.rotation"

// MaxOddPart is the largest odd factor m of the hidden size the rotation supports (R is a
// dense m×m matrix applied to every row).
const MaxOddPart = 255

// DefaultSeed is the seed tq convert uses.
const DefaultSeed = 1

// Spec identifies a rotation: the hidden size and the generator's seed.
type Spec struct {
	Dim  int
	Seed uint64
}

// String is the MetaKey value: "hadamard-v1 dim=D seed=S".
func (s Spec) String() string { return fmt.Sprintf("hadamard-v1 dim=%d seed=%d", s.Dim, s.Seed) }

// ParseSpec parses a MetaKey value.
func ParseSpec(v string) (Spec, error) {
	f := strings.Fields(v)
	if len(f) != 3 || f[0] != "hadamard-v1" || !strings.HasPrefix(f[1], "dim=") || !strings.HasPrefix(f[2], "seed=") {
		return Spec{}, fmt.Errorf("rotation %q: want \"hadamard-v1 dim=D seed=S\"", v)
	}
	d, err := strconv.Atoi(f[1][4:])
	if err != nil {
		return Spec{}, fmt.Errorf("rotation %q: %v", v, err)
	}
	seed, err := strconv.ParseUint(f[2][5:], 10, 64)
	if err != nil {
		return Spec{}, fmt.Errorf("rotation %q: %v", v, err)
	}
	return Spec{Dim: d, Seed: seed}, nil
}

// Rotation is Q for one Spec. It is read-only after New and safe for concurrent use.
type Rotation struct {
	spec  Spec
	n, m  int       // d = m·n, n a power of two, m odd
	signs []float64 // S
	r     []float64 // R, m×m row-major
	scale float64   // 1/√n
}

// New builds the rotation of spec. The hidden size must be m·2^k with m odd and at most
// MaxOddPart.
func New(spec Spec) (*Rotation, error) {
	d := spec.Dim
	if d < 2 || d > 1<<20 {
		return nil, fmt.Errorf("rotate: hidden size %d out of range (2..%d)", d, 1<<20)
	}
	n := d & -d // largest power of two dividing d
	m := d / n
	if m > MaxOddPart {
		return nil, fmt.Errorf("rotate: hidden size %d = %d·%d: the odd factor %d exceeds %d", d, m, n, m, MaxOddPart)
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 0x7471726f74617465)) // "tqrotate"
	q := &Rotation{spec: spec, n: n, m: m, signs: make([]float64, d), scale: 1 / math.Sqrt(float64(n))}
	for i := range q.signs {
		q.signs[i] = 1
		if rng.Uint64()&1 == 1 {
			q.signs[i] = -1
		}
	}
	q.r = randomOrthogonal(m, rng)
	return q, nil
}

// Spec returns the rotation's spec.
func (q *Rotation) Spec() Spec { return q.spec }

// Dim is the hidden size.
func (q *Rotation) Dim() int { return q.spec.Dim }

// randomOrthogonal returns an m×m orthogonal matrix: modified Gram–Schmidt of a Gaussian matrix,
// each row normalised (m = 1: [1]).
func randomOrthogonal(m int, rng *rand.Rand) []float64 {
	r := make([]float64, m*m)
	for i := range r {
		r[i] = rng.NormFloat64()
	}
	for i := 0; i < m; i++ {
		row := r[i*m : (i+1)*m]
		for j := 0; j < i; j++ {
			prev := r[j*m : (j+1)*m]
			var dot float64
			for k := range row {
				dot += row[k] * prev[k]
			}
			for k := range row {
				row[k] -= dot * prev[k]
			}
		}
		var nrm float64
		for _, v := range row {
			nrm += v * v
		}
		nrm = math.Sqrt(nrm)
		if nrm < 1e-8 { // (probability zero) fall back to a unit vector
			clear(row)
			row[i] = 1
			nrm = 1
		}
		for k := range row {
			row[k] /= nrm
		}
	}
	return r
}

// Apply sets v ← v·Q (len(v) = Dim) using the float64 scratch buf (len ≥ Dim; nil allocates).
func (q *Rotation) Apply(v []float32, buf []float64) {
	d := q.spec.Dim
	if len(buf) < d {
		buf = make([]float64, d)
	}
	u := buf[:d]
	for i, x := range v[:d] {
		u[i] = float64(x) * q.signs[i]
	}
	q.apply64(u, v)
}

// Apply64 is Apply on a float64 vector, in place.
func (q *Rotation) Apply64(v []float64) {
	for i := range v[:q.spec.Dim] {
		v[i] *= q.signs[i]
	}
	q.apply64(v, nil)
}

// apply64 multiplies u (signs applied) by R ⊗ Hₙ in place; with out it stores the result there
// as float32.
func (q *Rotation) apply64(u []float64, out []float32) {
	n, m := q.n, q.m
	for b := 0; b < m; b++ {
		fwht(u[b*n : (b+1)*n])
	}
	if m == 1 {
		if out != nil {
			for i, x := range u {
				out[i] = float32(x * q.scale)
			}
		} else {
			for i := range u {
				u[i] *= q.scale
			}
		}
		return
	}
	// out_(a,e) = Σ_b R[b][a] · y_(b,e)
	col := make([]float64, m)
	for e := 0; e < n; e++ {
		for b := 0; b < m; b++ {
			col[b] = u[b*n+e]
		}
		for a := 0; a < m; a++ {
			var s float64
			for b := 0; b < m; b++ {
				s += q.r[b*m+a] * col[b]
			}
			s *= q.scale
			if out != nil {
				out[a*n+e] = float32(s)
			} else {
				u[a*n+e] = s
			}
		}
	}
}

// fwht is the unnormalised fast Walsh–Hadamard transform of x (len a power of two), in place.
func fwht(x []float64) {
	n := len(x)
	for h := 1; h < n; h <<= 1 {
		for i := 0; i < n; i += h << 1 {
			a, b := x[i:i+h], x[i+h:i+2*h]
			for j := range a {
				s, t := a[j], b[j]
				a[j], b[j] = s+t, s-t
			}
		}
	}
}

// Gram returns Qᵀ·diag(1/g)·H·diag(1/g)·Q for a symmetric n×n H (row-major, n = Dim) and the
// norm weight g a rotated reader folded in: the input Gram matrix of the rotated weight, whose
// input is the un-weighted normalised residual times Q. A zero g_i leaves nothing of column i
// (the original weight never saw it). h is overwritten.
func (q *Rotation) Gram(h []float64, g []float32) ([]float64, error) {
	d := q.spec.Dim
	if len(h) != d*d || (g != nil && len(g) != d) {
		return nil, errors.New("rotate: Gram: sizes do not match the rotation")
	}
	inv := make([]float64, d)
	for i := range inv {
		inv[i] = 1
		if g != nil {
			if g[i] != 0 {
				inv[i] = 1 / float64(g[i])
			} else {
				inv[i] = 0
			}
		}
	}
	for i := 0; i < d; i++ {
		row := h[i*d : (i+1)*d]
		for j := range row {
			row[j] *= inv[i] * inv[j]
		}
		q.Apply64(row) // rows: A·Q
	}
	// columns: Qᵀ·(A·Q) = ((A·Q)ᵀ·Q)ᵀ; A·Q is not symmetric, so transpose, rotate rows, transpose
	transpose(h, d)
	for i := 0; i < d; i++ {
		q.Apply64(h[i*d : (i+1)*d])
	}
	transpose(h, d)
	// symmetrise the rounding
	for i := 0; i < d; i++ {
		for j := i + 1; j < d; j++ {
			a := 0.5 * (h[i*d+j] + h[j*d+i])
			h[i*d+j], h[j*d+i] = a, a
		}
	}
	return h, nil
}

func transpose(a []float64, n int) {
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a[i*n+j], a[j*n+i] = a[j*n+i], a[i*n+j]
		}
	}
}

// Importance returns the diagonal of Qᵀ·diag(v/g²)·Q: the per-column importance of a rotated
// reader whose original importance (mean squared input) was v, when only that diagonal is
// known. For Q = S·(R ⊗ Hₙ), (Q_ij)² = R[b_i][a_j]²/n, so column (a, e) gets
// Σ_b R[b][a]²·mean_c(v_(b,c)/g²_(b,c)).
func (q *Rotation) Importance(v []float32, g []float32) []float32 {
	n, m := q.n, q.m
	mean := make([]float64, m)
	for b := 0; b < m; b++ {
		var s float64
		for c := 0; c < n; c++ {
			i := b*n + c
			x := float64(v[i])
			if g != nil {
				if g[i] == 0 {
					continue
				}
				x /= float64(g[i]) * float64(g[i])
			}
			s += x
		}
		mean[b] = s / float64(n)
	}
	out := make([]float32, q.spec.Dim)
	for a := 0; a < m; a++ {
		var s float64
		for b := 0; b < m; b++ {
			s += q.r[b*m+a] * q.r[b*m+a] * mean[b]
		}
		for e := 0; e < n; e++ {
			out[a*n+e] = float32(s)
		}
	}
	return out
}
