package calib

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/quant/kernels"
)

// genModel writes a fixture model and returns its folder.
func genModel(t testing.TB, o fixtures.Options) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model-"+o.Arch)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := fixtures.Generate(dir, o); err != nil {
		t.Fatal(err)
	}
	return dir
}

// randSeqs returns n sequences of random tokens below vocab with lengths padded to a multiple
// of pad; the valid prefix is shorter than the padded length for some of them.
func randSeqs(seed uint64, n, vocab, minLen, maxLen, pad int) []Sequence {
	rng := rand.New(rand.NewPCG(seed, 99))
	out := make([]Sequence, n)
	for i := range out {
		valid := minLen + rng.IntN(maxLen-minLen+1)
		l := (valid + pad - 1) / pad * pad
		toks := make([]int32, l)
		for j := range toks {
			toks[j] = int32(rng.IntN(vocab))
		}
		for j := valid; j < l; j++ {
			toks[j] = 0 // padding
		}
		out[i] = Sequence{Tokens: toks, Valid: valid}
	}
	return out
}

// fullSource loads every tensor of an HF folder as F32 into an infer.Source.
func fullSource(t testing.TB, dir string) *metaSource { return loadSource(t, dir, false) }

// loadSource reads every tensor of dir into memory as float32 or, with keepBF16, the blocks'
// matrices that the checkpoint stores in BF16 in BF16 (as the calibration forward holds them;
// halfType).
func loadSource(t testing.TB, dir string, keepBF16 bool) *metaSource {
	t.Helper()
	src, err := modelsrc.OpenHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ms := &metaSource{md: src.Metadata(), tensors: map[string]*infer.Tensor{}}
	for _, d := range src.Tensors() {
		buf := make([]float32, elements(d.Shape))
		if err := readTensor(src, d, buf); err != nil {
			t.Fatal(err)
		}
		ms.tensors[d.Name] = &infer.Tensor{Name: d.Name, Type: gguf.TypeF32, Dims: d.Shape, Data: f32Bytes(buf)}
		if keepBF16 && Layer(d.Name) >= 0 && halfType(d) == gguf.TypeBF16 {
			ms.tensors[d.Name] = &infer.Tensor{Name: d.Name, Type: gguf.TypeBF16, Dims: d.Shape, Data: bf16Bytes(buf)}
		}
	}
	return ms
}

func vocabOf(t testing.TB, dir string) int {
	src, err := modelsrc.OpenHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for _, d := range src.Tensors() {
		if d.Name == "token_embd.weight" {
			return int(d.Shape[1])
		}
	}
	t.Fatal("no token_embd.weight")
	return 0
}

// naiveObserver records float64 sums of squares per tensor and matrix straight from the
// observer calls of a full forward pass, for rows before the valid length.
type naiveObserver struct {
	sums   map[string][][]float64
	grams  map[string][][]float64 // expert weights: per expert, X^T X (cols×cols, upper triangle)
	counts map[string][]int64
	maxes  map[string][][]float64
	valid  int
	seen   map[string]int
	nexp   int
	route  map[int][]int32 // per layer: experts of the current batch
	routeK int
	rseen  map[int]int
}

func newNaive(nexp int) *naiveObserver {
	return &naiveObserver{sums: map[string][][]float64{}, grams: map[string][][]float64{}, counts: map[string][]int64{}, maxes: map[string][][]float64{},
		seen: map[string]int{}, nexp: nexp, route: map[int][]int32{}, rseen: map[int]int{}}
}

func (o *naiveObserver) start(valid int) {
	o.valid = valid
	o.seen = map[string]int{}
	o.rseen = map[int]int{}
	o.route = map[int][]int32{}
}

func (o *naiveObserver) acc(name string, e, nmat int, row []float32) {
	if o.sums[name] == nil {
		o.sums[name] = make([][]float64, nmat)
		o.maxes[name] = make([][]float64, nmat)
		o.counts[name] = make([]int64, nmat)
	}
	if o.sums[name][e] == nil {
		o.sums[name][e] = make([]float64, len(row))
		o.maxes[name][e] = make([]float64, len(row))
	}
	for c, v := range row {
		o.sums[name][e][c] += float64(v) * float64(v)
		o.maxes[name][e][c] = math.Max(o.maxes[name][e][c], math.Abs(float64(v)))
	}
	o.counts[name][e]++
}

