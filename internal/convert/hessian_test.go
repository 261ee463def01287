package convert

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/quant"
)

// fakeHessians gives every attention projection and FFN input a fixed random Gram matrix
// (AᵀA/k + a diagonal: symmetric positive definite) and nothing to the other tensors.
type fakeHessians struct {
	grams map[int][]float64
	calls atomic.Int64
}

func (f *fakeHessians) Gram(tensor string, m int) ([]float64, int, bool, error) {
	f.calls.Add(1)
	for _, s := range []string{"attn_q.", "attn_k.", "attn_v.", "ffn_gate_exps.", "ffn_up_exps."} {
		if bytes.Contains([]byte(tensor), []byte(s)) {
			for n, g := range f.grams {
				return g, n, true, nil
			}
		}
	}
	return nil, 0, false, nil
}

// attnQ plans a turboquant conversion of dir and returns the row length of its attn_q weights
// and how many blocks have one.
func attnQ(t *testing.T, dir string) (cols int64, layers int) {
	t.Helper()
	base, err := PlanConvert(dir, Options{Types: TypeOptions{TurboQuant: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range base.Tensors {
		if strings.HasSuffix(pt.Name, ".attn_q.weight") {
			cols = pt.Shape[0]
			layers++
		}
	}
	return cols, layers
}

// fileAndSource returns tensor name's bytes in the converted file m, its type and the
// checkpoint's weights for it.
func fileAndSource(t *testing.T, m *gguf.Model, hf *modelsrc.HFSource, name string) ([]byte, gguf.GGMLType, []float32) {
	t.Helper()
	ti, ok := m.Tensor(name)
	if !ok {
		t.Fatalf("%s missing", name)
	}
	got, err := m.TensorData(name)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, ti.NumElements())
	if err := hf.ReadFloat32(name, w); err != nil {
		t.Fatal(err)
	}
	return got, ti.Type, w
}

// gptqBytes is what convert must write for rows w (cols each) with Gram matrix g.
func gptqBytes(t *testing.T, typ gguf.GGMLType, w []float32, cols int, g []float64, nbytes int) []byte {
	t.Helper()
	h, err := quant.NewHessianFromGram(cols, g)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, nbytes)
	if err := quant.QuantizeGPTQ(typ, b, w, len(w)/cols, cols, h, &quant.GPTQOptions{Threads: 1, Refine: true, ActOrder: true}); err != nil {
		t.Fatal(err)
	}
	return b
}

func spdGram(n int, seed uint64) []float64 {
	r := rand.New(rand.NewPCG(seed, 1))
	k := 2 * n
	a := make([]float64, k*n)
	for i := range a {
		a[i] = r.NormFloat64()
	}
	for i := 0; i < k; i++ { // correlated columns and an outlier channel
		a[i*n+1] += 0.8 * a[i*n]
		a[i*n+3] *= 6
	}
	g := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for r := 0; r < k; r++ {
				s += a[r*n+i] * a[r*n+j]
			}
			g[i*n+j] = s / float64(k)
		}
	}
	return g
}

// With a HessianSource, convert writes exactly the bytes quant.QuantizeGPTQ gives for the
// tensors that have a Gram matrix (so a calibration that measures with the same call measures
// the file), marks them in the plan, and leaves the others to the plain search.
func TestConvertUsesHessians(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen3moe"))
	cols, _ := attnQ(t, dir)
	src := &fakeHessians{grams: map[int][]float64{int(cols): spdGram(int(cols), 7)}}
	out := filepath.Join(t.TempDir(), "h.gguf")
	res, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{TurboQuant: true, Hessians: src}})
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, pt := range res.Plan.Tensors {
		if pt.Hessian {
			marked++
		}
	}
	if marked == 0 || src.calls.Load() == 0 {
		t.Fatalf("no tensor used the Hessians (%d marked, %d calls)", marked, src.calls.Load())
	}
	m, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	hf, err := modelsrc.OpenHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	for _, name := range []string{"blk.0.attn_q.weight", "blk.1.attn_v.weight"} {
		got, typ, w := fileAndSource(t, m, hf, name)
		if !bytes.Equal(got, gptqBytes(t, typ, w, int(cols), src.grams[int(cols)], len(got))) {
			t.Errorf("%s (%s): the file's bytes differ from quant.QuantizeGPTQ's", name, typ)
		}
	}
}

// keyedHessians is fakeHessians that names the attention input of each block, shared by its
// q/k/v projections (the experts' matrices stay unnamed).
type keyedHessians struct{ *fakeHessians }

func (k keyedHessians) GramKey(tensor string, m int) string {
	for _, s := range []string{"attn_q.", "attn_k.", "attn_v."} {
		if i := strings.Index(tensor, s); i >= 0 {
			return tensor[:i] + "attn_in"
		}
	}
	return ""
}

// Tensors whose matrices a GramKeyer source names alike share one Hessian: the q/k/v of a
// block ask the source once instead of three times, the file's bytes do not change, and
// nothing stays pooled after the conversion.
func TestConvertSharesHessians(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen3"))
	cols, layers := attnQ(t, dir)
	g := spdGram(int(cols), 11)
	plain := &fakeHessians{grams: map[int][]float64{int(cols): g}}
	keyed := keyedHessians{&fakeHessians{grams: map[int][]float64{int(cols): g}}}
	var files [2][]byte
	for i, src := range []HessianSource{plain, keyed} {
		out := filepath.Join(t.TempDir(), "h.gguf")
		res, err := Convert(context.Background(), dir, out, Options{Output: OutputOptions{Threads: 2}, Types: TypeOptions{TurboQuant: true, Hessians: src}})
		if err != nil {
			t.Fatal(err)
		}
		// every shared matrix is released once the last tensor reading it is written
		if hp := res.Plan.hessPool; len(hp.hs) != 0 || len(hp.refs) != 0 {
			t.Errorf("source %d: the pool still holds %d matrices, %d keys referenced", i, len(hp.hs), len(hp.refs))
		}
		if files[i], err = os.ReadFile(out); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Error("sharing the Hessians changed the file")
	}
	if p, k := plain.calls.Load(), keyed.calls.Load(); layers == 0 || p != k+int64(2*layers) {
		t.Errorf("%d Gram calls without keys, %d with them; want %d fewer (%d blocks)", p, k, 2*layers, layers)
	}
}
