package cuda

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"unsafe"

	"github.com/tq-project/tq/gguf"
)

// Buffer is a view of n float32 elements in device memory. The zero Buffer is "none" (used for
// optional operands). Slices of an allocation share it; only the allocation itself is freed.
type Buffer struct {
	ptr uint64
	n   int
}

// Len is the number of float32 elements in the view.
func (b Buffer) Len() int { return b.n }

// IsZero reports whether b is the zero Buffer.
func (b Buffer) IsZero() bool { return b.ptr == 0 }

// Slice returns elements [off, off+n) of b. It panics when the range is outside b, like slicing a
// Go slice out of range.
func (b Buffer) Slice(off, n int) Buffer {
	if off < 0 || n < 0 || off > b.n || n > b.n-off {
		panic(fmt.Sprintf("cuda: Buffer.Slice(%d, %d) of a buffer of %d elements", off, n, b.n))
	}
	return Buffer{b.ptr + uint64(off)*4, n}
}

// Tensor is a weight tensor uploaded to the device in its GGUF encoding: Mats matrices of Rows
// rows of Cols elements (ggml ne {Cols, Rows, Mats}), RowBytes bytes per row.
type Tensor struct {
	Name     string
	Type     gguf.GGMLType
	Cols     int
	Rows     int
	Mats     int
	RowBytes int
	ptr      uint64
	size     int64
}

// Bytes is the device memory the tensor occupies.
func (t *Tensor) Bytes() int64 { return t.size }

// Alloc allocates a buffer of n float32 elements (uninitialised).
func (d *Device) Alloc(n int) (Buffer, error) {
	if n <= 0 || int64(n) > math.MaxInt64/4 {
		return Buffer{}, fmt.Errorf("cuda: Alloc(%d): size must be positive", n)
	}
	var b Buffer
	err := d.do(func() error {
		p, err := d.alloc(int64(n) * 4)
		b = Buffer{p, n}
		return err
	})
	return b, err
}

// Free releases a buffer returned by Alloc or UploadF32 (not a Slice of one).
func (d *Device) Free(b Buffer) error {
	return d.do(func() error {
		if err := d.noCapture("Free"); err != nil {
			return err
		}
		if err := d.drv.call(fnStreamSynchronize, 0); err != nil {
			return err
		}
		return d.free(b.ptr)
	})
}

// Write copies src into the first len(src) elements of dst.
func (d *Device) Write(dst Buffer, src []float32) error {
	if len(src) > dst.n {
		return fmt.Errorf("cuda: Write of %d elements into a buffer of %d", len(src), dst.n)
	}
	if len(src) == 0 {
		return nil
	}
	err := d.do(func() error { return d.htod(dst.ptr, unsafe.Pointer(&src[0]), int64(len(src))*4) })
	runtime.KeepAlive(src)
	return err
}

// Read copies the first len(dst) elements of src into dst, after all queued work has finished.
func (d *Device) Read(dst []float32, src Buffer) error {
	if len(dst) > src.n {
		return fmt.Errorf("cuda: Read of %d elements from a buffer of %d", len(dst), src.n)
	}
	if len(dst) == 0 {
		return nil
	}
	err := d.do(func() error { return d.dtoh(unsafe.Pointer(&dst[0]), src.ptr, int64(len(dst))*4) })
	runtime.KeepAlive(dst)
	return err
}

// Copy copies min(dst.Len(), src.Len()) elements from src to dst on the device.
func (d *Device) Copy(dst, src Buffer) error {
	n := min(dst.n, src.n)
	if n == 0 {
		return nil
	}
	return d.do(func() error {
		if err := d.noCapture("Copy"); err != nil {
			return err
		}
		return d.drv.call(fnMemcpyDtoD, uintptr(dst.ptr), uintptr(src.ptr), uintptr(n*4))
	})
}

// UploadF32 allocates a buffer holding a copy of v (norm weights, biases, RoPE factors).
func (d *Device) UploadF32(v []float32) (Buffer, error) {
	b, err := d.Alloc(len(v))
	if err != nil {
		return Buffer{}, err
	}
	if err := d.Write(b, v); err != nil {
		d.Free(b)
		return Buffer{}, err
	}
	return b, nil
}

