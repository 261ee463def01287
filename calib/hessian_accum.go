package calib

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/tq-project/tq/quant/kernels"
)

// gramTile is the largest side of the square blocks of G computed by one float32 GEMM call.
const gramTile = 256

// tileSide is the side of the tiles of a Gram matrix of c columns: the fewest blocks of at
// most gramTile, evened out and rounded up to 16 so that the last block is not mostly padding
// (c = 257: two blocks of 144, not 256 and 1). gridOf is the number of blocks per side.
func tileSide(c int) int {
	nb := (c + gramTile - 1) / gramTile
	return min(gramTile, ((c+nb-1)/nb+15)&^15)
}

func gridOf(c int) (ts, nb int) {
	ts = tileSide(c)
	return ts, (c + ts - 1) / ts
}

// gramTilesLen is the float32 values of the tiles of a Gram matrix of c columns.
func gramTilesLen(c int) int {
	ts, nb := gridOf(c)
	return nb * (nb + 1) / 2 * ts * ts
}

// tileOf is the index, in pairOf's order, of the tile of block row bi and block column bj
// (bi <= bj).
func tileOf(bi, bj int) int { return bj*(bj+1)/2 + bi }

// gramChunkRows is the most rows buffered (transposed) before their products are added to
// the stored tiles in one GEMM per tile (see gramAcc).
const gramChunkRows = 512

// gramAcc accumulates the Gram matrix G = Σ_t x_t x_tᵀ of one linear input: its upper
// triangle in float32, as the square tiles (bi ≤ bj) of a grid of ts×ts blocks (tileSide),
// stored one after another in pairOf's order, so it takes about 2·cols·(cols+ts) bytes.
//
// Rows are buffered (transposed) until gramChunkRows have arrived; then the chunk's
// contribution XᵀX is computed by the float32 GEMM of quant/kernels (AVX2/AVX-512 assembly),
// one tile per call, spread over the threads (each column block packed once for all its
// tiles), and the GEMM adds its products straight into the tile (accumulate), so nothing
// is copied or widened after it. A chunk's entry is summed in float32 registers and then
// added to the stored float32 value: over n rows the rounding error is at most about
// n·2⁻²⁴·Σ|x_i x_j| and typically √n·2⁻²⁴ (1.5·10⁻⁵ of Σ|x_i x_j| for 10⁶ rows), below
// the float32 the file stores and far below the calibration's sampling noise. (Until
// 2026-12-03 each chunk's tile was added to a float64 triangle: twice the memory, and a
// pass over it per chunk that cost about a tenth of the full calibration's CPU time.)
//
// With rounded set (the calibration's bf16 products on AVX512-BF16, bf16Rounded) a chunk's
// rows are rounded to bf16 once and the tiles get the float32 sums of the exact products of
// the rounded values (kernels.SgemmRoundedPacked, twice the float32 GEMM's rate there): an
// entry then moves by at most about 2⁻⁸ of its Σ|x_i x_j|, and the diagonal's expected bias
// is about 2⁻¹⁸/3 of itself; the float32 sums are as above.
//
// The pending-row buffer may be shared by several accumulators of the same width (the routed
// experts of one input, which are fed one after another): adding rows to one of them first
// flushes the rows another left in the buffer.
type gramAcc struct {
	cols    int
	threads int
	rows    int64     // rows added (pending included)
	g       []float32 // the tiles, allocated with the first row
	buf     *gramBuf
}

// gramBuf holds the rows of one accumulator not yet added to its G.
type gramBuf struct {
	xt      []float32 // pending rows, transposed: column i of row r at xt[i*gramChunkRows+r]
	pending int
	owner   *gramAcc             // the accumulator whose rows are pending
	packed  []kernels.PackedHalf // per column block (tileSide wide): its pending rows packed for the GEMM
	rounded bool                 // the tiles from the rows rounded to bf16 (see gramAcc)
	rr      kernels.RoundedRows  // rounded: the pending rows (of xt) rounded
	pk      [][]uint32           // rounded: per column block, its rounded rows packed
}

func newGramBuf(cols int, rounded bool) *gramBuf {
	return &gramBuf{xt: make([]float32, cols*gramChunkRows), rounded: rounded}
}

func newGramAcc(cols, threads int, rounded bool) *gramAcc {
	return newSharedGramAcc(cols, threads, newGramBuf(cols, rounded))
}

