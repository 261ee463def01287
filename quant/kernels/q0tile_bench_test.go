//go:build linux

package kernels

import (
	"fmt"
	"os"
	"testing"
)

// Benchmarks of MatMulQ0 against the products it replaces:
//   - dotloop: DotQ8_0Q8_0/DotQ4_0Q8_0 per (row, token), tokens in tiles of 32 (infer's
//     matmul before MatMulQ0);
//   - rowvec: the per-row mat-vec MatVec ran before MatMulQ0 (activation scales widened once
//     per token, then one row at a time), once per token.
// go test -bench MatMulQ0 gives wall-clock figures; TQ_TUNE=1 go test -run Q0TileTune -v
// prints thread-CPU minima over interleaved rounds as ratios (stable on a shared machine).

type q0tBenchCase struct {
	wt         Type
	rows, n, T int
	w, xq      []byte
	y          []float32
	rowBytes   int
	xRow       int
}

func newQ0tBenchCase(wt Type, rows, n, T int) *q0tBenchCase {
	r := newRNG(uint64(rows*7 + n + T))
	c := &q0tBenchCase{wt: wt, rows: rows, n: n, T: T}
	wb, xb, _ := q0tFormat(wt)
	c.rowBytes = n / 32 * wb
	c.xRow = n / 32 * xb
	if wt == Q8_0 || wt == Q4_0 {
		c.w = randWeights(r, wt, rows*n/32, 0.02, false)
		c.xq = q0tActs(r, "normal", T, n, c.xRow)
	} else {
		c.w = q0tExtWeights(r, wt, "normal", rows, n)
		c.xq = q0tExtActs(r, wt, "normal", T, n, c.xRow)
	}
	c.y = make([]float32, T*rows)
	return c
}

func (c *q0tBenchCase) tile() {
	if err := MatMulQ0(c.wt, c.y, c.rows, c.w, c.rowBytes, c.xq, c.xRow, c.T, 0, c.rows); err != nil {
		panic(err)
	}
}

func (c *q0tBenchCase) dotLoop() {
	dot := q0tExtDot(c.wt, c.T)
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

// hasRowVec reports whether rowVec applies (Q8_0 and Q4_0 only).
func (c *q0tBenchCase) hasRowVec() bool { return c.wt == Q8_0 || c.wt == Q4_0 }

// rowVec is the per-row MatVec assembly loop that MatVec used before MatMulQ0.
func (c *q0tBenchCase) rowVec() {
	nb := c.n / 32
	xs := make([]float32, nb)
	for t := 0; t < c.T; t++ {
		x := c.xq[t*c.xRow:]
		q8ScalesAVX2(&x[0], nb, &xs[0])
		out := c.y[t*c.rows:]
		for r := 0; r < c.rows; r++ {
			var acc [8]float32
			if c.wt == Q8_0 {
				dotQ8_0Q8_0AVX2(&c.w[r*c.rowBytes], &x[0], &xs[0], nb, &acc)
			} else {
				dotQ4_0Q8_0AVX2(&c.w[r*c.rowBytes], &x[0], &xs[0], nb, &acc)
			}
			out[r] = hsum8(&acc)
		}
	}
}

// q0tBenchTypes are the weight types benchmarked (TQ_TUNE_Q0TYPES=ext limits the tune run
// to the extension types).
var q0tBenchTypes = []Type{Q8_0, Q4_0, q0tQ5_0, q0tIQ4_NL, q0tQ4_1, q0tQ5_1}

var q0tBenchShapes = [][3]int{{2048, 2048, 1}, {5632, 2048, 1}, {2048, 2048, 128}, {5632, 2048, 128}}

func BenchmarkMatMulQ0(b *testing.B) {
	if !HasAsm() {
		b.Skip("no assembly kernels on this machine/build")
	}
	for _, wt := range q0tBenchTypes {
		for _, sh := range q0tBenchShapes {
			c := newQ0tBenchCase(wt, sh[0], sh[1], sh[2])
			for _, m := range []struct {
				name string
				f    func()
			}{{"tile", c.tile}, {"dotloop", c.dotLoop}, {"rowvec", c.rowVec}} {
				if m.name == "rowvec" && !c.hasRowVec() {
					continue
				}
				b.Run(fmt.Sprintf("%v/%dx%d/T=%d/%s", q0tName(wt), sh[0], sh[1], sh[2], m.name), func(b *testing.B) {
					b.SetBytes(int64(len(c.w)))
					for i := 0; i < b.N; i++ {
						m.f()
					}
				})
			}
		}
	}
}

// TestQ0TileTune prints MatMulQ0's thread-CPU time against the per-(row, token) Dot loop and
// the old per-row mat-vec, measured interleaved in the same run.
func TestQ0TileTune(t *testing.T) {
	if os.Getenv("TQ_TUNE") == "" || !HasAsm() {
		t.Skip("set TQ_TUNE=1 (on a machine with the assembly kernels) to print thread-CPU timings")
	}
	types := q0tBenchTypes
	if os.Getenv("TQ_TUNE_Q0TYPES") == "ext" {
		types = types[2:]
	}
	for _, wt := range types {
		for _, sh := range q0tBenchShapes {
			c := newQ0tBenchCase(wt, sh[0], sh[1], sh[2])
			reps := 20
			if c.T > 1 {
				reps = 1
			}
			if !c.hasRowVec() {
				ns := minCPUNs(7, reps, c.tile, c.dotLoop)
				t.Logf("%v %5d×%d T=%3d: tile %8.3f ms (%.2f ns per block pair); dotloop/tile %.2f×",
					q0tName(wt), sh[0], sh[1], sh[2], ns[0]/1e6, ns[0]/float64(sh[0]*sh[1]/32*sh[2]), ns[1]/ns[0])
				continue
			}
			ns := minCPUNs(7, reps, c.tile, c.dotLoop, c.rowVec)
			t.Logf("%v %5d×%d T=%3d: tile %8.3f ms (%.2f ns per block pair); dotloop/tile %.2f×, rowvec/tile %.2f×",
				wt, sh[0], sh[1], sh[2], ns[0]/1e6, ns[0]/float64(sh[0]*sh[1]/32*sh[2]), ns[1]/ns[0], ns[2]/ns[0])
		}
	}
}
