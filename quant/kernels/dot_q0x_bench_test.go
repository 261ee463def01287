package kernels_test

import (
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
)

var q0xSink float32

// BenchmarkQ0xDot measures one row of n = 4096 for each type: the integer kernel (impl=asm,
// impl=go) against the path it replaces, quant.Dequantize of the row + kernels.DotF32 with
// float activations (impl=deq+f32). MB/s counts weight bytes. Compare ns/op within one run:
//
//	go test ./quant/kernels -run '^$' -bench Q0xDot
func BenchmarkQ0xDot(b *testing.B) {
	const n = 4096
	for _, c := range q0xCases {
		r := extRNG(uint64(c.gt))
		w := q0xQuantWeights(b, r, c, 1, n, false)
		xf := extFloats(r, n, false, 1)
		xq := make([]byte, n/32*c.actBytes())
		if c.q81 {
			quant.QuantizeRowQ8_1(xq, xf)
		} else {
			kernels.QuantizeRowQ8_0(xq, xf)
		}
		wf := make([]float32, n)
		b.Run(c.name+"/impl=deq+f32", func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for i := 0; i < b.N; i++ {
				if err := quant.Dequantize(c.gt, wf, w); err != nil {
					b.Fatal(err)
				}
				q0xSink += kernels.DotF32(wf, xf)
			}
		})
		impls := []string{"go"}
		if kernels.HasAsm() {
			impls = append(impls, "asm")
		}
		for _, impl := range impls {
			b.Run(c.name+"/impl="+impl, func(b *testing.B) {
				kernels.SetPureGo(impl == "go")
				defer kernels.SetPureGo(false)
				b.SetBytes(int64(len(w)))
				for i := 0; i < b.N; i++ {
					q0xSink += c.dot(n, w, xq)
				}
			})
		}
	}
	// The existing Q4_0 kernel as a yardstick for the new ones.
	b.Run("Q4_0/impl=asm", func(b *testing.B) {
		r := extRNG(1)
		w := make([]byte, n/32*kernels.BlockBytesQ4_0)
		if err := quant.Quantize(gguf.TypeQ4_0, w, extFloats(r, n, false, 0.02), 1, n, nil); err != nil {
			b.Fatal(err)
		}
		xq := make([]byte, n/32*kernels.BlockBytesQ8_0)
		kernels.QuantizeRowQ8_0(xq, extFloats(r, n, false, 1))
		b.SetBytes(int64(len(w)))
		for i := 0; i < b.N; i++ {
			q0xSink += kernels.DotQ4_0Q8_0(n, w, xq)
		}
	})
}
