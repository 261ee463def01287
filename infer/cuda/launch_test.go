package cuda

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/tq-project/tq/gguf"
)

func TestArgPacking(t *testing.T) {
	spec := &kernelTable[kRMSNorm] // (ptr x, ptr w, ptr y, int n, int rows, float eps)
	var p argPack
	args := []arg{argPtr(0x7f0000001000), argPtr(0), argPtr(0xdeadbeef00), argI32(-7), argI32(4096), argF32(1e-6)}
	if err := p.pack(spec, args); err != nil {
		t.Fatal(err)
	}
	kp := p.params()
	if kp != uintptr(unsafe.Pointer(&p.ptrs[0])) {
		t.Fatal("params() must point at the pointer array")
	}
	// Read every argument the way the driver does: through ptrs[i], with the parameter's size.
	mem := func(i, size int) []byte {
		if p.ptrs[i] != uintptr(unsafe.Pointer(&p.slab[i])) {
			t.Fatalf("ptrs[%d] does not point at slot %d", i, i)
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&p.slab[i])), size)
	}
	if got := binary.LittleEndian.Uint64(mem(0, 8)); got != 0x7f0000001000 {
		t.Errorf("ptr arg = %#x", got)
	}
	if got := binary.LittleEndian.Uint64(mem(1, 8)); got != 0 {
		t.Errorf("null ptr arg = %#x", got)
	}
	if got := int32(binary.LittleEndian.Uint32(mem(3, 4))); got != -7 {
		t.Errorf("i32 arg = %d", got)
	}
	if got := int32(binary.LittleEndian.Uint32(mem(4, 4))); got != 4096 {
		t.Errorf("i32 arg = %d", got)
	}
	if got := math.Float32frombits(binary.LittleEndian.Uint32(mem(5, 4))); got != 1e-6 {
		t.Errorf("f32 arg = %g", got)
	}
	if p.n != 6 {
		t.Errorf("n = %d", p.n)
	}

	if err := p.pack(spec, args[:5]); err == nil || !strings.Contains(err.Error(), "takes 6 arguments, got 5") {
		t.Errorf("short argument list: %v", err)
	}
	bad := append([]arg(nil), args...)
	bad[5] = argI32(1)
	if err := p.pack(spec, bad); err == nil || !strings.Contains(err.Error(), "argument 5 is i32, the kernel takes f32") {
		t.Errorf("wrong kind: %v", err)
	}
	if argBool(true).bits != 1 || argBool(false).bits != 0 || argBool(true).kind != pI32 {
		t.Error("argBool")
	}
	for _, k := range kernelTable {
		if len(k.params) > maxArgs {
			t.Errorf("%s has %d parameters, the pack holds %d", k.name, len(k.params), maxArgs)
		}
	}
}

func TestLaunchGeometry(t *testing.T) {
	type shape struct{ grid, block dim3 }
	cases := []struct {
		name string
		got  shape
		want shape
	}{
		{"mv 1 row", shapeOf(mvGeometry(1, 1)), shape{dim3{1, 1, 1}, dim3{128, 1, 1}}},
		{"mv 4 rows", shapeOf(mvGeometry(4, 1)), shape{dim3{1, 1, 1}, dim3{128, 1, 1}}},
		{"mv 5 rows", shapeOf(mvGeometry(5, 1)), shape{dim3{2, 1, 1}, dim3{128, 1, 1}}},
		{"mv vocab", shapeOf(mvGeometry(151936, 1)), shape{dim3{37984, 1, 1}, dim3{128, 1, 1}}},
		{"mv 9 rows by 2", shapeOf(mvGeometry(9, 2)), shape{dim3{2, 1, 1}, dim3{128, 1, 1}}},
		{"rows", shapeOf(rowGeometry(7)), shape{dim3{7, 1, 1}, dim3{256, 1, 1}}},
		{"elem small", shapeOf(elemGeometry(1)), shape{dim3{1, 1, 1}, dim3{256, 1, 1}}},
		{"elem 257", shapeOf(elemGeometry(257)), shape{dim3{2, 1, 1}, dim3{256, 1, 1}}},
		{"elem capped", shapeOf(elemGeometry(1 << 30)), shape{dim3{1 << 16, 1, 1}, dim3{256, 1, 1}}},
		{"rows×cols", shapeOf(rowsByColsGeometry(1024, 3)), shape{dim3{4, 3, 1}, dim3{256, 1, 1}}},
		{"rope", shapeOf(ropeGeometry(32, 5, 128)), shape{dim3{32, 5, 1}, dim3{64, 1, 1}}},
		{"attn", shapeOf(attnGeometry(40, 2)), shape{dim3{40, 2, 1}, dim3{512, 1, 1}}},
		{"moe", shapeOf(moeGeometry(9)), shape{dim3{9, 1, 1}, dim3{256, 1, 1}}},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %+v want %+v", c.name, c.got, c.want)
		}
		if err := checkGeometry(c.name, c.got.grid, c.got.block); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// Every mv row is covered exactly once: rows = grid.x*warps*r >= nrows > (grid.x-1)*warps*r.
	for _, r := range []int{1, mvRows} {
		for n := 1; n < 100; n++ {
			g, _ := mvGeometry(n, r)
			if int(g.x)*mvWarps*r < n || int(g.x-1)*mvWarps*r >= n {
				t.Fatalf("mvGeometry(%d, %d) = %v", n, r, g)
			}
		}
	}
	for _, c := range []struct {
		t       gguf.GGMLType
		batched bool
		want    int
	}{{gguf.TypeQ4_K, false, mvRows}, {gguf.TypeQ8_0, false, mvRows}, {gguf.TypeQ4_K, true, 1},
		{gguf.TypeF16, false, 1}, {gguf.TypeBF16, false, 1}, {gguf.TypeF32, false, 1}} {
		if got := mvRowsPerWarp(c.t, c.batched); got != c.want {
			t.Errorf("mvRowsPerWarp(%s, %v) = %d, want %d", c.t, c.batched, got, c.want)
		}
	}
	for _, bad := range []shape{
		{dim3{0, 1, 1}, dim3{1, 1, 1}},
		{dim3{1, 65536, 1}, dim3{1, 1, 1}},
		{dim3{1, 1, 1}, dim3{1025, 1, 1}},
		{dim3{1, 1, 1}, dim3{32, 32, 2}},
		{dim3{1, 1, 1}, dim3{1, 0, 1}},
	} {
		if err := checkGeometry("k", bad.grid, bad.block); err == nil {
			t.Errorf("checkGeometry accepted %+v", bad)
		}
	}
}

func shapeOf(g, b dim3) struct{ grid, block dim3 } { return struct{ grid, block dim3 }{g, b} }

func TestMatvecKernelLookup(t *testing.T) {
	for i, ty := range mvTypes {
		k1, ok1 := matvecKernel(ty, false)
		k8, ok8 := matvecKernel(ty, true)
		if !ok1 || !ok8 {
			t.Fatalf("%s: no kernel", ty)
		}
		if kernelTable[k1].name != "tq_mv_"+mvNames[i]+"_t1" || kernelTable[k8].name != "tq_mv_"+mvNames[i]+"_t8" {
			t.Errorf("%s -> %s, %s", ty, kernelTable[k1].name, kernelTable[k8].name)
		}
	}
	if _, ok := matvecKernel(3 /* q4_1 */, false); ok {
		t.Error("q4_1 has no kernel")
	}
}
