package infer

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant/kernels"
)

// ParseCacheType maps a llama.cpp cache type name (--cache-type-k/-v: f32, f16, bf16, q8_0,
// q4_0) to its ggml type. The empty string means f16.
func ParseCacheType(name string) (gguf.GGMLType, error) {
	switch strings.ToLower(name) {
	case "", "f16":
		return gguf.TypeF16, nil
	case "f32":
		return gguf.TypeF32, nil
	case "bf16":
		return gguf.TypeBF16, nil
	case "q8_0":
		return gguf.TypeQ8_0, nil
	case "q4_0":
		return gguf.TypeQ4_0, nil
	}
	return 0, fmt.Errorf("unsupported KV cache type %q (supported: f32, f16, bf16, q8_0, q4_0)", name)
}

// kvCache stores the rotated keys and the values of every layer in the cache types. Keys are
// one row of n_head_kv·head_dim elements per position. Values of a float cache type (f32, f16,
// bf16) are stored transposed, one row of ctx positions per channel, as llama.cpp stores them
// without flash attention, so that softmax·V is a dot product over contiguous positions;
// quantized values keep one row per position (blocks run along the head dimension).
type kvCache struct {
	tk, tv     gguf.GGMLType
	kk         *kernel // dot of a cached key head with a query head
	ctx        int
	kvDim, hd  int
	kRow, vRow int // bytes per position
	kHead      int // bytes per head within a row
	vHead      int
	k, v       [][]byte
	vTrans     bool
	vElem      int // bytes per value element when transposed
	vStride    int // elements per transposed value row: ctx rounded up to 32
}

func typeRowBytes(t gguf.GGMLType, n int) int {
	tr, _ := t.Traits()
	return n / tr.BlockSize * tr.TypeSize
}

// newKVCache allocates the host cache of layers [0, cpuLayers); later layers run on the GPU
// and keep their cache in device memory (gpu_session.go).
func newKVCache(c *Config, ctx int, tk, tv gguf.GGMLType, cpuLayers int) (*kvCache, error) {
	for _, t := range []gguf.GGMLType{tk, tv} {
		tr, ok := t.Traits()
		if !ok || c.HeadDim%tr.BlockSize != 0 {
			return nil, fmt.Errorf("KV cache type %s needs head_dim (%d) to be a multiple of %d", t, c.HeadDim, tr.BlockSize)
		}
	}
	kk, err := kernelFor(tk)
	if err != nil {
		return nil, err
	}
	kv := &kvCache{tk: tk, tv: tv, kk: kk, ctx: ctx, kvDim: c.KVDim(), hd: c.HeadDim}
	kv.kRow = typeRowBytes(tk, kv.kvDim)
	kv.vRow = typeRowBytes(tv, kv.kvDim)
	kv.kHead = typeRowBytes(tk, kv.hd)
	kv.vHead = typeRowBytes(tv, kv.hd)
	switch tv {
	case gguf.TypeF32:
		kv.vTrans, kv.vElem = true, 4
	case gguf.TypeF16, gguf.TypeBF16:
		kv.vTrans, kv.vElem = true, 2
	}
	kv.vStride = (ctx + 31) &^ 31
	vBytes := ctx * kv.vRow
	if kv.vTrans {
		vBytes = kv.kvDim * kv.vStride * kv.vElem
	}
	kv.k = make([][]byte, c.NLayer)
	kv.v = make([][]byte, c.NLayer)
	for i := range kv.k {
		if c.Hybrid != nil && i < len(c.Hybrid.Linear) && c.Hybrid.Linear[i] {
			continue // Gated DeltaNet layers keep a recurrent state instead
		}
		if i >= cpuLayers {
			continue // a GPU layer: its cache lives on the device
		}
		// []float32 backing keeps the rows 4-byte aligned
		kv.k[i] = f32Bytes(make([]float32, (ctx*kv.kRow+3)/4))[:ctx*kv.kRow]
		kv.v[i] = f32Bytes(make([]float32, (vBytes+3)/4))[:vBytes]
	}
	return kv, nil
}

