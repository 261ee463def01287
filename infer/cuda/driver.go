package cuda

import (
	"fmt"
	"sync"
	"unsafe"
)

// Driver API functions this package calls, by index into driver.fn. The first block is resolved
// when the library is opened (enough to initialise and explain failures); the rest before a device
// is used, so a driver lacking one of them fails with a message naming it.
const (
	fnInit = iota
	fnDriverGetVersion
	fnGetErrorName
	fnGetErrorString
	fnDeviceGetCount
	numInitFns

	fnDeviceGet = iota - 1
	fnDeviceGetName
	fnDeviceGetAttribute
	fnDeviceTotalMem
	fnPrimaryCtxRetain
	fnPrimaryCtxRelease
	fnCtxSetCurrent
	fnModuleLoadDataEx
	fnModuleUnload
	fnModuleGetFunction
	fnMemAlloc
	fnMemFree
	fnMemGetInfo
	fnMemcpyHtoD
	fnMemcpyDtoH
	fnMemcpyDtoD
	fnLaunchKernel
	fnStreamSynchronize
	numFns
)

// symbolNames are the exported names of the driver functions (the _v2 entry points where the
// driver has several versions).
var symbolNames = [numFns]string{
	fnInit:               "cuInit",
	fnDriverGetVersion:   "cuDriverGetVersion",
	fnGetErrorName:       "cuGetErrorName",
	fnGetErrorString:     "cuGetErrorString",
	fnDeviceGetCount:     "cuDeviceGetCount",
	fnDeviceGet:          "cuDeviceGet",
	fnDeviceGetName:      "cuDeviceGetName",
	fnDeviceGetAttribute: "cuDeviceGetAttribute",
	fnDeviceTotalMem:     "cuDeviceTotalMem_v2",
	fnPrimaryCtxRetain:   "cuDevicePrimaryCtxRetain",
	fnPrimaryCtxRelease:  "cuDevicePrimaryCtxRelease_v2",
	fnCtxSetCurrent:      "cuCtxSetCurrent",
	fnModuleLoadDataEx:   "cuModuleLoadDataEx",
	fnModuleUnload:       "cuModuleUnload",
	fnModuleGetFunction:  "cuModuleGetFunction",
	fnMemAlloc:           "cuMemAlloc_v2",
	fnMemFree:            "cuMemFree_v2",
	fnMemGetInfo:         "cuMemGetInfo_v2",
	fnMemcpyHtoD:         "cuMemcpyHtoD_v2",
	fnMemcpyDtoH:         "cuMemcpyDtoH_v2",
	fnMemcpyDtoD:         "cuMemcpyDtoD_v2",
	fnLaunchKernel:       "cuLaunchKernel",
	fnStreamSynchronize:  "cuStreamSynchronize",
}

// Graph functions (CUDA 11.4 and newer), resolved when present: without them decode launches
// kernel by kernel. Each entry lists the symbols to try, newest ABI first; the kernel-node
// parameters are always passed in the _v2 layout, whose first fields are the old layout.
const (
	gfnCreate = iota
	gfnAddKernelNode
	gfnInstantiate
	gfnLaunch
	gfnExecDestroy
	gfnDestroy
	numGraphFns
)

var graphSymbols = [numGraphFns][]string{
	gfnCreate:        {"cuGraphCreate"},
	gfnAddKernelNode: {"cuGraphAddKernelNode_v2", "cuGraphAddKernelNode"},
	gfnInstantiate:   {"cuGraphInstantiateWithFlags"},
	gfnLaunch:        {"cuGraphLaunch"},
	gfnExecDestroy:   {"cuGraphExecDestroy"},
	gfnDestroy:       {"cuGraphDestroy"},
}

// driver is a loaded CUDA driver library.
type driver struct {
	path    string
	lib     uintptr
	fn      [numFns]uintptr
	gfn     [numGraphFns]uintptr // all set, or graphs is false
	gname   [numGraphFns]string  // the symbol each gfn entry resolved to
	graphs  bool
	version int32 // cuDriverGetVersion: 1000*major + 10*minor

	once    sync.Once
	initErr error // result of cuInit and of resolving the remaining symbols
}

var (
	driversMu sync.Mutex
	drivers   = map[string]*driver{}
)

// loadDriver opens the driver library at path (once per process and path) and resolves the
// functions needed to initialise it.
func loadDriver(path string) (*driver, error) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if d, ok := drivers[path]; ok {
		return d, nil
	}
	lib, err := dlopen(path)
	if err != nil {
		return nil, err
	}
	d := &driver{path: path, lib: lib}
	for i := 0; i < numInitFns; i++ {
		if d.fn[i] = dlsym(lib, symbolNames[i]); d.fn[i] == 0 {
			return nil, fmt.Errorf("%w: %s does not export %s (not a CUDA driver library?)", ErrNoLibrary, path, symbolNames[i])
		}
	}
	drivers[path] = d
	return d, nil
}

// init runs cuInit(0) and resolves the remaining symbols, once.
func (d *driver) init() error {
	d.once.Do(func() {
		var v int32
		if r := result(ccall(d.fn[fnDriverGetVersion], uintptr(unsafe.Pointer(&v)))); r == cudaSuccess {
			d.version = v
		}
		if err := d.check(fnInit, result(ccall(d.fn[fnInit], 0))); err != nil {
			d.initErr = err
			return
		}
		for i := numInitFns; i < numFns; i++ {
			if d.fn[i] = dlsym(d.lib, symbolNames[i]); d.fn[i] == 0 {
				d.initErr = fmt.Errorf("cuda: %s does not export %s (driver too old?)", d.path, symbolNames[i])
				return
			}
		}
		d.graphs = true
		for i, names := range graphSymbols {
			for _, name := range names {
				if p := dlsym(d.lib, name); p != 0 {
					d.gfn[i], d.gname[i] = p, name
					break
				}
			}
			d.graphs = d.graphs && d.gfn[i] != 0
		}
	})
	return d.initErr
}

// gcall invokes graph function f (see graphSymbols) and converts a failure into an *Error.
//
//go:uintptrescapes
func (d *driver) gcall(f int, args ...uintptr) error {
	return d.checkNamed(d.gname[f], result(uint32(ccall(d.gfn[f], args...))))
}

// versionString formats the driver version, e.g. "12.8".
func (d *driver) versionString() string {
	if d.version <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", d.version/1000, d.version%1000/10)
}

// call invokes driver function f and converts a failure into an *Error.
//
//go:uintptrescapes
func (d *driver) call(f int, args ...uintptr) error {
	return d.check(f, result(uint32(ccall(d.fn[f], args...))))
}

// check converts the result r of driver function f into an *Error (nil on success), asking the
// driver for the name and description of the code.
func (d *driver) check(f int, r result) error {
	return d.checkNamed(symbolNames[f], r)
}

// checkNamed is check for the driver function called fname.
func (d *driver) checkNamed(fname string, r result) error {
	r = result(uint32(r))
	if r == cudaSuccess {
		return nil
	}
	var name, msg string
	var p *byte
	if ccall(d.fn[fnGetErrorName], uintptr(r), uintptr(unsafe.Pointer(&p))) == 0 {
		name = cString(p)
	}
	p = nil
	if ccall(d.fn[fnGetErrorString], uintptr(r), uintptr(unsafe.Pointer(&p))) == 0 {
		msg = cString(p)
	}
	return newError(fname, r, name, msg)
}

// cString copies a NUL-terminated C string (at most 4 KiB of it).
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	const maxLen = 4096
	b := unsafe.Slice(p, maxLen)
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
