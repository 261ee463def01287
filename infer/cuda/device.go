package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// CUdevice_attribute values (cuda.h).
const (
	attrMultiprocessorCount = 16
	attrComputeMajor        = 75
	attrComputeMinor        = 76
)

// CUjit_option values (cuda.h) used to collect the JIT compiler's error log.
const (
	jitErrorLogBuffer          = 5
	jitErrorLogBufferSizeBytes = 6
)

// minComputeCapability is what the PTX targets (-arch=compute_75).
const minComputeCapability = 75

var errClosed = errors.New("cuda: device is closed")

// Info describes an opened device.
type Info struct {
	Name          string
	Ordinal       int
	ComputeMajor  int
	ComputeMinor  int
	SMs           int    // multiprocessors
	TotalMemory   int64  // bytes
	DriverVersion string // e.g. "12.8"
	Library       string // the driver library that was loaded
}

func (i Info) String() string {
	return fmt.Sprintf("%s (device %d, sm_%d%d, %d SMs, %.1f GiB, driver %s)", i.Name, i.Ordinal,
		i.ComputeMajor, i.ComputeMinor, i.SMs, float64(i.TotalMemory)/(1<<30), i.DriverVersion)
}

// Device is an opened CUDA device with the tq kernels loaded. Its methods are safe for concurrent
// use (they serialise on one lock) and run on the device's default stream in call order; results
// copied back to the host (Read, MoERoute) are complete when the call returns.
type Device struct {
	drv  *driver
	info Info
	dev  int32
	ctx  uintptr

	mu      sync.Mutex
	closed  bool
	mods    []uintptr
	fns     []uintptr // by kernelID
	args    *argPack
	allocs  map[uint64]int64
	scratch map[string]devBuf
	graphs  map[*Graph]struct{}
	cap     *capture   // the recording in progress (graph.go), or nil
	capCond *sync.Cond // on mu: signalled when a recording ends
	prof    *profiler  // the launch profiler (profile.go), or nil
}

// devBuf is a raw device allocation.
type devBuf struct {
	ptr  uint64
	size int64
}

// Info returns the device description.
func (d *Device) Info() Info { return d.info }

// openDevice initialises the driver, retains the primary context of device ordinal and loads the
// kernel modules.
func openDevice(drv *driver, ordinal int) (*Device, error) {
	if err := drv.init(); err != nil {
		return nil, err
	}
	if err := checkKernelTable(); err != nil {
		return nil, err
	}
	var count int32
	if err := drv.call(fnDeviceGetCount, uintptr(unsafe.Pointer(&count))); err != nil {
		return nil, err
	}
	if count == 0 {
		return nil, fmt.Errorf("cuda: %w (cuDeviceGetCount = 0)", ErrNoDevice)
	}
	if ordinal < 0 || ordinal >= int(count) {
		return nil, fmt.Errorf("cuda: device %d requested, %d present", ordinal, count)
	}
	d := &Device{drv: drv, args: new(argPack), allocs: map[uint64]int64{}, scratch: map[string]devBuf{},
		graphs: map[*Graph]struct{}{}}
	d.capCond = sync.NewCond(&d.mu)
	d.info.Ordinal = ordinal
	d.info.Library = drv.path
	d.info.DriverVersion = drv.versionString()
	if err := drv.call(fnDeviceGet, uintptr(unsafe.Pointer(&d.dev)), uintptr(ordinal)); err != nil {
		return nil, err
	}
	var name [256]byte
	if err := drv.call(fnDeviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)), uintptr(d.dev)); err != nil {
		return nil, err
	}
	// not cString, which views 4 KiB: name is a 256-byte Go array
	if i := bytes.IndexByte(name[:], 0); i >= 0 {
		d.info.Name = string(name[:i])
	} else {
		d.info.Name = string(name[:])
	}
	for _, a := range []struct {
		attr int
		dst  *int
	}{{attrComputeMajor, &d.info.ComputeMajor}, {attrComputeMinor, &d.info.ComputeMinor}, {attrMultiprocessorCount, &d.info.SMs}} {
		var v int32
		if err := drv.call(fnDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a.attr), uintptr(d.dev)); err != nil {
			return nil, err
		}
		*a.dst = int(v)
	}
	if cc := d.info.ComputeMajor*10 + d.info.ComputeMinor; cc < minComputeCapability {
		return nil, fmt.Errorf("cuda: %s has compute capability %d.%d; the tq kernels need 7.5 or newer",
			d.info.Name, d.info.ComputeMajor, d.info.ComputeMinor)
	}
	var total uint64
	if err := drv.call(fnDeviceTotalMem, uintptr(unsafe.Pointer(&total)), uintptr(d.dev)); err != nil {
		return nil, err
	}
	d.info.TotalMemory = int64(total)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := drv.call(fnPrimaryCtxRetain, uintptr(unsafe.Pointer(&d.ctx)), uintptr(d.dev)); err != nil {
		return nil, err
	}
	if err := drv.call(fnCtxSetCurrent, d.ctx); err != nil {
		drv.call(fnPrimaryCtxRelease, uintptr(d.dev))
		return nil, err
	}
	if err := d.loadModules(); err != nil {
		d.release()
		return nil, err
	}
	return d, nil
}

