package infer

import (
	"fmt"
	"sync"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// linear is a weight matrix of `out` rows of `in` elements (ggml ne {in, out}), or a stack of
// nmat such matrices (ne {in, out, nmat}, MoE experts), used in place from the source bytes.
type linear struct {
	name     string
	t        gguf.GGMLType
	in, out  int
	nmat     int
	rowBytes int
	data     []byte
	k        *kernel

	// packed holds, with Options.PackWeights, each gemmTile-row tile of a 16-bit matrix
	// widened and packed after its first product ([e·tiles + tile]); mu guards its allocation
	// (a block's experts may multiply concurrently).
	mu     sync.Mutex
	packed []*kernels.PackedHalf
}

// row returns the bytes of row r of matrix e.
func (l *linear) row(e, r int) []byte {
	off := (e*l.out + r) * l.rowBytes
	return l.data[off : off+l.rowBytes]
}

// loader pulls tensors from a Source, checks their shapes and types, and records which tensors
// were used so that unexpected extra tensors can be reported.
type loader struct {
	src  Source
	used map[string]bool
	err  error
}

func (ld *loader) fail(err error) {
	if ld.err == nil {
		ld.err = err
	}
}

// lookup returns the tensor, checking that its dims equal want (trailing 1s allowed) and that its
// byte size is exact. It returns nil when the tensor is absent and not required.
func (ld *loader) lookup(name string, required bool, want ...int) *Tensor {
	if ld.err != nil {
		return nil
	}
	t, ok := ld.src.Tensor(name)
	if !ok || t == nil {
		if required {
			ld.fail(fmt.Errorf("tensor %q is missing", name))
		}
		return nil
	}
	ld.used[name] = true
	if !shapeMatches(t.Dims, want) {
		ld.fail(fmt.Errorf("tensor %q has shape %v, want %v", name, t.Dims, want))
		return nil
	}
	tr, ok := t.Type.Traits()
	if !ok {
		ld.fail(fmt.Errorf("tensor %q has unknown type id %d", name, uint32(t.Type)))
		return nil
	}
	if want[0]%tr.BlockSize != 0 {
		ld.fail(fmt.Errorf("tensor %q: row length %d is not a multiple of the %s block size %d", name, want[0], t.Type, tr.BlockSize))
		return nil
	}
	rows := int64(1)
	for _, d := range want[1:] {
		rows *= int64(d)
	}
	size := int64(want[0]/tr.BlockSize) * int64(tr.TypeSize) * rows
	if int64(len(t.Data)) != size {
		ld.fail(fmt.Errorf("tensor %q (%s %v) holds %d bytes, want %d", name, t.Type, t.Dims, len(t.Data), size))
		return nil
	}
	if !aligned(t.Data, 4) {
		// Our kernels read float32/uint16 words; copy misaligned data once.
		t = &Tensor{Name: t.Name, Type: t.Type, Dims: t.Dims, Data: append(make([]byte, 0, len(t.Data)), t.Data...)}
	}
	return t
}

func shapeMatches(dims []int64, want []int) bool {
	if len(dims) < len(want) {
		// missing trailing dims count as 1
		for i := len(dims); i < len(want); i++ {
			if want[i] != 1 {
				return false
			}
		}
	}
	for i, d := range dims {
		w := 1
		if i < len(want) {
			w = want[i]
		}
		if d != int64(w) {
			return false
		}
	}
	return true
}

// linear loads a 2-D (nmat == 1) or 3-D weight matrix.
func (ld *loader) linear(name string, in, out, nmat int, required bool) *linear {
	want := []int{in, out}
	if nmat > 1 {
		want = append(want, nmat)
	}
	t := ld.lookup(name, required, want...)
	if t == nil {
		return nil
	}
	k, err := kernelFor(t.Type)
	if err != nil {
		ld.fail(fmt.Errorf("tensor %q: %v", name, err))
		return nil
	}
	// llama.cpp repacks matrices used by matrix products (not the embedding table, which is
	// read by get_rows; a tied output head reads it too) when the row count is a multiple of 8.
	if rk := repackKernelFor(t.Type); rk != nil && out%8 == 0 && name != "token_embd.weight" {
		k = rk
	}

	tr, _ := t.Type.Traits()
	return &linear{name: name, t: t.Type, in: in, out: out, nmat: max(nmat, 1),
		rowBytes: in / tr.BlockSize * tr.TypeSize, data: t.Data, k: k}
}

// vector loads a 1-D tensor (norm weight, bias) as float32.
func (ld *loader) vector(name string, n int, required bool) []float32 {
	t := ld.lookup(name, required, n)
	if t == nil {
		return nil
	}
	out := make([]float32, n)
	if err := kDequant(t.Type, t.Data, out); err != nil {
		ld.fail(fmt.Errorf("tensor %q: %v", name, err))
		return nil
	}
	return out
}

// checkAllUsed reports tensors the architecture does not use (llama.cpp rejects such files).
func (ld *loader) checkAllUsed() {
	if ld.err != nil {
		return
	}
	for _, n := range ld.src.TensorNames() {
		if !ld.used[n] {
			ld.fail(fmt.Errorf("unexpected tensor %q for this architecture", n))
			return
		}
	}
}
