package cuda

import (
	"strings"
	"testing"
)

// openEmulator opens the CPU emulator of the CUDA execution model (testdata/cuemu) as a device.
func openEmulator(t *testing.T) *Device {
	t.Helper()
	if !Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	d, err := Open(Options{Library: emulatorLibrary(t)})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestEmulatedKernels runs the kernel suite through the whole host path (purego calls, argument
// packing, launches, copies) against the kernels compiled as C++ and executed by the emulator.
func TestEmulatedKernels(t *testing.T) {
	d := openEmulator(t)
	defer d.Close()
	if info := d.Info(); info.Name != "tq CPU emulator" || info.ComputeMajor != 7 || info.ComputeMinor != 5 {
		t.Fatalf("emulator info: %+v", info)
	}
	runKernelSuite(t, d, false)
	free, total, err := d.MemInfo()
	if err != nil || total <= 0 || free > total {
		t.Fatalf("MemInfo = %d, %d, %v", free, total, err)
	}
}

func TestEmulatedSelectAndClose(t *testing.T) {
	if !Available() {
		t.Skip("CUDA is not supported on this platform")
	}
	lib := emulatorLibrary(t)
	d, line, err := SelectWith("auto", Options{Library: lib})
	if err != nil || d == nil {
		t.Fatalf("auto with the emulator: %v", err)
	}
	if !strings.HasPrefix(line, "backend: cuda tq CPU emulator (device 0, sm_75") {
		t.Fatalf("line %q", line)
	}
	if _, err := d.Alloc(1 << 20); err != nil { // left allocated: Close frees it
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := d.Alloc(1); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("use after Close: %v", err)
	}
	// Through $TQ_CUDA_LIB; the emulator's memory is process-wide, so with every earlier device
	// closed nothing may remain allocated.
	t.Setenv(EnvLibrary, lib)
	d2, _, err := Select("cuda")
	if err != nil {
		t.Fatalf("Select(cuda) through %s: %v", EnvLibrary, err)
	}
	defer d2.Close()
	free, total, err := d2.MemInfo()
	if err != nil || free != total {
		t.Fatalf("after Close: %d of %d bytes free (%v): device memory leaked", free, total, err)
	}
}
