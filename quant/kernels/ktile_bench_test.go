//go:build linux

package kernels

import (
	"fmt"
	"os"
	"testing"
)

// Benchmarks of MatMulK against the product it replaces, the type's Dot kernel per (row, token)
// with tokens in tiles of 32 (infer's matmul for these types before MatMulK).
// go test -bench MatMulK gives wall-clock figures; TQ_TUNE=1 go test -run KTileTune -v prints
// thread-CPU minima over interleaved rounds as ratios (stable on a shared machine).

type ktBenchCase struct {
	wt         Type
	rows, n, T int
	w, xq      []byte
	y          []float32
	rowBytes   int
	xRow       int
}

func newKtBenchCase(wt Type, rows, n, T int) *ktBenchCase {
	r := newRNG(uint64(rows*7 + n + T + int(wt)))
	c := &ktBenchCase{wt: wt, rows: rows, n: n, T: T}
	c.rowBytes = n / QK_K * ktBlockBytes(wt)
	c.xRow = n / QK_K * BlockBytesQ8_K
	c.w = ktBenchWeights(r, wt, rows*n/QK_K)
	c.xq = make([]byte, T*c.xRow)
	for k := 0; k < T; k++ {
		copy(c.xq[k*c.xRow:], quantizeActs(Q8_K, randFloats(r, n, k%2 == 1, 1)))
	}
	c.y = make([]float32, T*rows)
	return c
}

func (c *ktBenchCase) tile() {
	if err := MatMulK(c.wt, c.y, c.rows, c.w, c.rowBytes, c.xq, c.xRow, c.T, 0, c.rows); err != nil {
		panic(err)
	}
}

func (c *ktBenchCase) dotLoop() {
	dot := ktBenchDot(c.wt)
	for t0 := 0; t0 < c.T; t0 += 32 {
		t1 := min(c.T, t0+32)
		for r := 0; r < c.rows; r++ {
			wr := c.w[r*c.rowBytes : (r+1)*c.rowBytes]
			for t := t0; t < t1; t++ {
				c.y[t*c.rows+r] = dot(c.n, wr, c.xq[t*c.xRow:(t+1)*c.xRow])
			}
		}
	}
}

var ktBenchShapes = [][3]int{{2048, 2048, 1}, {5632, 2048, 1}, {2048, 2048, 128}, {5632, 2048, 128}}

var ktBenchTypes = []Type{Q6_K, Q5_K, Q4_K, Q2_K, Q3_K, IQ4_XS}

// ktTypeName names a MatMulK weight type (Type.String does not know Q2_K, Q3_K, IQ4_XS).
func ktTypeName(wt Type) string {
	switch wt {
	case Q2_K:
		return "q2_K"
	case Q3_K:
		return "q3_K"
	case IQ4_XS:
		return "iq4_xs"
	}
	return wt.String()
}

// ktBenchDot returns the one-row Dot kernel of weight type wt.
func ktBenchDot(wt Type) func(n int, w, x []byte) float32 {
	switch wt {
	case Q2_K:
		return DotQ2_KQ8K
	case Q3_K:
		return DotQ3_KQ8K
	case IQ4_XS:
		return DotIQ4_XSQ8K
	}
	return kernelFor(wt)
}

func BenchmarkMatMulK(b *testing.B) {
	if !HasAsm() {
		b.Skip("no assembly kernels on this machine/build")
	}
	for _, wt := range ktBenchTypes {
		for _, sh := range ktBenchShapes {
			c := newKtBenchCase(wt, sh[0], sh[1], sh[2])
			for _, m := range []struct {
				name string
				f    func()
			}{{"tile", c.tile}, {"dotloop", c.dotLoop}} {
				b.Run(fmt.Sprintf("%s/%dx%d/T=%d/%s", ktTypeName(wt), sh[0], sh[1], sh[2], m.name), func(b *testing.B) {
					b.SetBytes(int64(len(c.w)))
					for i := 0; i < b.N; i++ {
						m.f()
					}
				})
			}
		}
	}
}

// TestKTileTune prints MatMulK's thread-CPU time against the per-(row, token) Dot loop,
// measured interleaved in the same run.
func TestKTileTune(t *testing.T) {
	if os.Getenv("TQ_TUNE") == "" || !HasAsm() {
		t.Skip("set TQ_TUNE=1 (on a machine with the assembly kernels) to print thread-CPU timings")
	}
	for _, wt := range ktBenchTypes {
		for _, sh := range ktBenchShapes {
			c := newKtBenchCase(wt, sh[0], sh[1], sh[2])
			reps := 20
			if c.T > 1 {
				reps = 1
			}
			ns := minCPUNs(7, reps, c.tile, c.dotLoop)
			t.Logf("%-6s %5d×%d T=%3d: tile %8.3f ms (%.2f ns per super-block pair); dotloop/tile %.2f×",
				ktTypeName(wt), sh[0], sh[1], sh[2], ns[0]/1e6, ns[0]/float64(sh[0]*sh[1]/QK_K*sh[2]), ns[1]/ns[0])
		}
	}
}
