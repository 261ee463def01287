package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Recorded graphs. Decoding one token launches a few dozen small kernels per block; issued one by
// one through the driver each costs microseconds of host time, which for small models exceeds the
// kernels' own run time. A Graph is such a sequence recorded once and replayed with a single
// cuGraphLaunch. Recording does not use stream capture (the legacy default stream cannot be
// captured): between BeginCapture and EndCapture every kernel launch of the capturing goroutine is
// stored instead of run, and EndCapture builds a graph of those kernel nodes in call order (each
// depending on the one before) and instantiates it.
//
// Position-dependent kernels (RoPE, KVStore, Attention) read the position from a device int32
// owned by the graph while it is recorded, so one graph serves every later decode step:
// Graph.Launch(pos) writes pos there and launches. Scratch memory the recorded kernels use is
// allocated for the graph alone, so other work on the device cannot free or move it.
//
// While a capture is in progress the device belongs to the capturing goroutine (its OS thread is
// locked until EndCapture or AbortCapture): other goroutines' operations wait. Anything that would
// act at once rather than be recorded (copies between host and device, Sync, freeing memory)
// fails with ErrCapturing, and the caller aborts the capture and runs the work directly.

// ErrCapturing is returned by operations that cannot be recorded into a graph.
var ErrCapturing = errors.New("cuda: operation not allowed while a graph is recorded")

// ErrNoGraphs means the driver lacks the graph functions (CUDA 11.4 or newer has them).
var ErrNoGraphs = errors.New("cuda: the driver has no graph functions")

// Capturer is implemented by backends that can record launches into a Graph.
type Capturer interface {
	// GraphsSupported reports whether the driver has the graph functions.
	GraphsSupported() bool
	// BeginCapture starts recording the calling goroutine's kernel launches.
	BeginCapture() error
	// EndCapture stops recording and returns the instantiated graph.
	EndCapture() (*Graph, error)
	// AbortCapture stops recording and discards what was recorded.
	AbortCapture()
}

var _ Capturer = (*Device)(nil)

// capture is a recording in progress.
type capture struct {
	tid     int // OS thread of the capturing goroutine
	pos     uint64
	nodes   []graphNode
	owned   []uint64 // allocations the graph will own: pos, then scratch
	scratch map[string]devBuf
	maxPos  int // the largest position every recorded launch accepts
}

// graphNode is one recorded launch.
type graphNode struct {
	fn          uintptr
	grid, block dim3
	args        [maxArgs]uint64
	n           int
}

// kernelNodeParams is CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h); the v1 struct is its first fields.
type kernelNodeParams struct {
	fn                  uintptr
	gx, gy, gz          uint32
	bx, by, bz          uint32
	sharedMem           uint32
	_                   uint32
	kernelParams, extra uintptr
	kern, ctx           uintptr
}

// Graph is a recorded sequence of kernel launches on a device.
type Graph struct {
	d      *Device
	exec   uintptr
	pos    uint64
	owned  []uint64
	maxPos int
	nodes  int
}

// Nodes returns the number of kernel launches the graph replays.
func (g *Graph) Nodes() int { return g.nodes }

// GraphsSupported reports whether the driver has the graph functions.
func (d *Device) GraphsSupported() bool { return d.drv.graphs }

// BeginCapture starts recording the calling goroutine's kernel launches; see Graph.
func (d *Device) BeginCapture() error {
	if !d.drv.graphs {
		return ErrNoGraphs
	}
	runtime.LockOSThread()
	err := d.do(func() error {
		if d.cap != nil {
			return errors.New("cuda: a graph is already being recorded")
		}
		p, err := d.alloc(4)
		if err != nil {
			return err
		}
		d.cap = &capture{tid: gettid(), pos: p, owned: []uint64{p}, scratch: map[string]devBuf{}, maxPos: math.MaxInt32}
		return nil
	})
	if err != nil {
		runtime.UnlockOSThread()
	}
	return err
}

// endCapture ends the recording of the calling goroutine and returns it; the lock is held.
func (d *Device) endCapture() (*capture, error) {
	c := d.cap
	if c == nil || c.tid != gettid() {
		return nil, errors.New("cuda: no graph is being recorded by this goroutine")
	}
	d.cap = nil
	d.capCond.Broadcast()
	return c, nil
}

// AbortCapture stops recording and frees what the graph would have owned.
func (d *Device) AbortCapture() {
	d.do(func() error {
		c, err := d.endCapture()
		if err == nil {
			d.freeAll(c.owned)
		}
		return err
	})
	runtime.UnlockOSThread()
}

