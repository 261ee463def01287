package cuda

import (
	"slices"
	"testing"

	"github.com/tq-project/tq/infer/cuda/cudatest"
)

// fakeDriver builds testdata/fakecuda/fakecuda.c (see its header): a driver without a device, or
// with initOnly one that exports only the initialisation functions.
func fakeDriver(t testing.TB, initOnly bool) string { return cudatest.FakeDriver(t, initOnly) }

// emulatorLibrary builds the CPU emulator (testdata/cuemu) with every kernel registered and
// returns its path (package cudatest, shared with the tests of package infer and cmd/tq).
func emulatorLibrary(t testing.TB) string { return cudatest.EmulatorLibrary(t) }

// cudatest registers the kernels it reads from the committed PTX; they must be exactly the
// host's kernel table, module by module.
func TestCudatestKernelsMatchTable(t *testing.T) {
	mods, entries := cudatest.Kernels(t)
	want := slices.Clone(modules)
	slices.Sort(want)
	if !slices.Equal(mods, want) {
		t.Fatalf("cudatest modules %v, host modules %v", mods, want)
	}
	var names []string
	for _, k := range kernelTable {
		names = append(names, k.name)
	}
	slices.Sort(names)
	got := slices.Clone(entries)
	slices.Sort(got)
	if !slices.Equal(got, names) {
		t.Fatalf("cudatest registers %v,\nthe host table names %v", got, names)
	}
}
