package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

// Run with: go test ./quant/kernels -bench . -run ^$
// Every kernel is measured with the pure-Go (impl=go) and assembly (impl=asm) paths in the
// same run; MB/s counts weight bytes consumed. BenchmarkMemBandwidth is the read-bandwidth
// baseline for the mat-vec numbers.

func benchImpls(b *testing.B, f func(b *testing.B)) {
	b.Run("impl=go", func(b *testing.B) {
		SetPureGo(true)
		defer SetPureGo(false)
		f(b)
	})
	if HasAsm() {
		b.Run("impl=asm", func(b *testing.B) {
			SetPureGo(false)
			f(b)
		})
	}
}

// floatWeights encodes n random floats as t (F32, F16 or BF16) bytes.
func floatWeights(t Type, vals []float32) []byte {
	es := BlockBytes(t)
	w := make([]byte, len(vals)*es)
	for i, v := range vals {
		switch t {
		case F32:
			binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(v))
		case F16:
			binary.LittleEndian.PutUint16(w[2*i:], floatToHalf(v))
		case BF16:
			binary.LittleEndian.PutUint16(w[2*i:], uint16(math.Float32bits(v)>>16))
		}
	}
	return w
}

var benchSink float32

func BenchmarkDot(b *testing.B) {
	const n = 4096
	r := newRNG(21)
	x := randFloats(r, n, false, 1)
	for _, wt := range quantTypes {
		at, _ := ActivationType(wt)
		w := randWeights(r, wt, n/BlockSize(wt), 0.02, false)
		xq := quantizeActs(at, x)
		dot := kernelFor(wt)
		b.Run(wt.String(), func(b *testing.B) {
			benchImpls(b, func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for i := 0; i < b.N; i++ {
					benchSink += dot(n, w, xq)
				}
			})
		})
	}
	for _, wt := range []Type{F32, F16, BF16} {
		w := floatWeights(wt, randFloats(r, n, false, 1))
		wf := randFloats(r, n, false, 1)
		b.Run(wt.String(), func(b *testing.B) {
			benchImpls(b, func(b *testing.B) {
				b.SetBytes(int64(len(w)))
				for i := 0; i < b.N; i++ {
					switch wt {
					case F32:
						benchSink += DotF32(wf, x)
					case F16:
						benchSink += DotF16F32(w, x)
					case BF16:
						benchSink += DotBF16F32(w, x)
					}
				}
			})
		})
	}
}

func BenchmarkQuantize(b *testing.B) {
	const n = 4096
	x := randFloats(newRNG(22), n, true, 1)
	for _, at := range []Type{Q8_0, Q8_K} {
		dst := make([]byte, n/BlockSize(at)*BlockBytes(at))
		fn := QuantizeRowQ8_0
		if at == Q8_K {
			fn = QuantizeRowQ8K
		}
		b.Run(at.String(), func(b *testing.B) {
			benchImpls(b, func(b *testing.B) {
				b.SetBytes(4 * n)
				for i := 0; i < b.N; i++ {
					fn(dst, x)
				}
			})
		})
	}
}

// BenchmarkMatVec: 4096×4096 weights, single thread. Enough copies of the matrix are
// cycled through (≥ 256 MiB in total) that the weights stream from DRAM, not from cache.
func BenchmarkMatVec(b *testing.B) {
	const rows, n = 4096, 4096
	r := newRNG(23)
	x := randFloats(r, n, false, 1)
	out := make([]float32, rows)
	for _, wt := range []Type{Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, F16, BF16, F32} {
		rowBytes, _ := RowBytes(wt, n)
		size := rows * rowBytes
		copies := max(1, (256<<20+size-1)/size)
		mats := make([][]byte, copies)
		if wt == F32 || wt == F16 || wt == BF16 {
			mats[0] = floatWeights(wt, randFloats(r, rows*n, false, 1))
		} else {
			mats[0] = randWeights(r, wt, rows*n/BlockSize(wt), 0.02, false)
		}
		for c := 1; c < copies; c++ {
			mats[c] = append([]byte(nil), mats[0]...)
		}
		xq, _ := QuantizeActivations(wt, nil, x)
		b.Run(fmt.Sprintf("%v/4096x4096", wt), func(b *testing.B) {
			benchImpls(b, func(b *testing.B) {
				b.SetBytes(int64(size))
				for i := 0; i < b.N; i++ {
					w := mats[i%copies]
					var err error
					if xq == nil {
						err = MatVecFloat(wt, out, w, rowBytes, x, 0, rows)
					} else {
						err = MatVec(wt, out, w, rowBytes, xq, 0, rows)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		})
		mats = nil
	}
}

// BenchmarkMemBandwidth is the baseline: a read-only sum over 512 MiB (AVX2 assembly where
// available), one core.
func BenchmarkMemBandwidth(b *testing.B) {
	buf := make([]byte, 512<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	var s uint64
	for i := 0; i < b.N; i++ {
		if HasAsm() {
			s += sumBytesAVX2(&buf[0], len(buf))
		} else {
			for j := 0; j+8 <= len(buf); j += 8 {
				s += binary.LittleEndian.Uint64(buf[j:])
			}
		}
	}
	benchSink += float32(s & 1)
}

func BenchmarkSgemm(b *testing.B) {
	for _, size := range []int{512, 1024} {
		r := newRNG(24)
		a := randFloats(r, size*size, false, 1)
		bm := randFloats(r, size*size, false, 1)
		c := make([]float32, size*size)
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			benchImpls(b, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					if err := Sgemm(size, size, size, a, size, bm, size, c, size, false); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(2*float64(size)*float64(size)*float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		})
	}
}

// BenchmarkFirstNonFinite scans 64 Ki finite values (the check on every tensor read and every
// quantizer input), assembly and pure Go.
func BenchmarkFirstNonFinite(b *testing.B) {
	x := make([]float32, 1<<16)
	for i := range x {
		x[i] = float32(i%1000) - 500
	}
	benchImpls(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for i := 0; i < b.N; i++ {
			if FirstNonFinite(x) != -1 {
				b.Fatal("non-finite")
			}
		}
	})
}