// newSharedGramAcc returns an accumulator whose pending rows go to buf (made by newGramBuf
// for the same number of columns).
func newSharedGramAcc(cols, threads int, buf *gramBuf) *gramAcc {
	return &gramAcc{cols: cols, threads: max(threads, 1), buf: buf}
}

// packedLen is the number of entries of the packed upper triangle of an n×n matrix.
func packedLen(n int) int { return n * (n + 1) / 2 }

// packedRow is the offset of row i (its diagonal entry) in the packed upper triangle.
func packedRow(n, i int) int { return i*n - i*(i-1)/2 }

// gramAccBytes is the memory of a gramAcc of cols columns (the GEMM adds into its tiles, so
// the workers need no buffers of their own).
func gramAccBytes(cols int) int64 { return gramAccsBytes(cols, 1) }

// gramAccsBytes is the memory of nmat accumulators of cols columns sharing one buffer.
func gramAccsBytes(cols, nmat int) int64 {
	c := int64(cols)
	_, nb := gridOf(cols)
	return int64(nmat)*4*int64(gramTilesLen(cols)) + 4*c*gramChunkRows +
		4*(c+16*int64(nb))*gramChunkRows // the packed column blocks (16-row panels; rounded: the rounded and the packed rows, less)
}

// add accumulates n rows of x (row-major, cols each); the last chunk waits for flush.
func (a *gramAcc) add(x []float32, n int) error {
	c := a.cols
	if len(x) < n*c {
		return fmt.Errorf("calib: gram matrix: %d values for %d rows of %d", len(x), n, c)
	}
	if n == 0 {
		return nil
	}
	b := a.buf
	if b.owner != a {
		if b.owner != nil {
			if err := b.owner.flush(); err != nil {
				return err
			}
		}
		b.owner = a
	}
	if a.g == nil {
		a.g = make([]float32, gramTilesLen(c))
	}
	for r0 := 0; r0 < n; {
		k := min(n-r0, gramChunkRows-b.pending)
		transposeRows(b.xt, gramChunkRows, b.pending, x[r0*c:(r0+k)*c], k, c, a.threads)
		b.pending += k
		a.rows += int64(k)
		r0 += k
		if b.pending == gramChunkRows {
			if err := a.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush adds the pending rows' XᵀX to G.
func (a *gramAcc) flush() error {
	b := a.buf
	if b.owner != a {
		return nil // a has no rows pending
	}
	k := b.pending
	if k == 0 {
		return nil
	}
	b.pending = 0
	c, ld := a.cols, gramChunkRows
	xt := b.xt
	ts, nb := gridOf(c)
	npairs := nb * (nb + 1) / 2
	threads := max(1, min(a.threads, npairs))
	if len(b.packed) < nb {
		b.packed = append(b.packed, make([]kernels.PackedHalf, nb-len(b.packed))...)
	}
	if b.rounded && len(b.pk) < nb {
		b.pk = append(b.pk, make([][]uint32, nb-len(b.pk))...)
	}
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	// rounded: the rows are rounded once, 64 at a time
	const roundRows = 64
	round := func(int) {
		for {
			j := int(next.Add(1) - 1)
			if j*roundRows >= c {
				return
			}
			b.rr.Set(j*roundRows, min(c, (j+1)*roundRows), xt, ld)
		}
	}
	// every column block is packed once for the GEMM, then multiplied by every row block at
	// or before it
	pack := func(int) {
		for {
			bj := int(next.Add(1) - 1)
			if bj >= nb {
				return
			}
			j0 := bj * ts
			if b.rounded {
				b.pk[bj] = b.rr.PackB(j0, min(ts, c-j0), b.pk[bj])
				continue
			}
			if err := b.packed[bj].SetF32(min(ts, c-j0), k, xt[j0*ld:], ld); err != nil {
				fail(err)
				return
			}
		}
	}
	work := func(int) {
		for {
			p := int(next.Add(1) - 1)
			if p >= npairs {
				return
			}
			bi, bj := pairOf(p, nb)
			i0, j0 := bi*ts, bj*ts
			m, n := min(ts, c-i0), min(ts, c-j0)
			tile := a.g[p*ts*ts : (p+1)*ts*ts]
			var err error
			if b.rounded {
				v := b.rr.View(i0, m)
				err = kernels.SgemmRoundedPacked(&v, b.pk[bj], n, tile, ts, true)
			} else {
				err = kernels.SgemmPackedHalf(m, xt[i0*ld:], ld, &b.packed[bj], tile, ts, true)
			}
			if err != nil {
				fail(err)
				return
			}
		}
	}
	run := func(f func(int), jobs int) {
		next.Store(0)
		if t := min(threads, jobs); t <= 1 {
			f(0)
		} else {
			var wg sync.WaitGroup
			for w := 0; w < t; w++ {
				wg.Add(1)
				go func() { defer wg.Done(); f(w) }()
			}
			wg.Wait()
		}
	}
	if b.rounded {
		b.rr.Reset(c, k)
		run(round, (c+roundRows-1)/roundRows)
	}
	run(pack, nb)
	if firstErr == nil {
		run(work, npairs)
	}
	return firstErr
}

// at is G[i][j] (i <= j) as accumulated so far (rows still pending excluded).
func (a *gramAcc) at(i, j int) float32 {
	if a.g == nil {
		return 0
	}
	ts := tileSide(a.cols)
	bi, bj := i/ts, j/ts
	return a.g[tileOf(bi, bj)*ts*ts+(i-bi*ts)*ts+j-bj*ts]
}

// packedValues writes entries [i0, i1) of the packed upper triangle (row i holding columns
// i..cols-1, as the Gram file stores it) to dst; zeros before the first row.
func (a *gramAcc) packedValues(i0, i1 int, dst []float32) {
	dst = dst[:i1-i0]
	if a.g == nil {
		clear(dst)
		return
	}
	c := a.cols
	ts := tileSide(c)
	// the row of entry i0: packedRow(c, i) <= i0 < packedRow(c, i+1)
	i := sort.Search(c, func(i int) bool { return packedRow(c, i+1) > i0 })
	j := i + i0 - packedRow(c, i)
	for o := 0; o < len(dst); {
		bi, bj := i/ts, j/ts
		// the rest of row i inside tile (bi, bj), as far as dst goes
		n := min(min(c, (bj+1)*ts)-j, len(dst)-o)
		src := a.g[tileOf(bi, bj)*ts*ts+(i-bi*ts)*ts+j-bj*ts:][:n]
		copy(dst[o:o+n], src)
		o += n
		j += n
		if j == c {
			i++
			j = i
		}
	}
}

// pairOf maps p in [0, nb(nb+1)/2) to the block pair (bi, bj), bi <= bj, column by column
// (bj = 0: (0,0); bj = 1: (0,1), (1,1); ...), so that consecutive pairs share the packed
// column block while it is in cache.
func pairOf(p, nb int) (int, int) {
	bj := 0
	for p > bj {
		p -= bj + 1
		bj++
	}
	return p, bj
}

// transposeMinPerWorker is the fewest values a transposeRows worker takes: below it the
// goroutine costs more than the copy.
const transposeMinPerWorker = 1 << 15

// transposeRows writes the k rows of x (c columns each) to xt as columns: value (r, i) goes to
// xt[i·ld+p+r]. Workers (up to threads) take disjoint column ranges. Eight rows at a time
// each column gets eight adjacent values (half a cache line) instead of scattered stores.
func transposeRows(xt []float32, ld, p int, x []float32, k, c, threads int) {
	workers := max(1, min(threads, k*c/transposeMinPerWorker))
	if workers == 1 {
		transposeCols(xt, ld, p, x, k, c, 0, c)
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			transposeCols(xt, ld, p, x, k, c, w*c/workers, (w+1)*c/workers)
		}()
	}
	transposeCols(xt, ld, p, x, k, c, 0, c/workers)
	wg.Wait()
}

// transposeBlock is the columns transposeCols moves through all rows before the next ones:
// their destinations (transposeBlock × gramChunkRows values, 128 KiB) stay in cache while
// each row group fills them, instead of every column's cache line being fetched once per
// group of eight rows.
const transposeBlock = 64

// transposeCols is transposeRows for columns [c0, c1) (kernels.Transpose: 8×8 blocks in
// registers where the assembly runs).
func transposeCols(xt []float32, ld, p int, x []float32, k, c, c0, c1 int) {
	for b0 := c0; b0 < c1; b0 += transposeBlock {
		b1 := min(b0+transposeBlock, c1)
		kernels.Transpose(xt[b0*ld+p:], ld, x[b0:], c, k, b1-b0)
	}
}
