package calib

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/tq-project/tq/quant/kernels"
)

// TestGramAccMatchesFloat64 checks the tiled float32 accumulation against a naive float64
// XᵀX, for sizes that are and are not multiples of the tile and chunk, on heavy-tailed data,
// and the packed triangle the Gram file is written from against the tiles;
// with rounded rows (on each of the CPU's kernels for them: VDPBF16PS, AMX tiles) against the
// float64 XᵀX of the rows rounded to bf16, to the same bound.
func TestGramAccMatchesFloat64(t *testing.T) {
	t.Run("float32", func(t *testing.T) { testGramAcc(t, false) })
	defer kernels.SetAMX(true)
	defer kernels.SetBF16DP(kernels.SetBF16DP(true)) // also where it is not the default
	for _, path := range []string{"bf16dp", "amx"} {
		kernels.SetAMX(path == "amx")
		if path == "amx" && !kernels.UsingAMX() || path == "bf16dp" && !kernels.UsingBF16DP() {
			t.Logf("no %s on this machine: the rounded accumulation on it is not tested here", path)
			continue
		}
		t.Run("rounded-"+path, func(t *testing.T) { testGramAcc(t, true) })
	}
}

func testGramAcc(t *testing.T, rounded bool) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct{ cols, rows, threads int }{{1, 3, 1}, {7, 1, 2}, {300, 300, 2}, {260, 513, 3}, {257, 40, 1}, {520, 1100, 2}} {
		x := make([]float32, tc.rows*tc.cols)
		for i := range x {
			v := rng.NormFloat64()
			if i%tc.cols == 5 {
				v *= 20 // an outlier column
			}
			x[i] = float32(v / math.Sqrt(0.2+rng.ExpFloat64())) // heavier tails than normal
		}
		a := newGramAcc(tc.cols, tc.threads, rounded)
		// feed in uneven calls
		for r := 0; r < tc.rows; {
			n := min(tc.rows-r, 1+rng.IntN(600))
			if err := a.add(x[r*tc.cols:(r+n)*tc.cols], n); err != nil {
				t.Fatal(err)
			}
			r += n
		}
		if err := a.flush(); err != nil {
			t.Fatal(err)
		}
		if a.rows != int64(tc.rows) {
			t.Fatalf("rows %d, want %d", a.rows, tc.rows)
		}
		c := tc.cols
		// the packed triangle the Gram file stores, read in uneven pieces, is the tiles' G
		packed := make([]float32, packedLen(c))
		for i0 := 0; i0 < len(packed); {
			i1 := min(len(packed), i0+1+rng.IntN(3*c))
			a.packedValues(i0, i1, packed[i0:i1])
			i0 = i1
		}
		for i := 0; i < c; i++ {
			for j := i; j < c; j++ {
				if got, want := packed[packedRow(c, i)+j-i], a.at(i, j); got != want {
					t.Fatalf("%d columns: packed G[%d][%d] = %v, tile %v", c, i, j, got, want)
				}
			}
		}
		if rounded {
			for i, v := range x {
				x[i] = math.Float32frombits(uint32(kernels.RoundBF16(v)) << 16)
			}
		}
		for i := 0; i < c; i++ {
			for j := i; j < c; j++ {
				var s, sa float64
				for r := 0; r < tc.rows; r++ {
					p := float64(x[r*c+i]) * float64(x[r*c+j])
					s += p
					sa += math.Abs(p)
				}
				got := float64(a.at(i, j))
				if math.Abs(got-s) > 2e-6*sa+1e-300 {
					t.Fatalf("%dx%d: G[%d][%d] = %v, float64 %v (Σ|x_i x_j| %v)", tc.rows, c, i, j, got, s, sa)
				}
			}
		}
	}
}

func benchGramInput(cols, rows int) []float32 {
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// BenchmarkGramAcc measures the accumulation of 512 rows (one calibration batch) of 2048
// columns, from float32 rows and (where the CPU runs it) from rows rounded to bf16;
// BenchmarkGramGonumDsyrk the same product with gonum's float64 Dsyrk.
func BenchmarkGramAcc(b *testing.B) {
	const cols, rows = 2048, 512
	x := benchGramInput(cols, rows)
	for _, mode := range []string{"float32", "rounded-bf16dp", "rounded-amx"} {
		b.Run(mode, func(b *testing.B) {
			rounded := mode != "float32"
			switch mode {
			case "rounded-bf16dp":
				if !kernels.HasBF16DP() {
					b.Skip("no AVX512-BF16")
				}
				kernels.SetAMX(false)
				defer kernels.SetAMX(true)
				defer kernels.SetBF16DP(kernels.SetBF16DP(true))
			case "rounded-amx":
				if !kernels.UsingAMX() {
					b.Skip("no AMX")
				}
			}
			a := newGramAcc(cols, 1, rounded)
			b.SetBytes(int64(rows * cols * 4))
			for b.Loop() {
				if err := a.add(x, rows); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)*float64(rows)*float64(cols)*float64(cols+1)/2/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}

func BenchmarkGramGonumDsyrk(b *testing.B) {
	const cols, rows = 2048, 512
	x := benchGramInput(cols, rows)
	x64 := make([]float64, len(x))
	g := blas64.Symmetric{N: cols, Stride: cols, Data: make([]float64, cols*cols), Uplo: blas.Upper}
	for b.Loop() {
		for i, v := range x {
			x64[i] = float64(v)
		}
		blas64.Syrk(blas.Trans, 1, blas64.General{Rows: rows, Cols: cols, Stride: cols, Data: x64}, 1, g)
	}
	b.ReportMetric(float64(b.N)*float64(rows)*float64(cols)*float64(cols+1)/2/b.Elapsed().Seconds()/1e9, "GMAC/s")
}

// TestTransposeRows compares transposeRows with a plain loop: row counts that are and are not
// multiples of 8, an offset into the pending columns, one and several workers.
func TestTransposeRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ k, c, p, threads int }{{1, 1, 0, 1}, {8, 3, 5, 2}, {13, 700, 3, 2}, {64, 1030, 448, 3}, {512, 129, 0, 4}} {
		const ld = 512
		x := make([]float32, tc.k*tc.c)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		xt := make([]float32, tc.c*ld)
		for i := range xt {
			xt[i] = -1
		}
		transposeRows(xt, ld, tc.p, x, tc.k, tc.c, tc.threads)
		for i := 0; i < tc.c; i++ {
			for r := 0; r < ld; r++ {
				want := float32(-1)
				if r >= tc.p && r < tc.p+tc.k {
					want = x[(r-tc.p)*tc.c+i]
				}
				if got := xt[i*ld+r]; got != want {
					t.Fatalf("%+v: column %d row %d: %v, want %v", tc, i, r, got, want)
				}
			}
		}
	}
}

// BenchmarkTransposeRows moves one calibration batch (512 rows of 4608 columns) into the
// pending columns, as gramAcc.add does, with 1 and 2 workers.
func BenchmarkTransposeRows(b *testing.B) {
	const k, c = 512, 4608
	x := benchGramInput(c, k)
	xt := make([]float32, c*gramChunkRows)
	for _, th := range []int{1, 2} {
		b.Run(fmt.Sprint("threads=", th), func(b *testing.B) {
			b.SetBytes(4 * k * c)
			for i := 0; i < b.N; i++ {
				transposeRows(xt, gramChunkRows, 0, x, k, c, th)
			}
		})
	}
}
