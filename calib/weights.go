package calib

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
)

// WeightSource is what calibration reads a model through: GGUF-named float32 tensors and the
// metadata an F32 GGUF conversion would carry (internal/modelsrc's HFSource implements it).
// Its methods must be safe for concurrent use (loadLayer reads tensors in parallel).
type WeightSource interface {
	Metadata() gguf.Metadata
	Tensors() []modelsrc.TensorDesc
	ReadRows(name string, row0, nrows int64, dst []float32) error
}

// readChunkBytes bounds the float32 bytes read per call (the reader allocates a buffer of the
// checkpoint dtype for each call).
const readChunkBytes = 8 << 20

// readTensor reads a whole tensor into dst in row chunks.
func readTensor(src WeightSource, d modelsrc.TensorDesc, dst []float32) error {
	cols := d.Shape[0]
	rows := int64(len(dst)) / cols
	step := max(1, readChunkBytes/(4*cols))
	for r := int64(0); r < rows; r += step {
		n := min(step, rows-r)
		if err := src.ReadRows(d.Name, r, n, dst[r*cols:(r+n)*cols]); err != nil {
			return err
		}
	}
	return nil
}

func elements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// f32Bytes views float32s as their in-memory bytes (infer reads F32 tensor data natively).
func f32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), len(f)*4)
}

// layerWeights holds one block's tensors: as float32 (data) or, for matrices the checkpoint
// stores in BF16/F16, in that type (half); tensors has every one in infer's form.
type layerWeights struct {
	layer   int
	descs   []modelsrc.TensorDesc
	data    map[string][]float32
	half    map[string][]byte
	bytes   int64
	tensors map[string]*infer.Tensor
}

func layerPrefix(il int) string { return fmt.Sprintf("blk.%d.", il) }

// layerDescs returns the tensors of block il.
func layerDescs(src WeightSource, il int) []modelsrc.TensorDesc {
	p := layerPrefix(il)
	var out []modelsrc.TensorDesc
	for _, d := range src.Tensors() {
		if strings.HasPrefix(d.Name, p) {
			out = append(out, d)
		}
	}
	return out
}

// halfType is the 16-bit type block weights are kept in when the checkpoint stores them so
// (BF16 or F16, matrices only), 0 otherwise. Widening BF16 or F16 to float32 is exact, so the
// forward computes the same bits as over float32 copies (infer's FullPrecision GEMM widens
// the values while it packs them, kernels.SgemmHalf) with half the memory.
func halfType(d modelsrc.TensorDesc) gguf.GGMLType {
	if len(d.Shape) < 2 {
		return 0
	}
	switch d.SourceType {
	case "BF16":
		return gguf.TypeBF16
	case "F16":
		return gguf.TypeF16
	}
	return 0
}

// storedBytes is the memory loadLayer uses for tensor d. A 16-bit matrix that falls back to
// float32 (readHalf) takes twice its figure; no transform of the supported architectures
// changes a matrix's values (the fixtures of every architecture keep all of theirs 16-bit).
func storedBytes(d modelsrc.TensorDesc) int64 {
	if halfType(d) != 0 {
		return 2 * elements(d.Shape)
	}
	return 4 * elements(d.Shape)
}

// layerBytes is the memory loadLayer uses for block il.
func layerBytes(src WeightSource, il int) int64 {
	var n int64
	for _, d := range layerDescs(src, il) {
		n += storedBytes(d)
	}
	return n
}

// loadLayer reads block il's tensors: matrices the checkpoint stores in BF16 or F16 stay in
// that type (halfType), everything else becomes float32. Up to threads tensors are read at
// once (the sources are safe for concurrent use; each reader has its own chunk buffer, the
// errors are reported in tensor order).
func loadLayer(src WeightSource, il, threads int) (*layerWeights, error) {
	lw := &layerWeights{layer: il, descs: layerDescs(src, il), data: map[string][]float32{}, half: map[string][]byte{},
		tensors: map[string]*infer.Tensor{}}
	if len(lw.descs) == 0 {
		return nil, fmt.Errorf("calib: the model has no tensors for block %d", il)
	}
	type loaded struct {
		t    gguf.GGMLType
		raw  []byte
		half bool
		data []float32
		err  error
	}
	out := make([]loaded, len(lw.descs))
	load := func(d modelsrc.TensorDesc, tmp *[]float32) loaded {
		n := elements(d.Shape)
		if ht := halfType(d); ht != 0 {
			b := make([]byte, 2*n)
			if *tmp == nil {
				*tmp = make([]float32, readChunkBytes/4)
			}
			ok, err := readHalf(src, d, ht, b, *tmp)
			if err != nil {
				return loaded{err: fmt.Errorf("calib: %w", err)}
			}
			if ok {
				return loaded{t: ht, raw: b, half: true}
			}
		}
		buf := make([]float32, n)
		if err := readTensor(src, d, buf); err != nil {
			return loaded{err: fmt.Errorf("calib: %w", err)}
		}
		return loaded{t: gguf.TypeF32, raw: f32Bytes(buf), data: buf}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(threads, len(lw.descs))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tmp []float32
			for {
				i := int(next.Add(1) - 1)
				if i >= len(lw.descs) {
					return
				}
				out[i] = load(lw.descs[i], &tmp)
			}
		}()
	}
	wg.Wait()
	for i, d := range lw.descs {
		o := out[i]
		if o.err != nil {
			return nil, o.err
		}
		if o.half {
			lw.half[d.Name] = o.raw
		} else {
			lw.data[d.Name] = o.data
		}
		lw.bytes += int64(len(o.raw))
		lw.tensors[d.Name] = &infer.Tensor{Name: d.Name, Type: o.t, Dims: append([]int64(nil), d.Shape...), Data: o.raw}
	}
	return lw, nil
}

