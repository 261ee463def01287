package convert

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/safetensors"
)

// expectFailure converts and checks the error mentions every fragment and nothing is left in
// the output directory.
func expectFailure(t *testing.T, dir string, opts Options, fragments ...string) {
	t.Helper()
	outDir := t.TempDir()
	_, err := Convert(context.Background(), dir, filepath.Join(outDir, "out.gguf"), opts)
	if err == nil {
		t.Fatalf("conversion succeeded, want an error mentioning %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not mention %q", err, f)
		}
	}
	if f := dirFiles(t, outDir); len(f) != 0 {
		t.Errorf("files left in the output directory: %v", f)
	}
}

func TestBadInputMissingShard(t *testing.T) {
	o := fixtures.Preset("llama")
	o.Shards = 3
	dir := genModel(t, o)
	var shard string
	for _, f := range dirFiles(t, dir) {
		if strings.Contains(f, "00002-of-00003") {
			shard = f
		}
	}
	if shard == "" {
		t.Fatalf("no second shard in %v", dirFiles(t, dir))
	}
	os.Remove(filepath.Join(dir, shard))
	expectFailure(t, dir, Options{Types: TypeOptions{OutType: "f16"}}, shard)
}

func TestBadInputShapeMismatch(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen3"))
	cfg := filepath.Join(dir, "config.json")
	b, _ := os.ReadFile(cfg)
	b = bytes.Replace(b, []byte(`"intermediate_size": 512`), []byte(`"intermediate_size": 768`), 1)
	os.WriteFile(cfg, b, 0o644)
	expectFailure(t, dir, Options{Types: TypeOptions{OutType: "q8_0"}}, "ffn_", "config.json")
}

func TestBadInputDType(t *testing.T) {
	// a non-float dtype: rewrite one header entry BF16 -> I16 (same size, header length kept)
	dir := genModel(t, fixtures.Preset("qwen2"))
	path := filepath.Join(dir, "model.safetensors")
	b, _ := os.ReadFile(path)
	i := bytes.Index(b, []byte(`"dtype":"BF16"`))
	if i < 0 {
		t.Fatal("no BF16 entry in the header")
	}
	copy(b[i:], `"dtype":"I16" `)
	os.WriteFile(path, b, 0o644)
	expectFailure(t, dir, Options{Types: TypeOptions{OutType: "f16"}}, "I16", "floating-point")

	// FP8 weights whose config.json lost quantization_config.weight_block_size
	o := fixtures.Preset("qwen3")
	o.FP8 = true
	dir = genModel(t, o)
	cfg := filepath.Join(dir, "config.json")
	cb, _ := os.ReadFile(cfg)
	cb = bytes.Replace(cb, []byte(`"weight_block_size"`), []byte(`"weight_block_sizes"`), 1)
	os.WriteFile(cfg, cb, 0o644)
	expectFailure(t, dir, Options{Types: TypeOptions{OutType: "f16"}}, "weight_block_size", "_scale_inv")
}

func TestBadInputNaN(t *testing.T) {
	dir := genModel(t, fixtures.Preset("llama"))
	st, err := safetensors.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ti, ok := st.Lookup("model.layers.1.mlp.down_proj.weight")
	st.Close()
	if !ok || ti.DType != safetensors.BF16 {
		t.Fatalf("fixture tensor: %+v", ti)
	}
	f, err := os.OpenFile(ti.File, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var nan [2]byte
	binary.LittleEndian.PutUint16(nan[:], 0x7fc0)
	f.WriteAt(nan[:], ti.Offset+2*1000)
	f.Close()
	for _, ot := range []string{"f16", "q4_k_m"} {
		expectFailure(t, dir, Options{Types: TypeOptions{OutType: ot}}, "blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight", "NaN")
	}
}

func TestBadOutput(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen2"))
	// parent is a file
	p := filepath.Join(t.TempDir(), "file")
	os.WriteFile(p, []byte("x"), 0o644)
	if _, err := Convert(context.Background(), dir, filepath.Join(p, "out.gguf"), Options{Types: TypeOptions{OutType: "f16"}}); err == nil {
		t.Error("output under a regular file accepted")
	}
	// missing directory
	if _, err := Convert(context.Background(), dir, filepath.Join(t.TempDir(), "no", "such", "out.gguf"), Options{Types: TypeOptions{OutType: "f16"}}); err == nil {
		t.Error("output in a missing directory accepted")
	}
	// read-only directory (root ignores permissions)
	if os.Getuid() != 0 {
		ro := t.TempDir()
		os.Chmod(ro, 0o555)
		defer os.Chmod(ro, 0o755)
		if _, err := Convert(context.Background(), dir, filepath.Join(ro, "out.gguf"), Options{Types: TypeOptions{OutType: "f16"}}); err == nil {
			t.Error("read-only directory accepted")
		}
	}
}

// Cancelling the context (what Ctrl-C does) stops the conversion and leaves nothing behind.
func TestCancelLeavesNothing(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen3moe"))
	outDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	_, err := Convert(ctx, dir, filepath.Join(outDir, "out.gguf"), Options{Types: TypeOptions{OutType: "q8_0"}, Output: OutputOptions{SplitMaxTensors: 5},
		Report: ReportOptions{Progress: func(done, total int64) {
			calls++
			if calls == 2 {
				cancel()
			}
		}}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if f := dirFiles(t, outDir); len(f) != 0 {
		t.Errorf("files left: %v", f)
	}
}
