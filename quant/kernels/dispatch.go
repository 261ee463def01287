package kernels

import "sync/atomic"

// forcePure is set by SetPureGo; when true the pure-Go twins run even where assembly exists.
var forcePure atomic.Bool

// SetPureGo forces (true) or releases (false) the pure-Go implementations. It is meant for
// tests and benchmarks that compare the two paths; it is safe to call concurrently with
// running kernels (each call picks a path once, at entry).
func SetPureGo(pure bool) { forcePure.Store(pure) }

// HasAsm reports whether assembly kernels are available on this machine (amd64 with AVX2,
// FMA and F16C, not built with the purego tag).
func HasAsm() bool { return haveAsm }

// UsingAsm reports whether the exported kernels currently run assembly.
func UsingAsm() bool { return haveAsm && !forcePure.Load() }

// Implementation names the kernel set in use, for logs and benchmark reports.
func Implementation() string {
	if UsingAsm() {
		amx := ""
		if UsingAMX() {
			amx = ", AMX-BF16 GEMM for bf16 weights"
		} // (the AVX512-BF16 GEMM is opt-in: its callers say when they use it)
		switch {
		case useVNNI():
			loads := ""
			if scaleLoads.Load() {
				loads = "; block scales loaded, not gathered: gathers are slow on this CPU"
			}
			return "amd64 AVX2+FMA+F16C assembly, AVX-512 VNNI kernels (batch and gemv" + loads + ") and SGEMM" + amx
		case use512():
			return "amd64 AVX2+FMA+F16C assembly, AVX-512F SGEMM" + amx
		}
		return "amd64 AVX2+FMA+F16C assembly" + amx
	}
	return "pure Go"
}

func useAsm() bool { return haveAsm && !forcePure.Load() }
