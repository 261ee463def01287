package cuda

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func TestSelectCPU(t *testing.T) {
	t.Setenv(EnvLibrary, filepath.Join(t.TempDir(), "must-not-be-loaded.so"))
	d, line, err := Select("cpu")
	if d != nil || err != nil || line != "backend: cpu (requested)" {
		t.Fatalf("Select(cpu) = %v, %q, %v", d, line, err)
	}
}

func TestSelectUnknown(t *testing.T) {
	d, _, err := Select("rocm")
	if d != nil || err == nil || !strings.Contains(err.Error(), `unknown backend "rocm"`) {
		t.Fatalf("Select(rocm) = %v, %v", d, err)
	}
}

func TestSelectNoLibrary(t *testing.T) {
	if !Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	t.Setenv(EnvLibrary, missing)
	for _, name := range []string{"auto", ""} {
		d, line, err := Select(name)
		if d != nil || err != nil {
			t.Fatalf("Select(%q) = %v, %v; want the CPU without error", name, d, err)
		}
		want := "backend: cpu (cuda unavailable: " + missing + " could not be loaded (no NVIDIA driver installed?))"
		if line != want {
			t.Fatalf("Select(%q) line\n got %q\nwant %q", name, line, want)
		}
	}
	d, line, err := Select("cuda")
	if d != nil || line != "" || !errors.Is(err, ErrNoLibrary) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Select(cuda) = %v, %q, %v; want ErrNoLibrary naming %s", d, line, err, missing)
	}
}

func TestSelectFakeNoDevice(t *testing.T) {
	if !Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	lib := fakeDriver(t, false)
	d, line, err := SelectWith("auto", Options{Library: lib})
	if d != nil || err != nil {
		t.Fatalf("auto = %v, %v; want the CPU", d, err)
	}
	if want := "backend: cpu (cuda unavailable: no CUDA device: CUDA_ERROR_NO_DEVICE)"; line != want {
		t.Fatalf("auto line\n got %q\nwant %q", line, want)
	}
	d, _, err = SelectWith("cuda", Options{Library: lib})
	if d != nil || !errors.Is(err, ErrNoDevice) {
		t.Fatalf("cuda = %v, %v; want ErrNoDevice", d, err)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Op != "cuInit" || ce.Code != 100 || ce.Name != "CUDA_ERROR_NO_DEVICE" ||
		ce.Msg != "no CUDA-capable device is detected" {
		t.Fatalf("error %#v; want cuInit CUDA_ERROR_NO_DEVICE with the driver's message", err)
	}
	// The same library again: the cached driver gives the same answer.
	if _, err := Open(Options{Library: lib}); !errors.Is(err, ErrNoDevice) {
		t.Fatalf("second Open: %v", err)
	}
}

func TestSelectFakeMissingSymbol(t *testing.T) {
	if !Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	lib := fakeDriver(t, true)
	_, line, err := SelectWith("auto", Options{Library: lib})
	if err != nil || !strings.Contains(line, "does not export cuDeviceGet") || !strings.HasPrefix(line, "backend: cpu (cuda unavailable: ") {
		t.Fatalf("auto: %q, %v", line, err)
	}
	if _, _, err := SelectWith("cuda", Options{Library: lib}); err == nil || !strings.Contains(err.Error(), "does not export cuDeviceGet") {
		t.Fatalf("cuda: %v", err)
	}
}

func TestSelectNotADriver(t *testing.T) {
	if !Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	// A real shared library without the CUDA symbols (the C library itself).
	_, line, err := SelectWith("auto", Options{Library: "libc.so.6"})
	if err != nil || !strings.Contains(line, "could not be loaded") {
		t.Fatalf("auto with libc: %q, %v", line, err)
	}
	_, _, err = SelectWith("cuda", Options{Library: "libc.so.6"})
	if !errors.Is(err, ErrNoLibrary) || !strings.Contains(err.Error(), "does not export cuInit") {
		t.Fatalf("cuda with libc: %v", err)
	}
}

func TestErrorFormatting(t *testing.T) {
	e := newError("cuMemAlloc_v2", cudaErrOutOfMemory, "", "out of memory")
	if got, want := e.Error(), "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
	if errors.Is(e, ErrNoDevice) {
		t.Fatal("out of memory must not match ErrNoDevice")
	}
	if got := newError("cuX", 12345, "", "").Error(); got != "cuda: cuX: CUDA_ERROR_UNKNOWN_CODE (12345)" {
		t.Fatalf("unknown code: %q", got)
	}
}

// TestSystemDriver exercises the real driver library where one is installed (the GPU machine, or a
// machine with the NVIDIA driver but no GPU): every driver function this package calls must be
// exported, and "auto" must either open a device or fall back with one line.
func TestSystemDriver(t *testing.T) {
	if !Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	lib, err := dlopen(DefaultLibrary)
	if err != nil {
		t.Skipf("no system CUDA driver: %v", err)
	}
	for i, name := range symbolNames {
		if dlsym(lib, name) == 0 {
			t.Errorf("the system %s does not export %s (index %d)", DefaultLibrary, name, i)
		}
	}
	d, line, err := SelectWith("auto", Options{Library: DefaultLibrary})
	if err != nil || strings.Contains(line, "\n") {
		t.Fatalf("auto: %q, %v", line, err)
	}
	t.Log(line)
	if d != nil {
		d.Close()
	} else if !strings.HasPrefix(line, "backend: cpu (cuda unavailable: ") {
		t.Fatalf("fallback line %q", line)
	}
}

func TestSymbolNamesUseV2(t *testing.T) {
	// cuda.h maps these to _v2 entry points; the unversioned symbols are the legacy 32-bit ABI.
	for _, name := range symbolNames {
		if name == "" {
			t.Fatal("missing symbol name")
		}
		switch name {
		case "cuDeviceTotalMem", "cuDevicePrimaryCtxRelease", "cuMemAlloc", "cuMemFree", "cuMemGetInfo",
			"cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD", "cuCtxCreate":
			t.Errorf("%s must be called through its _v2 symbol", name)
		}
	}
}