// Upload copies a weight tensor to the device once, straight from its GGUF bytes (typically a
// slice of the memory-mapped file). dims are ggml's ne: {cols}, {cols, rows} or {cols, rows, mats}.
// The byte size must match the type and shape exactly.
func (d *Device) Upload(name string, t gguf.GGMLType, dims []int64, data []byte) (*Tensor, error) {
	if len(dims) < 1 || len(dims) > 3 {
		return nil, fmt.Errorf("cuda: tensor %q: %d dimensions, want 1 to 3", name, len(dims))
	}
	shape := [3]int64{1, 1, 1}
	for i, v := range dims {
		if v <= 0 || v > math.MaxInt32 {
			return nil, fmt.Errorf("cuda: tensor %q: dimension %d is %d", name, i, v)
		}
		shape[i] = v
	}
	rb, err := t.RowBytes(shape[0])
	if err != nil {
		return nil, fmt.Errorf("cuda: tensor %q: %v", name, err)
	}
	rows := shape[1] * shape[2]
	if rb > math.MaxInt32 || rows > math.MaxInt64/rb {
		return nil, fmt.Errorf("cuda: tensor %q: shape %v is too large", name, dims)
	}
	size := rb * rows
	if int64(len(data)) != size {
		return nil, fmt.Errorf("cuda: tensor %q (%s %v) has %d bytes, want %d", name, t, dims, len(data), size)
	}
	w := &Tensor{Name: name, Type: t, Cols: int(shape[0]), Rows: int(shape[1]), Mats: int(shape[2]), RowBytes: int(rb), size: size}
	err = d.do(func() error {
		p, err := d.alloc(size)
		if err != nil {
			return err
		}
		if err := d.htod(p, unsafe.Pointer(&data[0]), size); err != nil {
			d.free(p)
			return err
		}
		w.ptr = p
		return nil
	})
	runtime.KeepAlive(data)
	if err != nil {
		return nil, fmt.Errorf("cuda: uploading tensor %q: %w", name, err)
	}
	return w, nil
}

// FreeTensor releases an uploaded tensor.
func (d *Device) FreeTensor(t *Tensor) error {
	return d.do(func() error {
		if err := d.noCapture("FreeTensor"); err != nil {
			return err
		}
		if err := d.drv.call(fnStreamSynchronize, 0); err != nil {
			return err
		}
		err := d.free(t.ptr)
		t.ptr = 0
		return err
	})
}

// KVCache is a key/value cache on the device: per layer, Ctx rows of KVDim elements for keys (of
// type K) and as many for values (of type V); each type is F16 or Q8_0 (34-byte blocks of 32).
type KVCache struct {
	Layers, Ctx, KVDim int
	K, V               gguf.GGMLType
	k, v               []uint64
}

// KVCacheTypes lists the cache types NewKVCache takes.
func KVCacheTypes() []gguf.GGMLType { return []gguf.GGMLType{gguf.TypeF16, gguf.TypeQ8_0} }

// kvRowBytes is the size of one cache row of n elements of type t.
func kvRowBytes(t gguf.GGMLType, n int) int64 {
	if t == gguf.TypeQ8_0 {
		return int64(n/32) * 34
	}
	return int64(n) * 2
}

// kvTypeCode is the kernels' code of a cache type (KV_F16, KV_Q8_0 in attention.cu).
func kvTypeCode(t gguf.GGMLType) int32 {
	if t == gguf.TypeQ8_0 {
		return 8
	}
	return 1
}

// Bytes is the device memory the cache holds.
func (c *KVCache) Bytes() int64 {
	return int64(c.Layers) * int64(c.Ctx) * (kvRowBytes(c.K, c.KVDim) + kvRowBytes(c.V, c.KVDim))
}

// NewKVCache allocates a KV cache of layers × ctx positions × kvDim (n_head_kv·head_dim) with keys
// of type kt and values of type vt (KVCacheTypes; q8_0 needs kvDim and the head size to be
// multiples of 32, which Attention checks).
func (d *Device) NewKVCache(layers, ctx, kvDim int, kt, vt gguf.GGMLType) (*KVCache, error) {
	if layers <= 0 || ctx <= 0 || kvDim <= 0 || ctx > math.MaxInt32/kvDim {
		return nil, fmt.Errorf("cuda: KV cache of %d layers × %d positions × %d", layers, ctx, kvDim)
	}
	for _, t := range []gguf.GGMLType{kt, vt} {
		if !slices.Contains(KVCacheTypes(), t) {
			return nil, fmt.Errorf("cuda: KV cache type %s (the device caches take f16 and q8_0)", t)
		}
		if t == gguf.TypeQ8_0 && kvDim%32 != 0 {
			return nil, fmt.Errorf("cuda: a q8_0 KV cache needs rows of a multiple of 32 elements, not %d", kvDim)
		}
	}
	c := &KVCache{Layers: layers, Ctx: ctx, KVDim: kvDim, K: kt, V: vt}
	ksize, vsize := int64(ctx)*kvRowBytes(kt, kvDim), int64(ctx)*kvRowBytes(vt, kvDim)
	err := d.do(func() error {
		for range layers {
			k, err := d.alloc(ksize)
			if err != nil {
				return err
			}
			c.k = append(c.k, k)
			v, err := d.alloc(vsize)
			if err != nil {
				return err
			}
			c.v = append(c.v, v)
		}
		return nil
	})
	if err != nil {
		d.FreeKVCache(c)
		return nil, fmt.Errorf("cuda: KV cache: %w", err)
	}
	return c, nil
}

// FreeKVCache releases a KV cache.
func (d *Device) FreeKVCache(c *KVCache) error {
	return d.do(func() error {
		if err := d.noCapture("FreeKVCache"); err != nil {
			return err
		}
		var first error
		if err := d.drv.call(fnStreamSynchronize, 0); err != nil {
			first = err
		}
		if err := d.freeAll(append(c.k, c.v...)); err != nil && first == nil {
			first = err
		}
		c.k, c.v = nil, nil
		return first
	})
}
