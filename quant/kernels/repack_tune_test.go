//go:build linux

package kernels

import (
	"os"
	"testing"
)

// TestTuneRepack prints thread-CPU timings of the repack-order kernels against the
// vec_dot-order ones (minimum over interleaved rounds; see TestTuneKernels). Run with
// TQ_TUNE=1 go test ./quant/kernels -run TuneRepack -v.
func TestTuneRepack(t *testing.T) {
	if os.Getenv("TQ_TUNE") == "" || !HasAsm() {
		t.Skip("set TQ_TUNE=1 (on a machine with the assembly kernels) to print thread-CPU timings")
	}
	const n = 4096
	t.Logf("single row, n = %d (data in L1), thread CPU ns: vec_dot order / repack order (asm), pure-Go repack", n)
	for _, wt := range repackTypes {
		mats, rowBytes, xq, xRow := repackBenchData(wt, 1, n, 0)
		w, x := mats[0][:rowBytes], xq[:xRow]
		base, rep := kernelFor(t0Layout(wt)), repackDot(wt)
		ts := minCPUNs(30, 2000,
			func() { benchSink += base(n, w, x) },
			func() { benchSink += rep(n, w, x) })
		pure, _ := pureAndAsm(5, 50, func() { benchSink += rep(n, w, x) })
		t.Logf("  %-6s vecdot %7.0f  repack %7.0f  (repack/vecdot %.2f; %.1f GB/s)  pure Go %8.0f",
			repackTypeName(wt), ts[0], ts[1], ts[1]/ts[0], float64(rowBytes)/ts[1], pure)
	}
	const rows = 4096
	t.Logf("mat-vec %dx%d, weights streamed from DRAM, thread CPU ms per activation row: MatVec / MatVecRepack / single-row repack loop / MatMulRepack(4 rows)", rows, n)
	out := make([]float32, 4*rows)
	for _, wt := range repackTypes {
		mats, rowBytes, xq, xRow := repackBenchData(wt, rows, n, 128<<20)
		var i0, i1, i2, i3 int
		next := func(i *int) []byte { *i = (*i + 1) % len(mats); return mats[*i] }
		dot := repackDot(wt)
		ts := minCPUNs(8, 4,
			func() { _ = MatVec(t0Layout(wt), out, next(&i0), rowBytes, xq[:xRow], 0, rows) },
			func() { _ = MatVecRepack(wt, out, next(&i1), rowBytes, xq[:xRow], 0, rows) },
			func() {
				w := next(&i2)
				for r := 0; r < rows; r++ {
					out[r] = dot(n, w[r*rowBytes:(r+1)*rowBytes], xq[:xRow])
				}
			},
			func() { _ = MatMulRepack(wt, out, rows, next(&i3), rowBytes, xq, xRow, 4, 0, rows) })
		ts[3] /= 4
		size := float64(rows * rowBytes)
		t.Logf("  %-6s %5.2f / %5.2f / %5.2f / %5.2f ms  (%.1f / %.1f / %.1f / %.1f GB/s per row; vs MatVec %.2f / %.2f / %.2f)",
			repackTypeName(wt), ts[0]/1e6, ts[1]/1e6, ts[2]/1e6, ts[3]/1e6, size/ts[0], size/ts[1], size/ts[2], size/ts[3],
			ts[1]/ts[0], ts[2]/ts[0], ts[3]/ts[0])
	}
}