func (o *naiveObserver) Linear(name string, expert int, x []float32, n, cols int) {
	if expert < 0 {
		off := o.seen[name]
		o.seen[name] += n
		for r := 0; r < n; r++ {
			if off+r < o.valid {
				o.acc(name, 0, 1, x[r*cols:(r+1)*cols])
			}
		}
		return
	}
	// rows of expert e are the tokens routed to it, in order
	l := Layer(name)
	sel := o.route[l]
	off := o.rseen[l]
	j := 0
	for i, e := range sel {
		if int(e) != expert {
			continue
		}
		tok := off + i/o.routeK
		if tok < o.valid {
			row := x[j*cols : (j+1)*cols]
			o.acc(name, expert, o.nexp, row)
			if o.grams[name] == nil {
				o.grams[name] = make([][]float64, o.nexp)
			}
			if o.grams[name][expert] == nil {
				o.grams[name][expert] = make([]float64, cols*cols)
			}
			g := o.grams[name][expert]
			for i, a := range row {
				for jj := i; jj < cols; jj++ {
					g[i*cols+jj] += float64(a) * float64(row[jj])
				}
			}
		}
		j++
	}
	if j != n {
		panic("naive observer: routed row count mismatch")
	}
}

func (o *naiveObserver) Route(layer int, experts []int32, _ []float32, n, k int) {
	if prev, ok := o.route[layer]; ok && len(prev) > 0 {
		o.rseen[layer] += len(prev) / k
	}
	o.route[layer] = append([]int32(nil), experts[:n*k]...)
	o.routeK = k
}

func calibrate(t testing.TB, dir string, o Options) *Result {
	t.Helper()
	if o.OutDir == "" {
		o.OutDir = filepath.Join(t.TempDir(), "out")
	}
	res, err := Calibrate(context.Background(), dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// loadF32 loads src as a full-precision model (f32 KV cache) closed at the end of the test.
func loadF32(t testing.TB, src infer.Source, ctx int) *infer.Model {
	t.Helper()
	m, err := infer.Load(src, infer.Options{Threads: 2, CtxSize: ctx, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// withTensor16 returns a copy of ms whose tensor name holds the values v rounded to bf16.
func withTensor16(ms *metaSource, name string, v []float32) *metaSource {
	out := withTensor(ms, name, v)
	t := out.tensors[name]
	t.Type, t.Data = gguf.TypeBF16, bf16Bytes(v)
	return out
}

// withTensor returns a copy of ms whose tensor name holds the f32 values v.
func withTensor(ms *metaSource, name string, v []float32) *metaSource {
	out := &metaSource{md: ms.md, tensors: make(map[string]*infer.Tensor, len(ms.tensors))}
	for k, t := range ms.tensors {
		out.tensors[k] = t
	}
	t := ms.tensors[name]
	out.tensors[name] = &infer.Tensor{Name: name, Type: gguf.TypeF32, Dims: t.Dims, Data: f32Bytes(v)}
	return out
}

// eachMatrix calls f for every matrix e of the nmat matrices (rows × cols) of float32 tensor
// tt, with its values x and the slice y of out (as long as tt) at the same place.
func eachMatrix(tt *infer.Tensor, out []float32, f func(e, nmat, rows, cols int, x, y []float32)) {
	src := bytesAsF32(tt.Data)
	cols, rows := int(tt.Dims[0]), int(tt.Dims[1])
	nmat := 1
	if len(tt.Dims) > 2 {
		nmat = int(tt.Dims[2])
	}
	for e := 0; e < nmat; e++ {
		f(e, nmat, rows, cols, src[e*rows*cols:(e+1)*rows*cols], out[e*rows*cols:(e+1)*rows*cols])
	}
}

// bf16Bytes is v rounded to bf16 (ties to even), as tensor data.
func bf16Bytes(v []float32) []byte {
	b := make([]byte, 2*len(v))
	kernels.RoundBF16Slice(b, v)
	return b
}