// loadModules JIT-compiles the embedded PTX modules and looks up every kernel.
func (d *Device) loadModules() error {
	byModule := map[string]uintptr{}
	for _, m := range modules {
		src, err := ptxSource(m)
		if err != nil {
			return err
		}
		mod, err := d.loadPTX(m, src)
		if err != nil {
			return err
		}
		d.mods = append(d.mods, mod)
		byModule[m] = mod
	}
	d.fns = make([]uintptr, len(kernelTable))
	for i, spec := range kernelTable {
		name := append([]byte(spec.name), 0)
		if err := d.drv.call(fnModuleGetFunction, uintptr(unsafe.Pointer(&d.fns[i])), byModule[spec.module],
			uintptr(unsafe.Pointer(&name[0]))); err != nil {
			return fmt.Errorf("cuda: kernel %s in module %s: %w", spec.name, spec.module, err)
		}
	}
	return nil
}

// loadPTX loads one PTX module, returning the JIT error log on failure.
func (d *Device) loadPTX(name, src string) (uintptr, error) {
	img := append([]byte(src), 0)
	logBuf := make([]byte, 16<<10)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSizeBytes}
	vals := []uintptr{0, uintptr(len(logBuf))}
	var pin runtime.Pinner
	pin.Pin(&logBuf[0])
	pin.Pin(&img[0])
	vals[0] = uintptr(unsafe.Pointer(&logBuf[0]))
	var mod uintptr
	err := d.drv.call(fnModuleLoadDataEx, uintptr(unsafe.Pointer(&mod)), uintptr(unsafe.Pointer(&img[0])),
		uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	pin.Unpin()
	if err != nil {
		if log := strings.TrimSpace(cString(&logBuf[0])); log != "" {
			return 0, fmt.Errorf("cuda: loading kernels/%s.ptx: %w\nJIT log: %s", name, err, log)
		}
		return 0, fmt.Errorf("cuda: loading kernels/%s.ptx: %w", name, err)
	}
	return mod, nil
}

