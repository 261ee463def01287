package kernels_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
)

// Shared helpers of the dot_q0x external tests and benchmarks (any platform).

// q0xCase describes one weight type of dot_q0x.go for the tests.
type q0xCase struct {
	name string
	gt   gguf.GGMLType
	wb   int  // weight block bytes
	q81  bool // Q8_1 activations (else Q8_0)
	fn   string
	dot  func(n int, w, x []byte) float32
}

var q0xCases = []q0xCase{
	{"Q5_0", gguf.TypeQ5_0, 22, false, "ggml_vec_dot_q5_0_q8_0", kernels.DotQ5_0Q8_0},
	{"IQ4_NL", gguf.TypeIQ4_NL, 18, false, "ggml_vec_dot_iq4_nl_q8_0", kernels.DotIQ4_NLQ8_0},
	{"Q4_1", gguf.TypeQ4_1, 20, true, "ggml_vec_dot_q4_1_q8_1", kernels.DotQ4_1Q8_1},
	{"Q5_1", gguf.TypeQ5_1, 24, true, "ggml_vec_dot_q5_1_q8_1", kernels.DotQ5_1Q8_1},
}

// actBytes returns the activation block size of c.
func (c q0xCase) actBytes() int {
	if c.q81 {
		return 36
	}
	return kernels.BlockBytesQ8_0
}

// q0xQuantWeights quantizes rows×n values (normal or Student-t, per-row scale drawn over
// about a factor e^±3) with the quant package (ggml's reference quantizers).
func q0xQuantWeights(tb testing.TB, r *rand.Rand, c q0xCase, rows, n int, heavy bool) []byte {
	tb.Helper()
	src := make([]float32, 0, rows*n)
	for i := 0; i < rows; i++ {
		src = append(src, extFloats(r, n, heavy, 0.02*math.Exp(r.NormFloat64()))...)
	}
	w := make([]byte, rows*n/32*c.wb)
	if err := quant.Quantize(c.gt, w, src, rows, n, nil); err != nil {
		tb.Fatalf("quantizing %s: %v", c.name, err)
	}
	return w
}

// q0xRawWeights returns rows×n weights of c's type with random bytes and random finite
// fp16 scales (and mins).
func q0xRawWeights(r *rand.Rand, c q0xCase, rows, n int) []byte {
	w := make([]byte, rows*n/32*c.wb)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	for b := 0; b < len(w)/c.wb; b++ {
		q0xPutLE16(w[b*c.wb:], extHalf(r, 0.05))
		if c.q81 {
			q0xPutLE16(w[b*c.wb+2:], extHalf(r, 0.5))
		}
	}
	return w
}

// q0xPutLE16 stores v little-endian.
func q0xPutLE16(b []byte, v uint16) { b[0], b[1] = byte(v), byte(v>>8) }
