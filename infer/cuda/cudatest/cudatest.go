// Package cudatest builds the stand-in CUDA driver libraries the tests of package cuda and of
// its users (package infer, cmd/tq) load through the real purego path:
//
//   - [EmulatorLibrary]: the CPU emulator of the CUDA execution model (infer/cuda/testdata/cuemu)
//     compiled together with every kernel of infer/cuda/kernels into a fake libcuda.so.1, so the
//     real host code and the real kernel sources run without a GPU;
//   - [FakeDriver]: a driver whose cuInit reports CUDA_ERROR_NO_DEVICE (or, with initOnly, one
//     that exports only the initialisation functions), for the CPU fallback paths.
//
// The libraries are compiled with the system C/C++ compiler into a cache directory keyed by a
// hash of their sources and compiler flags ($TQ_CUEMU_CACHE, else the user cache directory), so
// a second test process reuses them; a build is written to a temporary name and renamed, so
// concurrent test processes never see a partial library. Without a compiler the test is
// skipped, unless TQ_REQUIRE_REFS=1 (CI), where it fails.
//
// The package does not import package cuda (its internal tests use this package); the kernel
// entry points are read from the committed PTX (kernels/*.ptx), whose entries a test of package
// cuda proves equal to the host's kernel table.
package cudatest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/tq-project/tq/internal/testenv"
)

// EnvCache names the environment variable that overrides the build cache directory.
const EnvCache = "TQ_CUEMU_CACHE"

// SkipOrFail skips the test, or fails it when TQ_REQUIRE_REFS=1 (CI), for a missing tool.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("TQ_REQUIRE_REFS") == "1" {
		t.Fatal(msg + " (TQ_REQUIRE_REFS=1)")
	}
	t.Skip(msg)
}

// Kernels returns the kernel modules (kernels/<name>.cu), sorted, and the kernel entry points
// their committed PTX defines, in file order, module by module.
func Kernels(t testing.TB) (modules, entries []string) {
	t.Helper()
	kdir := filepath.Join(testenv.RepoRoot(t), "infer", "cuda", "kernels")
	cus, err := filepath.Glob(filepath.Join(kdir, "*.cu"))
	if err != nil || len(cus) == 0 {
		t.Fatalf("cudatest: no kernel sources in %s (%v)", kdir, err)
	}
	sort.Strings(cus)
	for _, cu := range cus {
		m := strings.TrimSuffix(filepath.Base(cu), ".cu")
		modules = append(modules, m)
		ptx, err := os.ReadFile(filepath.Join(kdir, m+".ptx"))
		if err != nil {
			t.Fatalf("cudatest: %v", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(ptx))
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), ".visible .entry ")
			if !ok {
				continue
			}
			name, _, _ := strings.Cut(rest, "(")
			entries = append(entries, strings.TrimSpace(name))
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("cudatest: reading %s.ptx: %v", m, err)
		}
	}
	return modules, entries
}

// EmulatorLibrary builds (once per source version) the CPU emulator of the CUDA execution model
// with every kernel registered, and returns the path of its libcuda.so.1. It skips the test on
// platforms other than Linux, where the emulator does not build.
func EmulatorLibrary(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skip("cudatest: the CUDA emulator and the purego driver path need linux/amd64 or linux/arm64")
	}
	root := testenv.RepoRoot(t)
	kdir := filepath.Join(root, "infer", "cuda", "kernels")
	edir := filepath.Join(root, "infer", "cuda", "testdata", "cuemu")
	modules, entries := Kernels(t)
	var inc, reg strings.Builder
	for _, m := range modules {
		fmt.Fprintf(&inc, "#include %q\n", m+".cu")
	}
	for _, e := range entries {
		fmt.Fprintf(&reg, "TQ_REG(%s)\n", e)
	}
	files := map[string]string{"tq_kernels.inc": inc.String(), "tq_registry.inc": reg.String()}
	deps := []string{filepath.Join(edir, "cuemu.cpp"), filepath.Join(edir, "cuemu.h")}
	for _, pat := range []string{"*.cu", "*.cuh"} {
		m, _ := filepath.Glob(filepath.Join(kdir, pat))
		deps = append(deps, m...)
	}
	return build(t, "cuemu", []string{"g++", "c++", "clang++"}, files, deps,
		"-std=c++17", "-O1", "-shared", "-fPIC", "-DTQ_EMU", "-Wall", "-Wno-unknown-pragmas", "-Werror",
		"-I{DIR}", "-I"+kdir, "-I"+edir, filepath.Join(edir, "cuemu.cpp"), "-o", "{OUT}")
}