// Bytes is the memory the cache holds.
func (kv *kvCache) bytes() int64 {
	var n int64
	for i, k := range kv.k {
		n += int64(len(k)) + int64(len(kv.v[i]))
	}
	return n
}

// storeRow converts an f32 row into cache type t (ggml's CPU from_float for that type).
func storeRow(t gguf.GGMLType, dst []byte, x []float32) {
	switch t {
	case gguf.TypeF32:
		copy(bytesF32(dst), x)
	case gguf.TypeF16:
		kernels.NarrowF16(dst, x) // f2h per element, vectorised
	case gguf.TypeBF16:
		for i, v := range x {
			binary.LittleEndian.PutUint16(dst[2*i:], f2bf(v))
		}
	case gguf.TypeQ8_0:
		kQuantQ8_0(dst, x)
	case gguf.TypeQ4_0:
		quantizeQ4_0(dst, x)
	}
}

func (kv *kvCache) store(layer, pos int, k, v []float32) {
	storeRow(kv.tk, kv.k[layer][pos*kv.kRow:(pos+1)*kv.kRow], k)
	if !kv.vTrans {
		storeRow(kv.tv, kv.v[layer][pos*kv.vRow:(pos+1)*kv.vRow], v)
		return
	}
	vl := kv.v[layer]
	switch kv.tv {
	case gguf.TypeF32:
		f := bytesF32(vl)
		for c, x := range v {
			f[c*kv.vStride+pos] = x
		}
	case gguf.TypeF16:
		h := bytesU16(vl)
		for c, x := range v {
			h[c*kv.vStride+pos] = f2h(x)
		}
	case gguf.TypeBF16:
		h := bytesU16(vl)
		for c, x := range v {
			h[c*kv.vStride+pos] = f2bf(x)
		}
	}
}

func (kv *kvCache) keyHead(layer, pos, g int) []byte {
	off := pos*kv.kRow + g*kv.kHead
	return kv.k[layer][off : off+kv.kHead]
}

func (kv *kvCache) valHead(layer, pos, g int) []byte {
	off := pos*kv.vRow + g*kv.vHead
	return kv.v[layer][off : off+kv.vHead]
}

// accumulateV writes o = Σ_u p[u]·v_u (head g, positions 0..len(p)-1), following llama.cpp:
// for an f16/bf16 cache the probabilities are first rounded to that type (the
// non-flash-attention V·softmax product converts them; p is rounded in place); for f32 and
// quantized caches they stay f32 and the values are dequantized (the flash-attention path,
// which llama.cpp requires for a quantized V cache).
func (kv *kvCache) accumulateV(layer, g int, p, o, tmp []float32) {
	n := len(p)
	if kv.vTrans {
		vl := kv.v[layer]
		es := kv.vElem
		roundTo(kv.tv, p) // p in the value type, as ggml converts it for the dot products
		// llama.cpp's V·softmax runs over its padded KV length (a multiple of 256) with zero
		// probabilities past the last position, so the 32-element blocks of its vec_dot
		// kernels never leave a scalar tail: pad p with zeros to a multiple of 32 likewise.
		if np := (n + 31) &^ 31; np != n {
			if cap(p) >= np {
				p = p[:np]
			} else {
				p = append(p, make([]float32, np-n)...)
			}
			clear(p[n:])
			n = np
		}
		for d := range o {
			c := g*kv.hd + d
			row := vl[c*kv.vStride*es : (c*kv.vStride+n)*es]
			switch kv.tv {
			case gguf.TypeF32:
				o[d] = kDotF32(bytesF32(row), p)
			case gguf.TypeF16:
				o[d] = kDotF16F32(row, p)
			case gguf.TypeBF16:
				o[d] = kDotBF16F32(row, p)
			}
		}
		return
	}
	clear(o)
	tmp = tmp[:kv.hd]
	for u, pu := range p {
		if err := kDequant(kv.tv, kv.valHead(layer, u, g), tmp); err != nil {
			panic(err) // cache types are validated when the cache is made
		}
		axpyF32(o, pu, tmp)
	}
}
