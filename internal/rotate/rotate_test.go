package rotate

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
)

// explicitQ returns Q (d×d, row-major) by rotating the unit vectors: row i is e_i·Q.
func explicitQ(q *Rotation) []float64 {
	d := q.Dim()
	out := make([]float64, d*d)
	for i := 0; i < d; i++ {
		row := out[i*d : (i+1)*d]
		row[i] = 1
		q.Apply64(row)
	}
	return out
}

// TestRotationOrthogonal checks Q·Qᵀ = I (float64, 1e-12) for power-of-two widths and widths
// with an odd factor, that Apply (float32 in/out) matches Apply64 to float32 rounding, and that
// the same spec gives the same Q.
func TestRotationOrthogonal(t *testing.T) {
	for _, d := range []int{2, 8, 40, 96, 256, 384} {
		q, err := New(Spec{Dim: d, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		Q := explicitQ(q)
		for i := 0; i < d; i++ {
			for j := 0; j < d; j++ {
				var s float64
				for k := 0; k < d; k++ {
					s += Q[i*d+k] * Q[j*d+k]
				}
				want := 0.0
				if i == j {
					want = 1
				}
				if math.Abs(s-want) > 1e-12 {
					t.Fatalf("d=%d: (Q·Qᵀ)[%d][%d] = %v", d, i, j, s)
				}
			}
		}
		rng := rand.New(rand.NewPCG(1, uint64(d)))
		v := make([]float32, d)
		w := make([]float64, d)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * math.Exp(3*rng.NormFloat64())) // heavy-tailed
			w[i] = float64(v[i])
		}
		q.Apply(v, nil)
		q.Apply64(w)
		for i := range v {
			if math.Abs(float64(v[i])-w[i]) > 1e-6*math.Abs(w[i])+1e-30 {
				t.Fatalf("d=%d: Apply %v, Apply64 %v", d, v[i], w[i])
			}
		}
		q2, _ := New(Spec{Dim: d, Seed: 7})
		Q2 := explicitQ(q2)
		for i := range Q {
			if Q[i] != Q2[i] {
				t.Fatalf("d=%d: the same spec gave a different Q", d)
			}
		}
	}
	if _, err := New(Spec{Dim: 257 * 2, Seed: 1}); err == nil {
		t.Error("odd factor 257 accepted")
	}
}

// TestGramAndImportance checks Gram against Qᵀ·diag(1/g)·H·diag(1/g)·Q computed with the
// explicit Q in float64 (relative 1e-12 of the largest entry), and Importance against the
// diagonal of Gram for a diagonal H.
func TestGramAndImportance(t *testing.T) {
	for _, d := range []int{16, 48} {
		q, _ := New(Spec{Dim: d, Seed: 3})
		Q := explicitQ(q)
		rng := rand.New(rand.NewPCG(2, 2))
		x := make([]float64, 3*d*d)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		h := make([]float64, d*d) // XᵀX: symmetric positive semi-definite
		for i := 0; i < d; i++ {
			for j := 0; j < d; j++ {
				for r := 0; r < 3*d; r++ {
					h[i*d+j] += x[r*d+i] * x[r*d+j]
				}
			}
		}
		g := make([]float32, d)
		for i := range g {
			g[i] = float32(0.5 + rng.Float64())
		}
		g[3] = 0 // a dead channel
		want := make([]float64, d*d)
		var mx float64
		for a := 0; a < d; a++ {
			for b := 0; b < d; b++ {
				var s float64
				for i := 0; i < d; i++ {
					if g[i] == 0 {
						continue
					}
					for j := 0; j < d; j++ {
						if g[j] == 0 {
							continue
						}
						s += Q[i*d+a] * h[i*d+j] / float64(g[i]) / float64(g[j]) * Q[j*d+b]
					}
				}
				want[a*d+b] = s
				mx = max(mx, math.Abs(s))
			}
		}
		got, err := q.Gram(append([]float64(nil), h...), g)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-12*mx {
				t.Fatalf("d=%d: Gram[%d] = %v, want %v", d, i, got[i], want[i])
			}
		}
		// Importance: the diagonal of Gram of diag(v)
		v := make([]float32, d)
		dh := make([]float64, d*d)
		for i := range v {
			v[i] = float32(rng.ExpFloat64())
			dh[i*d+i] = float64(v[i])
		}
		gd, _ := q.Gram(dh, g)
		imp := q.Importance(v, g)
		for i := range imp {
			if math.Abs(float64(imp[i])-gd[i*d+i]) > 1e-6*gd[i*d+i] {
				t.Fatalf("d=%d: Importance[%d] = %v, diag of Gram %v", d, i, imp[i], gd[i*d+i])
			}
		}
	}
}

