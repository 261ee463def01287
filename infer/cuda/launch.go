package cuda

import (
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"

	"github.com/tq-project/tq/gguf"
)

// dim3 is a CUDA grid or block shape.
type dim3 struct{ x, y, z uint32 }

// Hardware limits every CUDA device since compute capability 3.0 guarantees.
const (
	maxGridX        = 1<<31 - 1
	maxGridYZ       = 65535
	maxBlockThreads = 1024
)

// arg is one kernel argument as the host packs it.
type arg struct {
	kind paramKind
	bits uint64
}

func argPtr(p uint64) arg  { return arg{pPtr, p} }
func argI32(v int32) arg   { return arg{pI32, uint64(uint32(v))} }
func argF32(f float32) arg { return arg{pF32, uint64(math.Float32bits(f))} }
func argBool(b bool) arg {
	if b {
		return argI32(1)
	}
	return argI32(0)
}

// maxArgs bounds the parameters of the kernels this package launches.
const maxArgs = 16

// argPack is the kernelParams block of one cuLaunchKernel call: slot i of slab holds argument i
// (little-endian, so a 4-byte parameter is the low half of its slot) and ptrs[i] points at it.
// The driver copies the arguments during the call, so one pack is reused for every launch; it is
// pinned while the driver reads it.
type argPack struct {
	slab [maxArgs]uint64
	ptrs [maxArgs]uintptr
	n    int
}

// pack validates args against spec and stores them in the slab.
func (p *argPack) pack(spec *kernelSpec, args []arg) error {
	if len(args) != len(spec.params) {
		return fmt.Errorf("cuda: kernel %s takes %d arguments, got %d", spec.name, len(spec.params), len(args))
	}
	if len(args) > maxArgs {
		return fmt.Errorf("cuda: kernel %s: more than %d arguments", spec.name, maxArgs)
	}
	for i, a := range args {
		if a.kind != spec.params[i] {
			return fmt.Errorf("cuda: kernel %s: argument %d is %s, the kernel takes %s", spec.name, i, a.kind, spec.params[i])
		}
		p.slab[i] = a.bits
	}
	p.n = len(args)
	return nil
}

// params fills ptrs with the addresses of the slab slots and returns the kernelParams pointer.
// The pack must be pinned (or otherwise kept in place) until the launch call returns.
func (p *argPack) params() uintptr {
	for i := 0; i < p.n; i++ {
		p.ptrs[i] = uintptr(unsafe.Pointer(&p.slab[i]))
	}
	return uintptr(unsafe.Pointer(&p.ptrs[0]))
}

// checkGeometry validates a launch shape against the hardware limits.
func checkGeometry(name string, grid, block dim3) error {
	if grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0 {
		return fmt.Errorf("cuda: kernel %s: empty launch grid %v block %v", name, grid, block)
	}
	if grid.x > maxGridX || grid.y > maxGridYZ || grid.z > maxGridYZ {
		return fmt.Errorf("cuda: kernel %s: grid %v exceeds the limits (%d, %d, %d)", name, grid, maxGridX, maxGridYZ, maxGridYZ)
	}
	if uint64(block.x)*uint64(block.y)*uint64(block.z) > maxBlockThreads {
		return fmt.Errorf("cuda: kernel %s: block %v has more than %d threads", name, block, maxBlockThreads)
	}
	return nil
}

// launch runs kernel id with the given shape and arguments on the default stream, or records it
// while a graph is captured. The caller holds the device lock with the context current (see
// Device.do).
func (d *Device) launch(id kernelID, grid, block dim3, args ...arg) error {
	spec := &kernelTable[id]
	if err := checkGeometry(spec.name, grid, block); err != nil {
		return err
	}
	if err := d.args.pack(spec, args); err != nil {
		return err
	}
	if c := d.cap; c != nil { // recorded for a graph (graph.go), not run
		c.nodes = append(c.nodes, graphNode{fn: d.fns[id], grid: grid, block: block, args: d.args.slab, n: d.args.n})
		return nil
	}
	var start time.Time
	if d.prof != nil {
		start = time.Now()
	}
	var pin runtime.Pinner
	pin.Pin(d.args)
	err := d.drv.call(fnLaunchKernel, d.fns[id],
		uintptr(grid.x), uintptr(grid.y), uintptr(grid.z),
		uintptr(block.x), uintptr(block.y), uintptr(block.z),
		0, 0, d.args.params(), 0)
	pin.Unpin()
	if err == nil && d.prof != nil {
		err = d.drv.call(fnStreamSynchronize, 0)
		d.prof.record(id, grid, block, time.Since(start))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", spec.name, err)
	}
	return nil
}

// Launch geometry of each kernel, as its comment in the .cu source requires.

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// mvGeometry: mvWarps warps per block, each taking rowsPerWarp rows (mvRowsPerWarp).
func mvGeometry(nrows, rowsPerWarp int) (grid, block dim3) {
	return dim3{uint32(ceilDiv(nrows, mvWarps*rowsPerWarp)), 1, 1}, dim3{32 * mvWarps, 1, 1}
}

// mvRowsPerWarp is the rows one warp of a mat-vec kernel takes (mv_rows in matvec.cu): mvRows
// for the single-row (_t1) and routed-expert (_ids) kernels of the quantized types, else 1.
func mvRowsPerWarp(t gguf.GGMLType, batched bool) int {
	if batched || t == gguf.TypeF32 || t == gguf.TypeF16 || t == gguf.TypeBF16 {
		return 1
	}
	return mvRows
}

// rowGeometry: one block of rowThreads per row (tq_rmsnorm).
func rowGeometry(rows int) (grid, block dim3) {
	return dim3{uint32(rows), 1, 1}, dim3{rowThreads, 1, 1}
}

// elemGeometry: a 1-D grid-stride launch over n elements (tq_swiglu, tq_add, tq_add_rows).
func elemGeometry(n int) (grid, block dim3) {
	g := min(ceilDiv(n, rowThreads), 1<<16)
	return dim3{uint32(max(g, 1)), 1, 1}, dim3{rowThreads, 1, 1}
}

// rowsByColsGeometry: grid (ceil(n/rowThreads), rows) (tq_kv_store with grid.z = 2, tq_gather_rows,
// tq_scatter_rows, tq_moe_combine).
func rowsByColsGeometry(n, rows int) (grid, block dim3) {
	return dim3{uint32(ceilDiv(n, rowThreads)), uint32(rows), 1}, dim3{rowThreads, 1, 1}
}

// ropeGeometry: grid (heads, T), one thread per rotated pair.
func ropeGeometry(nheads, T, nrot int) (grid, block dim3) {
	return dim3{uint32(nheads), uint32(T), 1}, dim3{uint32(nrot / 2), 1, 1}
}

// attnGeometry: grid (heads, T), attnThreads per block.
func attnGeometry(nhead, T int) (grid, block dim3) {
	return dim3{uint32(nhead), uint32(T), 1}, dim3{attnThreads, 1, 1}
}

// moeGeometry: one block per token.
func moeGeometry(T int) (grid, block dim3) {
	return dim3{uint32(T), 1, 1}, dim3{moeThreads, 1, 1}
}
