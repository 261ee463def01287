package calib

import (
	"fmt"
	"sort"
	"strings"
	"unsafe"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/modelsrc"
)

// WeightSource is what calibration reads a model through: GGUF-named float32 tensors and the
// metadata an F32 GGUF conversion would carry (internal/modelsrc's HFSource implements it).
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

// layerWeights holds one block's tensors as float32.
type layerWeights struct {
	layer   int
	descs   []modelsrc.TensorDesc
	data    map[string][]float32
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

// layerBytes is the float32 size of block il.
func layerBytes(src WeightSource, il int) int64 {
	var n int64
	for _, d := range layerDescs(src, il) {
		n += 4 * elements(d.Shape)
	}
	return n
}

// loadLayer reads block il's tensors.
func loadLayer(src WeightSource, il int) (*layerWeights, error) {
	lw := &layerWeights{layer: il, descs: layerDescs(src, il), data: map[string][]float32{}, tensors: map[string]*infer.Tensor{}}
	if len(lw.descs) == 0 {
		return nil, fmt.Errorf("calib: the model has no tensors for block %d", il)
	}
	for _, d := range lw.descs {
		buf := make([]float32, elements(d.Shape))
		if err := readTensor(src, d, buf); err != nil {
			return nil, fmt.Errorf("calib: %w", err)
		}
		lw.data[d.Name] = buf
		lw.bytes += int64(len(buf)) * 4
		lw.tensors[d.Name] = &infer.Tensor{Name: d.Name, Type: gguf.TypeF32, Dims: append([]int64(nil), d.Shape...), Data: f32Bytes(buf)}
	}
	return lw, nil
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