// readHalf reads tensor d in chunks of len(tmp) floats and stores it in dst as type t (BF16
// or F16). It reports false when a value is not exactly representable in t (a transform
// changed the checkpoint's values); dst is then incomplete and the caller reads float32.
func readHalf(src WeightSource, d modelsrc.TensorDesc, t gguf.GGMLType, dst []byte, tmp []float32) (bool, error) {
	cols := d.Shape[0]
	rows := elements(d.Shape) / cols
	step := max(1, int64(len(tmp))/cols)
	if step*cols > int64(len(tmp)) {
		tmp = make([]float32, cols) // one row larger than the chunk
	}
	for r := int64(0); r < rows; r += step {
		n := min(step, rows-r)
		f := tmp[:n*cols]
		if err := src.ReadRows(d.Name, r, n, f); err != nil {
			return false, err
		}
		if !narrowExact(t, dst[2*r*cols:2*(r+n)*cols], f) {
			return false, nil
		}
	}
	return true, nil
}

// narrowExact writes src as BF16 or F16 into dst and reports whether every value is exact.
func narrowExact(t gguf.GGMLType, dst []byte, src []float32) bool {
	if t == gguf.TypeF16 {
		kernels.NarrowF16(dst, src)
		for i, v := range src {
			if quant.FP16ToFP32(uint16(dst[2*i])|uint16(dst[2*i+1])<<8) != v {
				return false
			}
		}
		return true
	}
	if len(src) == 0 {
		return true
	}
	// the tensor data is little-endian, as infer reads it natively (see f32Bytes)
	d16 := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[0])), len(dst)/2)[:len(src)]
	for i, v := range src {
		b := math.Float32bits(v)
		if b&0xffff != 0 {
			return false
		}
		d16[i] = uint16(b >> 16)
	}
	return true
}

// rows copies rows [r0, r0+n) of tensor name (a row has cols values) into dst as float32.
func (lw *layerWeights) rows(name string, r0, n, cols int, dst []float32) {
	if f, ok := lw.data[name]; ok {
		copy(dst[:n*cols], f[r0*cols:(r0+n)*cols])
		return
	}
	widen(lw.tensors[name].Type, dst[:n*cols], lw.half[name][2*r0*cols:2*(r0+n)*cols])
}

// floats returns elements [off, off+n) of tensor name as float32: a view of the float32 copy,
// or the values widened from the 16-bit one into buf (reallocated when too short).
func (lw *layerWeights) floats(name string, off, n int, buf []float32) []float32 {
	if f, ok := lw.data[name]; ok {
		return f[off : off+n]
	}
	if cap(buf) < n {
		buf = make([]float32, n)
	}
	dst := buf[:n]
	widen(lw.tensors[name].Type, dst, lw.half[name][2*off:2*(off+n)])
	return dst
}

// has reports whether the block has tensor name.
func (lw *layerWeights) has(name string) bool { return lw.tensors[name] != nil }

func widen(t gguf.GGMLType, dst []float32, src []byte) {
	if t == gguf.TypeF16 {
		kernels.WidenF16(dst, src)
	} else {
		kernels.WidenBF16(dst, src)
	}
}

// metaSource serves GGUF metadata (and a few tensors) as an infer.Source.
type metaSource struct {
	md      gguf.Metadata
	tensors map[string]*infer.Tensor
}

func (m *metaSource) Meta(key string) (any, bool) {
	v, ok := m.md.Get(key)
	if !ok {
		return nil, false
	}
	return infer.MetaValue(v), true
}

func (m *metaSource) Tensor(name string) (*infer.Tensor, bool) {
	t, ok := m.tensors[name]
	return t, ok
}

func (m *metaSource) TensorNames() []string {
	out := make([]string, 0, len(m.tensors))
	for k := range m.tensors {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
