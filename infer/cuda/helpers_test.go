package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// repoRoot walks up from the test directory to the directory holding go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// skipOrFail skips the test, or fails it when TQ_REQUIRE_REFS=1 (CI), for a missing tool.
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("TQ_REQUIRE_REFS") == "1" {
		t.Fatal(msg + " (TQ_REQUIRE_REFS=1)")
	}
	t.Skip(msg)
}

// findTool returns the first of names found on $PATH.
func findTool(names ...string) (string, bool) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, true
		}
	}
	return "", false
}

var (
	buildMu  sync.Mutex
	built    = map[string]string{}
	buildDir string
)

// TestMain removes the libraries built by the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildLib compiles a shared library once per test process: key names it, files are written into
// its directory first, and args is the compiler command line after the compiler (with OUT standing
// for the output path). It returns the library path.
func buildLib(t testing.TB, key string, compilers []string, files map[string]string, args ...string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[key]; ok {
		return p
	}
	cc, ok := findTool(compilers...)
	if !ok {
		skipOrFail(t, "no C/C++ compiler (%s) to build the %s test library", strings.Join(compilers, ", "), key)
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "tq-cuda-test-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	dir := filepath.Join(buildDir, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "libcuda.so.1")
	full := make([]string, len(args))
	for i, a := range args {
		full[i] = strings.ReplaceAll(strings.ReplaceAll(a, "OUT", out), "DIR", dir)
	}
	cmd := exec.Command(cc, full...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the %s test library: %s %s: %v\n%s", key, cc, strings.Join(full, " "), err, b)
	}
	built[key] = out
	return out
}

// fakeDriver builds testdata/fakecuda/fakecuda.c (see its header) with the given -D flags.
func fakeDriver(t testing.TB, key string, defines ...string) string {
	src := filepath.Join(repoRoot(t), "infer", "cuda", "testdata", "fakecuda", "fakecuda.c")
	args := append([]string{"-shared", "-fPIC", "-O1"}, defines...)
	args = append(args, src, "-o", "OUT")
	return buildLib(t, key, []string{"cc", "gcc", "clang"}, nil, args...)
}

// emulatorLibrary builds the CPU emulator (testdata/cuemu) with every kernel the host table names
// registered, and returns its path.
func emulatorLibrary(t testing.TB) string {
	root := repoRoot(t)
	kdir := filepath.Join(root, "infer", "cuda", "kernels")
	edir := filepath.Join(root, "infer", "cuda", "testdata", "cuemu")
	var inc, reg strings.Builder
	for _, m := range modules {
		fmt.Fprintf(&inc, "#include %q\n", m+".cu")
	}
	for _, k := range kernelTable {
		fmt.Fprintf(&reg, "TQ_REG(%s)\n", k.name)
	}
	files := map[string]string{"tq_kernels.inc": inc.String(), "tq_registry.inc": reg.String()}
	return buildLib(t, "cuemu", []string{"g++", "c++", "clang++"}, files,
		"-std=c++17", "-O1", "-shared", "-fPIC", "-DTQ_EMU", "-Wall", "-Wno-unknown-pragmas", "-Werror",
		"-IDIR", "-I"+kdir, "-I"+edir, filepath.Join(edir, "cuemu.cpp"), "-o", "OUT")
}
