package tokenizer

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tq-project/tq/internal/testenv"
)

// requireRefs reports whether missing references must fail the test (CI sets TQ_REQUIRE_REFS=1).
func requireRefs() bool { return os.Getenv("TQ_REQUIRE_REFS") == "1" }

// missingRef skips (or, with TQ_REQUIRE_REFS=1, fails) a test whose reference is absent.
func missingRef(t testing.TB, format string, args ...any) {
	t.Helper()
	if requireRefs() {
		t.Fatalf("reference missing (TQ_REQUIRE_REFS=1): "+format, args...)
	}
	t.Skipf("reference missing (run testdata/llamacpp/setup.sh): "+format, args...)
}

// llamacppDir returns testdata/llamacpp, and path p inside it if it exists.
func llamacppPath(t testing.TB, p string) string {
	t.Helper()
	full := filepath.Join(testenv.RepoRoot(t), "testdata", "llamacpp", p)
	if _, err := os.Stat(full); err != nil {
		missingRef(t, "%s", full)
	}
	return full
}

var ggufVocabCache sync.Map // path -> *Tokenizer

// loadVocabGGUF loads testdata/llamacpp/src/models/ggml-vocab-NAME.gguf with FromGGUF.
func loadVocabGGUF(t testing.TB, name string) (*Tokenizer, string) {
	t.Helper()
	path := llamacppPath(t, filepath.Join("src", "models", "ggml-vocab-"+name+".gguf"))
	if tok, ok := ggufVocabCache.Load(path); ok {
		return tok.(*Tokenizer), path
	}
	md, err := readTestGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := VocabFromMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromGGUF(v)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	ggufVocabCache.Store(path, tok)
	return tok, path
}

// nodeRun runs a node script in testdata/llamacpp with a JSON request and decodes the reply.
func nodeRun(t testing.TB, script string, req any, resp any) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missingRef(t, "node not found in PATH")
	}
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "llamacpp")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		missingRef(t, "%s", filepath.Join(dir, "node_modules"))
	}
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(out, resp); err != nil {
		t.Fatalf("node %s: bad reply: %v\n%.500s", script, err, out)
	}
}

// readVocabTests parses llama.cpp's NAME.gguf.inp / .out pair the way
// tests/test-tokenizer-0.cpp does: inputs separated by "\n__ggml_vocab_test__\n", one line of
// space-separated ids per input. Like the C++ test (a std::map), a repeated input keeps the
// expectation of its last occurrence.
func readVocabTests(t testing.TB, ggufPath string) (inputs []string, want map[string][]int32) {
	t.Helper()
	inp, err := os.ReadFile(ggufPath + ".inp")
	if err != nil {
		missingRef(t, "%v", err)
	}
	outb, err := os.ReadFile(ggufPath + ".out")
	if err != nil {
		missingRef(t, "%v", err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	raw := string(inp)
	var ins []string
	for pos := 0; pos < len(raw); {
		next := strings.Index(raw[pos:], sep)
		if next < 0 {
			ins = append(ins, raw[pos:])
			break
		}
		ins = append(ins, raw[pos:pos+next])
		pos += next + len(sep)
	}
	lines := strings.Split(strings.TrimSuffix(string(outb), "\n"), "\n")
	if len(lines) != len(ins) {
		t.Fatalf("%s: %d inputs but %d output lines", ggufPath, len(ins), len(lines))
	}
	want = map[string][]int32{}
	for i, in := range ins {
		var ids []int32
		for _, f := range strings.Fields(lines[i]) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s.out line %d: %v", ggufPath, i+1, err)
			}
			ids = append(ids, int32(n))
		}
		if _, seen := want[in]; !seen {
			inputs = append(inputs, in)
		}
		want[in] = ids
	}
	return inputs, want
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