// FakeDriver builds infer/cuda/testdata/fakecuda/fakecuda.c: by default a driver whose cuInit
// returns CUDA_ERROR_NO_DEVICE (a machine with the NVIDIA driver but no GPU); with initOnly, one
// whose cuInit succeeds but which exports only the initialisation functions.
func FakeDriver(t testing.TB, initOnly bool) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("cudatest: the fake driver is a Linux shared library")
	}
	src := filepath.Join(testenv.RepoRoot(t), "infer", "cuda", "testdata", "fakecuda", "fakecuda.c")
	key := "fake-nodevice"
	args := []string{"-shared", "-fPIC", "-O1"}
	if initOnly {
		key = "fake-initonly"
		args = append(args, "-DFAKE_INIT_OK")
	}
	args = append(args, src, "-o", "{OUT}")
	return build(t, key, []string{"cc", "gcc", "clang"}, nil, []string{src}, args...)
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// cacheRoot is the directory the libraries are built under.
func cacheRoot() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "tq", "cudatest")
	}
	return filepath.Join(os.TempDir(), "tq-cudatest")
}

// build compiles a shared library named libcuda.so.1 into a directory keyed by the hash of the
// compiler, the arguments, the generated files and the dependency files. args use {OUT} for the
// output path and {DIR} for the directory holding files.
func build(t testing.TB, key string, compilers []string, files map[string]string, deps []string, args ...string) string {
	t.Helper()
	cc := ""
	for _, n := range compilers {
		if p, err := exec.LookPath(n); err == nil {
			cc = p
			break
		}
	}
	if cc == "" {
		SkipOrFail(t, "cudatest: no C/C++ compiler (%s) to build the %s test library", strings.Join(compilers, ", "), key)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", key, cc, strings.Join(args, "\x00"))
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%s\x00", n, files[n])
	}
	for _, d := range deps {
		b, err := os.ReadFile(d)
		if err != nil {
			t.Fatalf("cudatest: %v", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.Base(d), len(b))
		h.Write(b)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]

	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[sum]; ok {
		return p
	}
	dir := filepath.Join(cacheRoot(), key+"-"+sum)
	out := filepath.Join(dir, "libcuda.so.1")
	if st, err := os.Stat(out); err == nil && st.Size() > 0 {
		built[sum] = out
		return out
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("cudatest: %v", err)
	}
	// Generated files and the output go to a private directory first, then the library is
	// renamed into place (atomic on one file system), so concurrent builders do not collide.
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		t.Fatalf("cudatest: %v", err)
	}
	defer os.RemoveAll(work)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o644); err != nil {
			t.Fatalf("cudatest: %v", err)
		}
	}
	tmp := filepath.Join(work, "libcuda.so.1")
	full := make([]string, len(args))
	for i, a := range args {
		full[i] = strings.ReplaceAll(strings.ReplaceAll(a, "{OUT}", tmp), "{DIR}", work)
	}
	if b, err := exec.Command(cc, full...).CombinedOutput(); err != nil {
		t.Fatalf("cudatest: building the %s test library: %s %s: %v\n%s", key, cc, strings.Join(full, " "), err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatalf("cudatest: %v", err)
	}
	built[sum] = out
	return out
}
