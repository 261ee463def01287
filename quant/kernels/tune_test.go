//go:build linux

package kernels

import (
	"math"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestTuneKernels prints kernel timings measured in thread CPU time (the minimum over
// interleaved rounds), which time slicing on a shared machine does not inflate the way it
// inflates the wall-clock figures of go test -bench. Run with TQ_TUNE=1 go test -run Tune -v.

func threadCPU() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// minCPUNs returns, for each f, its minimum thread-CPU time per call over rounds of reps
// calls, the functions interleaved round by round.
func minCPUNs(rounds, reps int, fs ...func()) []float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	best := make([]float64, len(fs))
	for i := range best {
		best[i] = math.Inf(1)
	}
	for r := 0; r < rounds; r++ {
		for k, f := range fs {
			t0 := threadCPU()
			for i := 0; i < reps; i++ {
				f()
			}
			best[k] = min(best[k], float64(threadCPU()-t0)/float64(reps))
		}
	}
	return best
}

// pureAndAsm times f on the pure-Go and assembly paths, interleaved.
func pureAndAsm(rounds, reps int, f func()) (pure, asm float64) {
	r := minCPUNs(rounds, reps,
		func() { SetPureGo(true); f(); SetPureGo(false) },
		func() { f() })
	return r[0], r[1]
}

func TestTuneKernels(t *testing.T) {
	if os.Getenv("TQ_TUNE") == "" || !HasAsm() {
		t.Skip("set TQ_TUNE=1 (on a machine with the assembly kernels) to print thread-CPU timings")
	}
	const n = 4096
	r := newRNG(21)
	x := randFloats(r, n, false, 1)
	t.Logf("dot products, n = %d (data in L1): pure Go / assembly, thread CPU", n)
	for _, wt := range quantTypes {
		at, _ := ActivationType(wt)
		w := randWeights(r, wt, n/BlockSize(wt), 0.02, false)
		xq := quantizeActs(at, x)
		dot := kernelFor(wt)
		g, a := pureAndAsm(21, 50, func() { benchSink += dot(n, w, xq) })
		t.Logf("  %-5v go %8.0f ns  asm %6.0f ns  speed-up %5.1fx  asm %5.1f GB/s of weights", wt, g, a, g/a, float64(len(w))/a)
	}
	for _, wt := range []Type{F32, F16, BF16} {
		w := floatWeights(wt, randFloats(r, n, false, 1))
		wf := randFloats(r, n, false, 1)
		g, a := pureAndAsm(21, 50, func() {
			switch wt {
			case F32:
				benchSink += DotF32(wf, x)
			case F16:
				benchSink += DotF16F32(w, x)
			case BF16:
				benchSink += DotBF16F32(w, x)
			}
		})
		t.Logf("  %-5v go %8.0f ns  asm %6.0f ns  speed-up %5.1fx  asm %5.1f GFLOP/s", wt, g, a, g/a, 2*n/a)
	}
	for _, at := range []Type{Q8_0, Q8_K} {
		dst := make([]byte, n/BlockSize(at)*BlockBytes(at))
		fn := QuantizeRowQ8_0
		if at == Q8_K {
			fn = QuantizeRowQ8K
		}
		g, a := pureAndAsm(21, 50, func() { fn(dst, x) })
		t.Logf("  quantize %-5v go %8.0f ns  asm %6.0f ns  speed-up %5.1fx", at, g, a, g/a)
	}

	buf := make([]byte, 512<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	bw := float64(len(buf)) / minCPUNs(5, 1, func() { benchSink += float32(sumBytesAVX2(&buf[0], len(buf)) & 1) })[0]
	buf = nil
	t.Logf("read bandwidth (512 MiB, AVX2 sum): %.1f GB/s", bw)
	const rows = 4096
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
		i := 0
		ns := minCPUNs(3, copies, func() {
			w := mats[i%copies]
			i++
			if xq == nil {
				_ = MatVecFloat(wt, out, w, rowBytes, x, 0, rows)
			} else {
				_ = MatVec(wt, out, w, rowBytes, xq, 0, rows)
			}
		})[0]
		gbs := float64(size) / ns
		t.Logf("  mat-vec %-5v 4096x4096: %5.1f GB/s = %3.0f%% of read bandwidth", wt, gbs, 100*gbs/bw)
	}

	for _, size := range []int{512, 1024} {
		a := randFloats(r, size*size, false, 1)
		bm := randFloats(r, size*size, false, 1)
		c := make([]float32, size*size)
		reps := 3
		if size == 1024 {
			reps = 1
		}
		g, as := pureAndAsm(3, reps, func() { _ = Sgemm(size, size, size, a, size, bm, size, c, size, false) })
		fl := 2 * float64(size) * float64(size) * float64(size)
		t.Logf("  sgemm %d: go %.1f GFLOP/s, asm %.1f GFLOP/s (%.0fx)", size, fl/g, fl/as, g/as)
	}
}
