package quant

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// Mode selects the quantization algorithm.
type Mode int

const (
	// ModeReference reproduces ggml's quantizers byte for byte: without importance
	// weights the *_ref algorithms, with importance weights the imatrix ("impl")
	// algorithms llama-quantize runs (see docs/quantization.md for the exceptions:
	// Q8_0, F16, BF16 and F32 ignore importance, as in ggml).
	ModeReference Mode = iota
	// ModeImproved searches scales, mins and codes more thoroughly and minimises the
	// exact squared error of the stored blocks, weighted by the importance (or
	// unweighted without it). Per block it keeps whichever of its own result and
	// ggml's reference result has the lower error, so it is never worse than
	// ModeReference on that measure. The output is a standard ggml block layout.
	ModeImproved
)

func (m Mode) String() string {
	switch m {
	case ModeReference:
		return "reference"
	case ModeImproved:
		return "improved"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options controls Quantize. The zero value (or nil) means ModeReference, no
// importance, all CPUs.
type Options struct {
	// Importance holds one non-negative weight per column (len ncols), typically the
	// imatrix: the mean of squared activations seen by that input column. nil means
	// no importance weights.
	Importance []float32
	// Mode selects ggml-identical (ModeReference) or improved search.
	Mode Mode
	// Threads is the number of goroutines (<= 0: runtime.GOMAXPROCS).
	Threads int
	// TensorName is used in error messages.
	TensorName string
}

// scratch holds per-worker buffers so the row loops do not allocate.
type scratch struct {
	w    [QK_K]float32
	L    [QK_K]int8
	Lu   [QK_K]uint8
	Laux [32]uint8
	imp  impScratch
	kx   kernels.QkxLanes // lane-parallel searches (qkxQuants8, qxQuants8)
	qx   kernels.QxLanes
	// two super-blocks at a time for the 16-lane search (quantRowQ45KImp, qkxQuants16)
	w2   [2 * QK_K]float32
	Lu2  [2 * QK_K]uint8
	kx16 kernels.QkxLanes16
	qx16 kernels.QxLanes16 // the sixteen sub-blocks of a Q6_K/Q3_K super-block (qxQuants16)
}

type rowFunc func(dst []byte, x, qw []float32, s *scratch)

func (o *Options) name() string {
	if o == nil || o.TensorName == "" {
		return "(unnamed)"
	}
	return o.TensorName
}

// Quantize converts nrows×ncols float32 values (row-major) into t's block format.
// dst must be exactly nrows·RowSize(t, ncols) bytes. It returns an error naming the
// tensor for unsupported types, bad lengths, a row length that does not fit the
// block size, NaN/Inf input, invalid importance weights, or values so large that a
// block scale overflows fp16 (llama.cpp would reject such a file). Rows are
// independent and quantized in parallel; the result does not depend on Threads.
func Quantize(t gguf.GGMLType, dst []byte, src []float32, nrows, ncols int, opts *Options) error {
	name := opts.name()
	rs, err := rowSize(t, ncols)
	if err != nil {
		return fmt.Errorf("quant: tensor %q: %w", name, err)
	}
	if nrows < 0 || (nrows > 0 && ncols > math.MaxInt/nrows) || len(src) != nrows*ncols {
		return fmt.Errorf("quant: tensor %q: have %d values, want %d rows × %d columns", name, len(src), nrows, ncols)
	}
	if len(dst) != nrows*rs {
		return fmt.Errorf("quant: tensor %q: destination has %d bytes, want %d (%d rows × %d)", name, len(dst), nrows*rs, nrows, rs)
	}
	var qw []float32
	mode := ModeReference
	threads := 0
	if opts != nil {
		qw = opts.Importance
		mode = opts.Mode
		threads = opts.Threads
	}
	if mode != ModeReference && mode != ModeImproved {
		return fmt.Errorf("quant: tensor %q: unknown mode %d", name, int(mode))
	}
	impScale, err := checkImportance(qw, ncols, name)
	if err != nil {
		return err
	}
	f := rowQuantizer(t, mode, qw != nil, impScale)
	return parallelRows(nrows, ncols, threads, func(r0, r1 int, s *scratch) error {
		for r := r0; r < r1; r++ {
			x := src[r*ncols : (r+1)*ncols]
			if c := kernels.FirstNonFinite(x); c >= 0 {
				return fmt.Errorf("quant: tensor %q: row %d, column %d: value %v is not finite", name, r, c, x[c])
			}
			row := dst[r*rs : (r+1)*rs]
			f(row, x, qw, s)
			if err := checkRow(t, row); err != nil {
				return fmt.Errorf("quant: tensor %q (%v): row %d: %v", name, t, r, err)
			}
		}
		return nil
	})
}

// checkImportance validates importance weights and returns the power of two that
// brings the largest to [1, 2). ModeImproved searches with the scaled weights (its
// objective is invariant to the scale, and float32 intermediates can no longer
// overflow); ModeReference passes the raw weights to the ggml algorithms, whose
// float32 sums do overflow for extreme values exactly as in ggml.
func checkImportance(qw []float32, ncols int, name string) (float64, error) {
	if qw == nil {
		return 1, nil
	}
	if len(qw) != ncols {
		return 0, fmt.Errorf("quant: tensor %q: importance has %d entries, want %d (one per column)", name, len(qw), ncols)
	}
	var mx float32
	for i, v := range qw {
		if !(v >= 0) || math.IsInf(float64(v), 1) {
			return 0, fmt.Errorf("quant: tensor %q: importance[%d] = %v is negative or not finite", name, i, v)
		}
		mx = max(mx, v)
	}
	if mx == 0 {
		return 1, nil
	}
	_, e := math.Frexp(float64(mx)) // mx = f·2^e, f in [0.5, 1)
	return math.Ldexp(1, 1-e), nil
}

// parallelRows runs fn over [0,nrows) split into chunks on up to threads goroutines
// and returns the error of the lowest failing row range.
func parallelRows(nrows, ncols, threads int, fn func(r0, r1 int, s *scratch) error) error {
	return parallelChunks(nrows, max(1, 16384/max(1, ncols)), threads, func() *scratch { return new(scratch) }, fn)
}

// parallelChunks runs fn over [0,nrows) in chunks of chunk rows on up to threads goroutines
// (<= 0: GOMAXPROCS), each with its own workspace from newWork, and returns the error of the
// lowest failing chunk.
func parallelChunks[W any](nrows, chunk, threads int, newWork func() W, fn func(r0, r1 int, w W) error) error {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	nchunks := (nrows + chunk - 1) / chunk
	threads = min(threads, nchunks)
	if threads <= 1 {
		w := newWork()
		for r := 0; r < nrows; r += chunk {
			if err := fn(r, min(nrows, r+chunk), w); err != nil {
				return err
			}
		}
		return nil
	}
	var next atomic.Int64
	var mu sync.Mutex
	firstRow := math.MaxInt
	var firstErr error
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWork()
			for {
				c := int(next.Add(1) - 1)
				if c >= nchunks {
					return
				}
				r0 := c * chunk
				if err := fn(r0, min(nrows, r0+chunk), w); err != nil {
					mu.Lock()
					if r0 < firstRow {
						firstRow, firstErr = r0, err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// rowQuantizer picks the row routine for a type, mode and importance presence;
// impScale is the factor ModeImproved applies to the importance (checkImportance).
func rowQuantizer(t gguf.GGMLType, mode Mode, hasQW bool, impScale float64) rowFunc {
	if mode == ModeImproved {
		if f := improvedRowFunc(t, impScale); f != nil {
			return f
		}
	}
	pick := func(ref func([]byte, []float32), imp func([]byte, []float32, []float32, *scratch)) rowFunc {
		if hasQW {
			return imp
		}
		return func(d []byte, x, _ []float32, _ *scratch) { ref(d, x) }
	}
	switch t {
	case gguf.TypeF32:
		return func(d []byte, x, _ []float32, _ *scratch) {
			for i, v := range x {
				binary.LittleEndian.PutUint32(d[4*i:], math.Float32bits(v))
			}
		}
	case gguf.TypeF16:
		return func(d []byte, x, _ []float32, _ *scratch) {
			for i, v := range x {
				binary.LittleEndian.PutUint16(d[2*i:], FP32ToFP16(v))
			}
		}
	case gguf.TypeBF16:
		return func(d []byte, x, _ []float32, _ *scratch) {
			for i, v := range x {
				binary.LittleEndian.PutUint16(d[2*i:], FP32ToBF16(v))
			}
		}
	case gguf.TypeQ4_0:
		return pick(quantRowQ4_0Ref, quantRowQ4_0Imp)
	case gguf.TypeQ4_1:
		return pick(quantRowQ4_1Ref, quantRowQ4_1Imp)
	case gguf.TypeQ5_0:
		return pick(quantRowQ5_0Ref, quantRowQ5_0Imp)
	case gguf.TypeQ5_1:
		return pick(quantRowQ5_1Ref, quantRowQ5_1Imp)
	case gguf.TypeQ8_0:
		return func(d []byte, x, _ []float32, _ *scratch) { quantRowQ8_0Ref(d, x) }
	case gguf.TypeQ8_1:
		return func(d []byte, x, _ []float32, _ *scratch) { QuantizeRowQ8_1Ref(d, x) }
	case gguf.TypeQ8_K:
		return func(d []byte, x, _ []float32, _ *scratch) { QuantizeRowQ8K(d, x) }
	case gguf.TypeQ2_K:
		if hasQW {
			return quantRowQ2KImp
		}
		return func(d []byte, x, _ []float32, s *scratch) { quantRowQ2KRef(d, x, s) }
	case gguf.TypeQ3_K:
		if hasQW {
			return quantRowQ3KImp
		}
		return func(d []byte, x, _ []float32, s *scratch) { quantRowQ3KRef(d, x, s) }
	case gguf.TypeQ4_K, gguf.TypeQ5_K:
		nmax := int32(15)
		if t == gguf.TypeQ5_K {
			nmax = 31
		}
		if hasQW {
			return func(d []byte, x, qw []float32, s *scratch) { quantRowQ45KImp(d, x, qw, s, nmax) }
		}
		return func(d []byte, x, _ []float32, s *scratch) { quantRowQ45KRef(d, x, s, nmax) }
	case gguf.TypeQ6_K:
		return quantRowQ6K
	case gguf.TypeIQ4_NL:
		return quantRowIQ4NL
	case gguf.TypeIQ4_XS:
		return quantRowIQ4XS
	}
	panic("quant: no quantizer for " + t.String()) // unreachable: RowSize checked support
}

// f16Fields lists the byte offsets of fp16 fields inside one block of each type.
var f16Fields = map[gguf.GGMLType][]int{
	gguf.TypeQ4_0: {0}, gguf.TypeQ4_1: {0, 2}, gguf.TypeQ5_0: {0}, gguf.TypeQ5_1: {0, 2},
	gguf.TypeQ8_0: {0}, gguf.TypeQ8_1: {0, 2}, gguf.TypeQ2_K: {80, 82}, gguf.TypeQ3_K: {108},
	gguf.TypeQ4_K: {0, 2}, gguf.TypeQ5_K: {0, 2}, gguf.TypeQ6_K: {208},
	gguf.TypeIQ4_NL: {0}, gguf.TypeIQ4_XS: {0},
}

// checkRow rejects quantized rows with non-finite stored values (what
// ggml_validate_row_data rejects): fp16 overflow of a block scale or of an F16/BF16
// element. Q8_1's sum field is excluded: ggml's own activation path lets it overflow.
func checkRow(t gguf.GGMLType, row []byte) error {
	switch t {
	case gguf.TypeF16:
		for i := 0; i < len(row); i += 2 {
			if binary.LittleEndian.Uint16(row[i:])&0x7c00 == 0x7c00 {
				return fmt.Errorf("column %d: value overflows f16 (|x| >= 65520)", i/2)
			}
		}
		return nil
	case gguf.TypeBF16:
		for i := 0; i < len(row); i += 2 {
			if binary.LittleEndian.Uint16(row[i:])&0x7f80 == 0x7f80 {
				return fmt.Errorf("column %d: value overflows bf16", i/2)
			}
		}
		return nil
	}
	offs, ok := f16Fields[t]
	if !ok {
		return nil
	}
	if t == gguf.TypeQ8_1 {
		offs = offs[:1]
	}
	tr, _ := t.Traits()
	for b := 0; b+tr.TypeSize <= len(row); b += tr.TypeSize {
		for _, o := range offs {
			if binary.LittleEndian.Uint16(row[b+o:])&0x7c00 == 0x7c00 {
				return fmt.Errorf("block %d (columns %d..%d): scale is not finite (fp16 overflow: values too large for %v, or float32 overflow of ggml's sums with extreme importance weights)",
					b/tr.TypeSize, b/tr.TypeSize*tr.BlockSize, (b/tr.TypeSize+1)*tr.BlockSize-1, t)
			}
		}
	}
	return nil
}

// Dequantize decodes len(dst) elements of type t from src, bit-identical to ggml's
// to_float routines (Q8_1, which ggml cannot decode, is decoded as d·q). len(dst)
// must be a multiple of the block size and len(src) exactly the matching byte count.
// Arbitrary bytes never cause a panic (they may decode to Inf/NaN, as in ggml).
func Dequantize(t gguf.GGMLType, dst []float32, src []byte) error {
	if _, err := checkDequant(t, dst, src); err != nil {
		return err
	}
	dequantFunc(t)(dst, src)
	return nil
}

// DequantizeParallel is Dequantize split across threads goroutines (<= 0: all CPUs).
func DequantizeParallel(t gguf.GGMLType, dst []float32, src []byte, threads int) error {
	tr, err := checkDequant(t, dst, src)
	if err != nil {
		return err
	}
	f := dequantFunc(t)
	return parallelRows(len(dst)/tr.BlockSize, tr.BlockSize, threads, func(b0, b1 int, _ *scratch) error {
		f(dst[b0*tr.BlockSize:b1*tr.BlockSize], src[b0*tr.TypeSize:b1*tr.TypeSize])
		return nil
	})
}

func checkDequant(t gguf.GGMLType, dst []float32, src []byte) (gguf.TypeTraits, error) {
	tr, ok := t.Traits()
	if !ok || !supported[t] {
		return tr, fmt.Errorf("quant: dequantize: type %v is not supported", t)
	}
	if len(dst)%tr.BlockSize != 0 {
		return tr, fmt.Errorf("quant: dequantize %v: %d elements is not a multiple of the block size %d", t, len(dst), tr.BlockSize)
	}
	if want := len(dst) / tr.BlockSize * tr.TypeSize; len(src) != want {
		return tr, fmt.Errorf("quant: dequantize %v: have %d bytes, want %d for %d elements", t, len(src), want, len(dst))
	}
	return tr, nil
}

func dequantFunc(t gguf.GGMLType) func([]float32, []byte) {
	switch t {
	case gguf.TypeF32:
		return func(y []float32, b []byte) {
			for i := range y {
				y[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
		}
	case gguf.TypeF16:
		return func(y []float32, b []byte) {
			for i := range y {
				y[i] = fp16Table[binary.LittleEndian.Uint16(b[2*i:])]
			}
		}
	case gguf.TypeBF16:
		return func(y []float32, b []byte) {
			for i := range y {
				y[i] = BF16ToFP32(binary.LittleEndian.Uint16(b[2*i:]))
			}
		}
	case gguf.TypeQ4_0:
		return dequantQ4_0
	case gguf.TypeQ4_1:
		return dequantQ4_1
	case gguf.TypeQ5_0:
		return dequantQ5_0
	case gguf.TypeQ5_1:
		return dequantQ5_1
	case gguf.TypeQ8_0:
		return dequantQ8_0
	case gguf.TypeQ8_1:
		return dequantQ8_1
	case gguf.TypeQ2_K:
		return dequantQ2K
	case gguf.TypeQ3_K:
		return dequantQ3K
	case gguf.TypeQ4_K:
		return dequantQ4K
	case gguf.TypeQ5_K:
		return dequantQ5K
	case gguf.TypeQ6_K:
		return dequantQ6K
	case gguf.TypeQ8_K:
		return dequantQ8K
	case gguf.TypeIQ4_NL:
		return dequantIQ4NL
	case gguf.TypeIQ4_XS:
		return dequantIQ4XS
	}
	panic("quant: no dequantizer for " + t.String())
}