// EndCapture stops recording and builds and instantiates the graph of the recorded launches.
func (d *Device) EndCapture() (*Graph, error) {
	defer runtime.UnlockOSThread()
	var g *Graph
	err := d.do(func() error {
		c, err := d.endCapture()
		if err != nil {
			return err
		}
		if len(c.nodes) == 0 {
			err = errors.New("cuda: no kernel launch was recorded")
		} else {
			g, err = d.instantiate(c)
		}
		if err != nil {
			d.freeAll(c.owned)
		}
		return err
	})
	return g, err
}

// instantiate builds the graph of c's launches (a chain in call order) and instantiates it; the
// lock is held.
func (d *Device) instantiate(c *capture) (*Graph, error) {
	var graph uintptr
	if err := d.drv.gcall(gfnCreate, uintptr(unsafe.Pointer(&graph)), 0); err != nil {
		return nil, err
	}
	defer d.drv.gcall(gfnDestroy, graph) // the instantiated graph does not need it
	params := new(kernelNodeParams)
	prev := new(uintptr)
	var pin runtime.Pinner
	pin.Pin(params)
	pin.Pin(prev)
	pin.Pin(d.args)
	defer pin.Unpin()
	for i := range c.nodes {
		nd := &c.nodes[i]
		d.args.slab = nd.args
		d.args.n = nd.n
		*params = kernelNodeParams{fn: nd.fn, gx: nd.grid.x, gy: nd.grid.y, gz: nd.grid.z,
			bx: nd.block.x, by: nd.block.y, bz: nd.block.z, kernelParams: d.args.params()}
		deps, ndeps := uintptr(0), uintptr(0)
		if i > 0 {
			deps, ndeps = uintptr(unsafe.Pointer(prev)), 1
		}
		var node uintptr
		// The driver copies the parameter values into the node.
		if err := d.drv.gcall(gfnAddKernelNode, uintptr(unsafe.Pointer(&node)), graph, deps, ndeps,
			uintptr(unsafe.Pointer(params))); err != nil {
			return nil, fmt.Errorf("graph node %d of %d: %w", i, len(c.nodes), err)
		}
		*prev = node
	}
	var exec uintptr
	if err := d.drv.gcall(gfnInstantiate, uintptr(unsafe.Pointer(&exec)), graph, 0); err != nil {
		return nil, err
	}
	g := &Graph{d: d, exec: exec, pos: c.pos, owned: c.owned, maxPos: c.maxPos, nodes: len(c.nodes)}
	d.graphs[g] = struct{}{}
	return g, nil
}

// Launch replays the graph with the recorded position-dependent kernels at position pos (queued
// on the default stream after earlier work, like any launch).
func (g *Graph) Launch(pos int) error {
	if pos < 0 || pos > g.maxPos {
		return fmt.Errorf("cuda: graph launch at position %d: the recorded launches accept 0..%d", pos, g.maxPos)
	}
	d := g.d
	return d.do(func() error {
		if _, ok := d.graphs[g]; !ok {
			return errors.New("cuda: launch of a destroyed graph")
		}
		v := int32(pos)
		if err := d.htod(g.pos, unsafe.Pointer(&v), 4); err != nil {
			return err
		}
		return d.drv.gcall(gfnLaunch, g.exec, 0)
	})
}

// Destroy frees the graph and the memory it owns (after queued work). Destroying twice, or after
// the device was closed, does nothing.
func (g *Graph) Destroy() error {
	d := g.d
	err := d.do(func() error { return d.destroyGraph(g) })
	if errors.Is(err, errClosed) {
		return nil
	}
	return err
}

// destroyGraph releases g; the lock is held.
func (d *Device) destroyGraph(g *Graph) error {
	if _, ok := d.graphs[g]; !ok {
		return nil
	}
	delete(d.graphs, g)
	first := d.drv.call(fnStreamSynchronize, 0)
	if err := d.drv.gcall(gfnExecDestroy, g.exec); err != nil && first == nil {
		first = err
	}
	if err := d.freeAll(g.owned); err != nil && first == nil {
		first = err
	}
	return first
}

// noCapture fails operations that would act immediately instead of being recorded.
func (d *Device) noCapture(op string) error {
	if d.cap != nil {
		return fmt.Errorf("%w: %s", ErrCapturing, op)
	}
	return nil
}

// posArg is the position pointer argument of the position-dependent kernels: the graph's device
// position while recording (bounding the positions the graph accepts by maxPos), else null.
func (d *Device) posArg(maxPos int) arg {
	c := d.cap
	if c == nil {
		return argPtr(0)
	}
	c.maxPos = min(c.maxPos, maxPos)
	return argPtr(c.pos)
}
