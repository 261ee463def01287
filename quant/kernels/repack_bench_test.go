package kernels

import (
	"fmt"
	"testing"
)

// Repack-order kernels against the vec_dot-order ones, in the same run:
//
//	go test ./quant/kernels -run '^$' -bench Repack
//
// MB/s counts weight bytes. IQ4_NL has no vec_dot-order kernel here; its baseline is the
// Q4_0 kernel on the same bytes (same block size and layout). "repack" is MatVecRepack (the
// multi-row kernels), "repack-1row" a loop of single-row Dot…Repack calls, "repack-x4" is MatMulRepack
// with 4 activation rows: MB/s counts the weights once per call (4 outputs per weight row),
// and ns/token is the time per activation row.

// repackBenchData returns copies of a rows×n weight matrix of type t (≥ 256 MiB in all, so
// that a mat-vec streams from DRAM) and 4 activation rows quantized for t.
func repackBenchData(t Type, rows, n int, minBytes int) (mats [][]byte, rowBytes int, xq []byte, xRow int) {
	r := newRNG(50)
	bs := 32
	if t == Q4_K {
		bs = 256
	}
	rowBytes = n / bs * BlockBytes(t0Layout(t))
	size := rows * rowBytes
	copies := max(1, (minBytes+size-1)/size)
	mats = make([][]byte, copies)
	mats[0] = repackWeights(r, t, rows*n/bs, 0.02, false)
	for c := 1; c < copies; c++ {
		mats[c] = append([]byte(nil), mats[0]...)
	}
	at := repackActType(t)
	xRow = n / BlockSize(at) * BlockBytes(at)
	for k := 0; k < 4; k++ {
		xq = append(xq, quantizeActs(at, randFloats(r, n, false, 1))...)
	}
	return mats, rowBytes, xq, xRow
}

// t0Layout maps IQ4_NL to Q4_0, whose block layout and size it shares.
func t0Layout(t Type) Type {
	if t == IQ4_NL {
		return Q4_0
	}
	return t
}

func BenchmarkRepackMatVec(b *testing.B) {
	const rows, n = 4096, 4096
	out := make([]float32, 4*rows)
	for _, wt := range repackTypes {
		mats, rowBytes, xq, xRow := repackBenchData(wt, rows, n, 256<<20)
		size := int64(rows * rowBytes)
		name := fmt.Sprintf("%s/4096x4096", repackTypeName(wt))
		b.Run(name+"/vecdot", func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				if err := MatVec(t0Layout(wt), out, mats[i%len(mats)], rowBytes, xq[:xRow], 0, rows); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/repack", func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				if err := MatVecRepack(wt, out, mats[i%len(mats)], rowBytes, xq[:xRow], 0, rows); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, form := range []string{"gather", "loads"} { // the Q4_0/IQ4_NL VNNI gemv's scale reads (scaleLoads)
			b.Run(name+"/repack-scales-"+form, func(b *testing.B) {
				if !useVNNI() || (wt != Q4_0 && wt != IQ4_NL) {
					b.Skip("no VNNI, or a type whose gemv has one form")
				}
				scaleLoads.Store(form == "loads")
				defer scaleLoads.Store(slowGather)
				b.SetBytes(size)
				for i := 0; i < b.N; i++ {
					if err := MatVecRepack(wt, out, mats[i%len(mats)], rowBytes, xq[:xRow], 0, rows); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		b.Run(name+"/repack-avx2", func(b *testing.B) {
			if !useVNNI() {
				b.Skip("no VNNI: repack is the AVX2 kernel")
			}
			vnniOff.Store(true)
			defer vnniOff.Store(false)
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				if err := MatVecRepack(wt, out, mats[i%len(mats)], rowBytes, xq[:xRow], 0, rows); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/repack-1row", func(b *testing.B) {
			dot := repackDot(wt)
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				w := mats[i%len(mats)]
				for r := 0; r < rows; r++ {
					out[r] = dot(n, w[r*rowBytes:(r+1)*rowBytes], xq[:xRow])
				}
			}
		})
		b.Run(name+"/repack-x4", func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				if err := MatMulRepack(wt, out, rows, mats[i%len(mats)], rowBytes, xq, xRow, 4, 0, rows); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(4*b.N), "ns/token")
		})
	}
}

// BenchmarkRepackDot: one row of 4096 elements, data in L1.
func BenchmarkRepackDot(b *testing.B) {
	const n = 4096
	for _, wt := range repackTypes {
		mats, rowBytes, xq, xRow := repackBenchData(wt, 1, n, 0)
		w, x := mats[0][:rowBytes], xq[:xRow]
		base := kernelFor(t0Layout(wt))
		rep := repackDot(wt)
		b.Run(repackTypeName(wt)+"/vecdot", func(b *testing.B) {
			benchImpls(b, func(b *testing.B) {
				b.SetBytes(int64(rowBytes))
				for i := 0; i < b.N; i++ {
					benchSink += base(n, w, x)
				}
			})
		})
		b.Run(repackTypeName(wt)+"/repack", func(b *testing.B) {
			benchImpls(b, func(b *testing.B) {
				b.SetBytes(int64(rowBytes))
				for i := 0; i < b.N; i++ {
					benchSink += rep(n, w, x)
				}
			})
		})
	}
}
