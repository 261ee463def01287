package verify

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert"
	"github.com/tq-project/tq/internal/fixtures"
)

// fixtureSet is a generated HF model and its turboquant conversion, shared by the tests of
// this package (generated once into a temporary directory).
type fixtureSet struct {
	dir   string // temporary root
	hf    string // HF folder
	gguf  string // turboquant GGUF (single file + .sha256)
	split string // first shard of a 3-way split turboquant conversion (+ SHA256SUMS)
	err   error
}

var (
	fixOnce sync.Once
	fix     fixtureSet
)

func TestMain(m *testing.M) {
	code := m.Run()
	if fix.dir != "" {
		os.RemoveAll(fix.dir)
	}
	os.Exit(code)
}

// getFixtures generates the shared fixtures (qwen3 preset, BF16 weights).
func getFixtures(t testing.TB) fixtureSet {
	t.Helper()
	fixOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tq-verify-test-")
		if err != nil {
			fix.err = err
			return
		}
		fix.dir = dir
		fix.hf = filepath.Join(dir, "hf")
		if fix.err = fixtures.Generate(fix.hf, fixtures.Preset("qwen3")); fix.err != nil {
			return
		}
		// int8 turboquant: lm_head F16, everything else Q8_0 (int8 groups of 32) — a correct
		// quantization whose KLD on the fixture (~0.03) is inside the default gate
		cfg := filepath.Join(dir, "quantize_config.json")
		if fix.err = os.WriteFile(cfg, []byte(`{"quant_method": "turboquant", "weight_dtype": "int8", "kv_cache_dtype": "q8_0",
			"group_size": 32, "skip_layers": ["lm_head"]}`), 0o644); fix.err != nil {
			return
		}
		opts := convert.Options{Types: convert.TypeOptions{TurboQuant: true, ConfigPath: cfg}, Report: convert.ReportOptions{Warn: func(string) {}}}
		fix.gguf = filepath.Join(dir, "single", "model.gguf")
		os.MkdirAll(filepath.Dir(fix.gguf), 0o755)
		if _, fix.err = convert.Convert(context.Background(), fix.hf, fix.gguf, opts); fix.err != nil {
			return
		}
		opts.Output.SplitMaxTensors = 10
		out := filepath.Join(dir, "split", "model.gguf")
		os.MkdirAll(filepath.Dir(out), 0o755)
		res, err := convert.Convert(context.Background(), fix.hf, out, opts)
		if fix.err = err; err != nil {
			return
		}
		fix.split = res.Files[0].Path
	})
	if fix.err != nil {
		t.Fatalf("generating fixtures: %v", fix.err)
	}
	return fix
}

// rewriteGGUF writes a copy of the (single-file) GGUF src to dst with metadata changed by md
// (may be nil) and tensor data replaced by data (name -> bytes; may be nil). The writer
// produces a fresh manifest, so only the intended change differs.
func rewriteGGUF(t testing.TB, src, dst string, md func(*gguf.Metadata), data map[string][]byte) {
	t.Helper()
	m, err := gguf.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	w, err := gguf.Create(dst, gguf.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Metadata = m.Metadata().Clone()
	if md != nil {
		md(&w.Metadata)
	}
	for _, ti := range m.Tensors() {
		if err := w.AddTensor(ti.Name, ti.Dims, ti.Type); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range m.Tensors() {
		b, ok := data[ti.Name]
		if !ok {
			if b, err = m.TensorData(ti.Name); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.WriteTensorData(ti.Name, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the files of src (one level) into a new temporary directory.
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}