func genModel(t *testing.T, o fixtures.Options) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fixtures.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openRotated generates a model with options o and opens it plain and rotated with seed (the
// source is closed when the test ends).
func openRotated(t *testing.T, o fixtures.Options, seed uint64) (*modelsrc.HFSource, *Source) {
	t.Helper()
	src, err := modelsrc.OpenHF(genModel(t, o))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	rs, err := Wrap(src, seed)
	if err != nil {
		t.Fatal(err)
	}
	return src, rs
}

func f32Bytes(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
}

// load builds an F32 infer model from a tensor source.
func load(t *testing.T, src modelsrc.TensorSource) *infer.Model {
	t.Helper()
	ms := infer.NewMapSource()
	for _, kv := range src.Metadata() {
		ms.Metadata[kv.Key] = infer.MetaValue(kv.Value)
	}
	for _, d := range src.Tensors() {
		n := int64(1)
		for _, v := range d.Shape {
			n *= v
		}
		buf := make([]float32, n)
		if err := src.ReadFloat32(d.Name, buf); err != nil {
			t.Fatal(err)
		}
		ms.Tensors[d.Name] = &infer.Tensor{Name: d.Name, Type: gguf.TypeF32, Dims: d.Shape, Data: f32Bytes(buf)}
	}
	m, err := infer.Load(ms, infer.Options{Threads: 2, CtxSize: 128, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRotatedModelSameFunction converts generated models of every supported architecture
// (norm weights random around 1, or around 0 for Qwen3.5's (1 + w) norms) with and without the
// rotation and runs both in float32: the rotation must not change the function. The logits
// agree to 2e-4 of their spread (float32 rounding of a rotated residual, through every block);
// a model whose norm weight were not folded, or a writer not rotated, differs by order 1.
func TestRotatedModelSameFunction(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe"} {
		t.Run(arch, func(t *testing.T) {
			o := fixtures.Preset(arch)
			if o.Hybrid != nil {
				o.Hybrid.MTPLayers = 0
			}
			src, rs := openRotated(t, o, 5)
			if v, err := rs.Metadata().GetString(MetaKey); err != nil || v != (Spec{Dim: rs.Rotation().Dim(), Seed: 5}).String() {
				t.Fatalf("metadata %q %v", v, err)
			}
			changed := 0
			for _, d := range src.Tensors() {
				if k, _ := rs.Plan(d.Name); k != Pass {
					changed++
				}
			}
			if changed < 5 {
				t.Fatalf("only %d tensors rotated", changed)
			}
			a, b := load(t, src), load(t, rs)
			defer a.Close()
			defer b.Close()
			toks := make([]int32, 40)
			rng := rand.New(rand.NewPCG(4, 4))
			vocab := a.Config().NVocab
			for i := range toks {
				toks[i] = int32(rng.IntN(vocab))
			}
			sa, _ := a.NewSession()
			sb, _ := b.NewSession()
			la, err := sa.Eval(toks, infer.LogitsAll)
			if err != nil {
				t.Fatal(err)
			}
			lb, err := sb.Eval(toks, infer.LogitsAll)
			if err != nil {
				t.Fatal(err)
			}
			var spread, worst float64
			for p := range la {
				lo, hi := math.Inf(1), math.Inf(-1)
				for _, v := range la[p] {
					lo, hi = min(lo, float64(v)), max(hi, float64(v))
				}
				spread = max(spread, hi-lo)
				for i := range la[p] {
					worst = max(worst, math.Abs(float64(la[p][i]-lb[p][i])))
				}
			}
			if worst > 2e-4*spread {
				t.Fatalf("rotated logits differ by %v (spread %v)", worst, spread)
			}
			t.Logf("max |Δlogit| %.2e of spread %.2f", worst, spread)
		})
	}
}

// TestWrapRefuses: tied embeddings and layers of unknown role (Qwen3.5 multi-token prediction)
// are refused with ErrNotApplicable, naming the reason.
func TestWrapRefuses(t *testing.T) {
	o := fixtures.Preset("llama")
	o.TieEmbeddings = true
	for _, tc := range []struct {
		o    fixtures.Options
		want string
	}{{o, "tied"}, {fixtures.Preset("qwen35moe"), "nextn"}} {
		dir := genModel(t, tc.o)
		src, err := modelsrc.OpenHF(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Wrap(src, 1)
		src.Close()
		if !errors.Is(err, ErrNotApplicable) || !contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.o.Arch, err)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// FuzzParseSpec: the metadata value parser never panics, and what it accepts prints back to
// an equivalent spec.
func FuzzParseSpec(f *testing.F) {
	f.Add("hadamard-v1 dim=256 seed=1")
	f.Add("hadamard-v1 dim=-1 seed=x")
	f.Fuzz(func(t *testing.T, v string) {
		s, err := ParseSpec(v)
		if err != nil {
			return
		}
		if s2, err := ParseSpec(s.String()); err != nil || s2 != s {
			t.Fatalf("%q -> %+v -> %q", v, s, s.String())
		}
	})
}

// TestReadRowsChunks: reading any tensor in chunks of 7 rows (crossing the matrices of stacked
// experts, and the writers' whole-matrix cache) gives bit for bit what one whole read gives.
func TestReadRowsChunks(t *testing.T) {
	src, rs := openRotated(t, fixtures.Preset("qwen3moe"), 9)
	for _, d := range rs.Tensors() {
		rows := int64(1)
		for _, v := range d.Shape[1:] {
			rows *= v
		}
		whole := make([]float32, rows*d.Shape[0])
		if err := rs.ReadFloat32(d.Name, whole); err != nil {
			t.Fatal(err)
		}
		part := make([]float32, 7*d.Shape[0])
		for r := int64(0); r < rows; r += 7 {
			n := min(7, rows-r)
			if err := rs.ReadRows(d.Name, r, n, part); err != nil {
				t.Fatal(err)
			}
			for i, v := range part[:n*d.Shape[0]] {
				if math.Float32bits(v) != math.Float32bits(whole[r*d.Shape[0]+int64(i)]) {
					t.Fatalf("%s row %d: chunked read differs", d.Name, r+int64(i)/d.Shape[0])
				}
			}
		}
		if err := rs.ReadRows(d.Name, rows-1, 2, make([]float32, 2*d.Shape[0])); err == nil {
			t.Fatalf("%s: rows past the end accepted", d.Name)
		}
	}
	// concurrent readers of one writer matrix (a fresh source: nothing cached) share one
	// rotation and all see the whole read's values
	rs2, err := Wrap(src, 9)
	if err != nil {
		t.Fatal(err)
	}
	const name = "blk.0.ffn_down_exps.weight"
	var desc modelsrc.TensorDesc
	for _, d := range rs2.Tensors() {
		if d.Name == name {
			desc = d
		}
	}
	cols, rows := desc.Shape[0], desc.Shape[1]
	want := make([]float32, rows*cols)
	if err := rs.ReadRows(name, 0, rows, want); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r0 := int64(g) * rows / 8
			n := rows/8 + 1
			n = min(n, rows-r0)
			got := make([]float32, n*cols)
			if err := rs2.ReadRows(name, r0, n, got); err != nil {
				errs[g] = err
				return
			}
			for i, v := range got {
				if v != want[r0*cols+int64(i)] {
					errs[g] = errors.New("concurrent read differs")
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
