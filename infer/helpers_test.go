package infer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/internal/testmodel"
)

// mapSourceOf converts a built test model into an in-memory Source.
func mapSourceOf(m *testmodel.Model) *MapSource {
	s := NewMapSource()
	for _, kv := range m.Meta {
		s.Metadata[kv.Key] = MetaValue(kv.Value)
	}
	for _, t := range m.Tensors {
		dims := make([]int64, len(t.Dims))
		for i, d := range t.Dims {
			dims[i] = int64(d)
		}
		s.Add(&Tensor{Name: t.Name, Type: t.Type, Dims: dims, Data: t.Data})
	}
	return s
}

func buildSource(t testing.TB, spec testmodel.Spec) *MapSource {
	t.Helper()
	m, err := testmodel.Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	return mapSourceOf(m)
}

func typesAll(t gguf.GGMLType) map[string]gguf.GGMLType {
	return map[string]gguf.GGMLType{"default": t}
}

func randTokens(seed uint64, n, vocab int) []int32 {
	r := rand.New(rand.NewPCG(seed, 99))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(vocab - 1)) // leave out the control token
	}
	return out
}

func softmax64(x []float64) []float64 {
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, v)
	}
	out := make([]float64, len(x))
	var s float64
	for i, v := range x {
		out[i] = math.Exp(v - mx)
		s += out[i]
	}
	for i := range out {
		out[i] /= s
	}
	return out
}

func softmax32(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return softmax64(y)
}

func maxAbsDiff(a, b []float64) float64 {
	var m float64
	for i := range a {
		m = math.Max(m, math.Abs(a[i]-b[i]))
	}
	return m
}

var builtSources = map[string]*MapSource{}

// defaultSource returns a private copy (maps and tensor headers copied, bytes shared) of the
// default test model of arch, built once per test binary.
func defaultSource(t testing.TB, arch string) *MapSource {
	t.Helper()
	base, ok := builtSources[arch]
	if !ok {
		base = buildSource(t, testmodel.Default(arch))
		builtSources[arch] = base
	}
	s := NewMapSource()
	for k, v := range base.Metadata {
		s.Metadata[k] = v
	}
	for k, v := range base.Tensors {
		c := *v
		c.Dims = append([]int64(nil), v.Dims...)
		s.Tensors[k] = &c
	}
	return s
}
