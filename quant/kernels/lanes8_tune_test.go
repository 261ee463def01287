//go:build linux

package kernels

import (
	"os"
	"testing"
)

// TestTuneLanes8 prints SgemmLanes8 and its fp16-B variant against Sgemm (assembly, same
// data, interleaved rounds, minimum thread-CPU time per call; see tune_test.go), the
// L1-resident speed of one 3×4 tile, and DotLanes8 against DotF32. Run with
// TQ_TUNE=1 go test ./quant/kernels -run TuneLanes8 -v.
func TestTuneLanes8(t *testing.T) {
	if os.Getenv("TQ_TUNE") == "" || !HasAsm() {
		t.Skip("set TQ_TUNE=1 (on a machine with the assembly kernels) to print thread-CPU timings")
	}
	r := newRNG(33)
	for _, sh := range []struct {
		name    string
		m, n, k int
		reps    int
	}{
		{"(512×4096)·(4096×64), A = X, B = W", 512, 64, 4096, 3},
		{"(64×4096)·(4096×512), A = W, B = X", 64, 512, 4096, 3},
		{"K·Q m = n_kv 512, n = 32, k = 128", 512, 32, 128, 50},
		{"K·Q m = 32, n = n_kv 512, k = 128", 32, 512, 128, 50},
	} {
		a := randFloats(r, sh.m*sh.k, false, 1)
		vals := randFloats(r, sh.n*sh.k, false, 1)
		bf, bh := newLanes8B(l8F32, vals), newLanes8B(l8F16, vals)
		c := make([]float32, sh.m*sh.n)
		ns := minCPUNs(7, sh.reps,
			func() { _ = Sgemm(sh.m, sh.n, sh.k, a, sh.k, bf.f32, sh.k, c, sh.n, false) },
			func() { _ = bf.gemm(sh.m, sh.n, sh.k, a, sh.k, sh.k, c, sh.n) },
			func() { _ = bh.gemm(sh.m, sh.n, sh.k, a, sh.k, sh.k, c, sh.n) })
		fl := 2 * float64(sh.m) * float64(sh.n) * float64(sh.k)
		t.Logf("%-36s Sgemm %5.1f  Lanes8 %5.1f (%.2f×)  Lanes8F16 %5.1f GFLOP/s (%.2f×)",
			sh.name, fl/ns[0], fl/ns[1], ns[0]/ns[1], fl/ns[2], ns[0]/ns[2])
	}
	// One 3×4 tile with its 7 rows in L1: the micro-kernel's ceiling.
	{
		const k = 1024
		a, b := randFloats(r, 3*k, false, 1), randFloats(r, 4*k, false, 1)
		var c [12]float32
		ns := minCPUNs(7, 2000, func() { _ = SgemmLanes8(3, 4, k, a, k, b, k, c[:], 4) })
		t.Logf("one 3×4 tile, k = %d (L1): Lanes8 %.1f GFLOP/s", k, 24*k/ns[0])
	}
	x, y := randFloats(r, 4096, false, 1), randFloats(r, 4096, false, 1)
	ns := minCPUNs(21, 200, func() { benchSink += DotF32(x, y) }, func() { benchSink += DotLanes8(x, y) })
	t.Logf("dot n = 4096 (L1): DotF32 %.0f ns, DotLanes8 %.0f ns (%.2f×)", ns[0], ns[1], ns[0]/ns[1])
}
