package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
)

func TestInspectHFFolder(t *testing.T) {
	dir := t.TempDir()
	if err := fixtures.Generate(dir, fixtures.Preset("qwen3moe")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := runInspect(&buf, dir, &inspectOptions{json: true, maxArray: 4}); err != nil {
		t.Fatal(err)
	}
	var rep inspectReport
	if err := json.Unmarshal(buf.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Format != "hf" || rep.Architecture != "qwen3moe" {
		t.Fatalf("format/arch = %q/%q", rep.Format, rep.Architecture)
	}
	if rep.Hyper["hidden_size"].(float64) != 256 || rep.Hyper["num_experts"].(float64) != 4 {
		t.Errorf("hyperparameters wrong: %v", rep.Hyper)
	}
	// Every tensor's bytes add up, and BF16 costs 16 bits per weight.
	var sum uint64
	for _, tt := range rep.Tensors {
		sum += tt.Bytes
	}
	if sum != rep.TotalBytes || rep.TotalBytes == 0 {
		t.Errorf("tensor bytes %d != total %d", sum, rep.TotalBytes)
	}
	if rep.BitsPerW != 16 {
		t.Errorf("bits per weight %.3f, want 16 for a BF16 folder", rep.BitsPerW)
	}
	if rep.ActiveParams <= 0 || uint64(rep.ActiveParams) >= rep.TotalParams {
		t.Errorf("MoE active params %d should be below total %d", rep.ActiveParams, rep.TotalParams)
	}
	// The text form names the architecture and lists an expert tensor.
	buf.Reset()
	if err := runInspect(&buf, dir, &inspectOptions{maxArray: 4}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "architecture: qwen3moe") || !strings.Contains(buf.String(), "mlp.experts.3.down_proj.weight") {
		t.Errorf("text output incomplete:\n%s", buf.String())
	}
}

func TestInspectGGUF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	w, err := gguf.Create(path, gguf.WriterOptions{MaxShardTensors: 1})
	if err != nil {
		t.Fatal(err)
	}
	w.Metadata.Set("general.architecture", gguf.String("llama"))
	w.Metadata.Set("llama.embedding_length", gguf.Uint32(256))
	w.Metadata.Set("turboquant.version", gguf.String("1"))
	w.Metadata.Set("tokenizer.ggml.tokens", gguf.Array([]string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}))
	q8, _ := gguf.TypeQ8_0.RowBytes(256)
	tensors := []struct {
		name string
		typ  gguf.GGMLType
		size int
	}{{"token_embd.weight", gguf.TypeQ8_0, int(q8) * 4}, {"output_norm.weight", gguf.TypeF32, 256 * 4}}
	for _, tt := range tensors {
		rows := uint64(4)
		if tt.typ == gguf.TypeF32 {
			rows = 1
		}
		if err := w.AddTensor(tt.name, []uint64{256, rows}, tt.typ); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range tensors {
		if err := w.WriteTensorData(tt.name, make([]byte, tt.size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	first := gguf.SplitPath(strings.TrimSuffix(path, ".gguf"), 1, 2)
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("expected a split model: %v", err)
	}
	var buf bytes.Buffer
	if err := runInspect(&buf, first, &inspectOptions{json: true, maxArray: 3}); err != nil {
		t.Fatal(err)
	}
	var rep inspectReport
	if err := json.Unmarshal(buf.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Shards) != 2 || len(rep.Tensors) != 2 || rep.Architecture != "llama" {
		t.Fatalf("shards %v tensors %d arch %q", rep.Shards, len(rep.Tensors), rep.Architecture)
	}
	if rep.Provenance["turboquant.version"] != `"1"` {
		t.Errorf("provenance missing: %v", rep.Provenance)
	}
	if rep.TotalParams != 256*5 || rep.TotalBytes != uint64(int(q8)*4+256*4) {
		t.Errorf("params %d bytes %d", rep.TotalParams, rep.TotalBytes)
	}
	var sawArray bool
	for _, kv := range rep.Metadata {
		if kv.Key == "tokenizer.ggml.tokens" {
			sawArray = strings.Contains(kv.Value, "(10 elements)")
		}
	}
	if !sawArray {
		t.Errorf("long array not summarised: %v", rep.Metadata)
	}
}

// The real Qwen3.6-35B-A3B config.json (no weights) inspects to ~35B total, ~3B active.
func TestInspectConfigOnly(t *testing.T) {
	path := filepath.Join(llamacppref.RepoRoot(t), "internal", "hf", "testdata", "qwen3.6-35b-a3b.config.json")
	var buf bytes.Buffer
	if err := runInspect(&buf, path, &inspectOptions{json: true}); err != nil {
		t.Fatal(err)
	}
	var rep inspectReport
	if err := json.Unmarshal(buf.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Architecture != "qwen35moe" || rep.Format != "config" {
		t.Fatalf("arch %q format %q", rep.Architecture, rep.Format)
	}
	if rep.TotalParams < 34e9 || rep.TotalParams > 36e9 || rep.ActiveParams < 2.8e9 || rep.ActiveParams > 3.8e9 {
		t.Errorf("params %d total / %d active, want ~35B / ~3B", rep.TotalParams, rep.ActiveParams)
	}
}