// do runs f with the device lock held and the device's context current on this OS thread (CUDA
// contexts are per thread; goroutines are not).
func (d *Device) do(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	// While a graph is recorded, only the recording goroutine (on its locked OS thread) may use
	// the device; the others wait for the end of the recording.
	for d.cap != nil && d.cap.tid != gettid() {
		d.capCond.Wait()
		if d.closed {
			return errClosed
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.drv.call(fnCtxSetCurrent, d.ctx); err != nil {
		return err
	}
	return f()
}

// release frees everything the device holds; the caller has the context current.
func (d *Device) release() error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	if len(d.allocs) > 0 {
		keep(d.drv.call(fnStreamSynchronize, 0))
	}
	for g := range d.graphs {
		keep(d.drv.gcall(gfnExecDestroy, g.exec))
	}
	clear(d.graphs)
	for p := range d.allocs {
		keep(d.drv.call(fnMemFree, uintptr(p)))
	}
	clear(d.allocs)
	clear(d.scratch)
	for _, m := range d.mods {
		keep(d.drv.call(fnModuleUnload, m))
	}
	d.mods = nil
	keep(d.drv.call(fnPrimaryCtxRelease, uintptr(d.dev)))
	return first
}

// Close frees every allocation of the device, unloads the kernels and releases the context.
// The device cannot be used afterwards.
func (d *Device) Close() error {
	err := d.do(func() error { return d.release() })
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	if errors.Is(err, errClosed) {
		return nil
	}
	return err
}

// Sync waits for all queued work on the device and reports an asynchronous kernel failure.
func (d *Device) Sync() error {
	return d.do(func() error {
		if err := d.noCapture("Sync"); err != nil {
			return err
		}
		return d.drv.call(fnStreamSynchronize, 0)
	})
}

// MemInfo returns the free and total device memory in bytes.
func (d *Device) MemInfo() (free, total int64, err error) {
	err = d.do(func() error {
		var f, t uint64
		if err := d.drv.call(fnMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))); err != nil {
			return err
		}
		free, total = int64(f), int64(t)
		return nil
	})
	return free, total, err
}

// alloc allocates size bytes (size > 0); the caller holds the lock.
func (d *Device) alloc(size int64) (uint64, error) {
	if size <= 0 {
		return 0, fmt.Errorf("cuda: allocation of %d bytes", size)
	}
	var p uint64
	if err := d.drv.call(fnMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size)); err != nil {
		return 0, fmt.Errorf("allocating %d bytes: %w", size, err)
	}
	d.allocs[p] = size
	return p, nil
}

// free releases an allocation made by alloc; the caller holds the lock.
func (d *Device) free(p uint64) error {
	if _, ok := d.allocs[p]; !ok {
		return fmt.Errorf("cuda: free of %#x, which is not an allocation of this device", p)
	}
	delete(d.allocs, p)
	return d.drv.call(fnMemFree, uintptr(p))
}

// freeAll frees the allocations ptrs and returns the first error; the lock is held.
func (d *Device) freeAll(ptrs []uint64) error {
	var first error
	for _, p := range ptrs {
		if err := d.free(p); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// scratchBuf returns a device buffer of at least size bytes kept under key, growing it when
// needed. Its contents are undefined; it is reused by later calls with the same key.
func (d *Device) scratchBuf(key string, size int64) (uint64, error) {
	if c := d.cap; c != nil {
		// A recorded graph gets scratch of its own, freed with it.
		if b, ok := c.scratch[key]; ok && b.size >= size {
			return b.ptr, nil
		}
		size = max(size, 4096)
		p, err := d.alloc(size)
		if err != nil {
			return 0, err
		}
		c.owned = append(c.owned, p)
		c.scratch[key] = devBuf{p, size}
		return p, nil
	}
	if b, ok := d.scratch[key]; ok && b.size >= size {
		return b.ptr, nil
	} else if ok {
		// Queued kernels may still read the old buffer.
		if err := d.drv.call(fnStreamSynchronize, 0); err != nil {
			return 0, err
		}
		if err := d.free(b.ptr); err != nil {
			return 0, err
		}
		delete(d.scratch, key)
	}
	size = max(size, 4096)
	p, err := d.alloc(size)
	if err != nil {
		return 0, err
	}
	d.scratch[key] = devBuf{p, size}
	return p, nil
}

// htod copies n bytes from host address src to device address dst; the caller holds the lock and
// keeps src alive.
func (d *Device) htod(dst uint64, src unsafe.Pointer, n int64) error {
	if err := d.noCapture("copy to the device"); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return d.drv.call(fnMemcpyHtoD, uintptr(dst), uintptr(src), uintptr(n))
}

// dtoh copies n bytes from device address src to host address dst.
func (d *Device) dtoh(dst unsafe.Pointer, src uint64, n int64) error {
	if err := d.noCapture("copy from the device"); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return d.drv.call(fnMemcpyDtoH, uintptr(dst), uintptr(src), uintptr(n))
}
