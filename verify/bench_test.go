package verify

import (
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/verify/reflogits"
)

// Per-position costs at Qwen3's vocabulary size (151936). The baseline is nll (one softmax
// pass); compareFull does two softmaxes and the KLD sum, compareTopK one softmax plus the rest
// mass, NewRecord (saving a reference) a softmax, a top-k heap and the rest mass.
const benchVocab = 151936

func benchRows() ([]float32, []float32) {
	r := rand.New(rand.NewPCG(1, 2))
	base := zipfLogits(r, benchVocab, 1.3)
	cur := make([]float32, len(base))
	for i := range cur {
		cur[i] = base[i] + float32(0.1*r.NormFloat64())
	}
	return base, cur
}

func BenchmarkNLL(b *testing.B) {
	_, cur := benchRows()
	for b.Loop() {
		nll(cur, 17)
	}
}

func BenchmarkCompareFull(b *testing.B) {
	base, cur := benchRows()
	scratch := make([]float64, benchVocab)
	for b.Loop() {
		compareFull(base, cur, 17, scratch)
	}
}

func BenchmarkCompareTopK128(b *testing.B) {
	base, cur := benchRows()
	rec := reflogits.NewRecord(base, 17, 128)
	mark := make([]bool, benchVocab)
	for b.Loop() {
		compareTopK(&rec, cur, 17, mark)
	}
}

func BenchmarkNewRecord128(b *testing.B) {
	base, _ := benchRows()
	for b.Loop() {
		reflogits.NewRecord(base, 17, 128)
	}
}
