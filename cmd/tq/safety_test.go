package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
)

// hfFixture generates the fixtures preset (qwen3, qwen3moe, ...) as a Hugging Face folder
// dir/hf and returns its path.
func hfFixture(t *testing.T, dir, preset string) string {
	t.Helper()
	hf := filepath.Join(dir, "hf")
	if err := fixtures.Generate(hf, fixtures.Preset(preset)); err != nil {
		t.Fatal(err)
	}
	return hf
}

// tqRun runs the tq command line in-process and returns stdout, stderr and the error. Flag
// values live in package variables and would leak from one in-process run to the next: every
// flag of every command is put back to its default first.
func tqRun(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	for _, c := range rootCmd.Commands() {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if sv, ok := f.Value.(pflag.SliceValue); ok {
				_ = sv.Replace(nil)
			} else {
				_ = f.Value.Set(f.DefValue)
			}
			f.Changed = false
		})
	}
	var out, errb bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errb)
	rootCmd.SetArgs(args)
	err := rootCmd.Execute()
	return out.String(), errb.String(), err
}

// dirSums maps every entry of dir (recursively) to the SHA-256 of its content ("dir" or
// "link:<target>" for those).
func dirSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "link:" + l
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			out[rel] = hex.EncodeToString(s[:])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameSums(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: %s changed", what, k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			t.Errorf("%s: %s appeared", what, k)
		}
	}
}

// TestOutputIsInputRefused: every command that writes refuses an output that is one of its
// input files (same path, symbolic link, hard link) with an error naming both, and leaves
// every input as it was.
func TestOutputIsInputRefused(t *testing.T) {
	dir := t.TempDir()
	hfDir := hfFixture(t, dir, "qwen3")
	model := filepath.Join(dir, "m.gguf")
	tqCmd(t, "convert", hfDir, "--outtype", "q8_0", "-o", model)
	os.WriteFile(filepath.Join(hfDir, "imatrix.gguf"), []byte("not parsed before the check"), 0o644)
	os.WriteFile(filepath.Join(dir, "prompts.txt"), []byte("hello\n"), 0o644)
	side := filepath.Join(dir, "side")
	os.Mkdir(side, 0o755)
	if err := os.Symlink(filepath.Join("..", "hf", "model.safetensors"), filepath.Join(side, "link.gguf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(hfDir, "tokenizer.json"), filepath.Join(side, "hard.gguf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(model, filepath.Join(side, "hard-model.gguf")); err != nil {
		t.Fatal(err)
	}
	before := dirSums(t, dir)
	hf := func(n string) string { return filepath.Join(hfDir, n) }
	cases := []struct {
		args     []string
		out, in  string
		relation string
	}{
		{[]string{"convert", hfDir, "-o", hf("model.safetensors")}, hf("model.safetensors"), hf("model.safetensors"), "is the input"},
		{[]string{"convert", hfDir, "-o", hf("config.json")}, hf("config.json"), hf("config.json"), "is the input"},
		{[]string{"convert", hfDir, "-o", hf("tokenizer.json"), "--outtype", "q8_0"}, hf("tokenizer.json"), hf("tokenizer.json"), "is the input"},
		{[]string{"convert", hfDir, "-o", filepath.Join(side, "link.gguf")}, filepath.Join(side, "link.gguf"), hf("model.safetensors"), "symbolic link to the input"},
		{[]string{"convert", hfDir, "-o", filepath.Join(side, "hard.gguf")}, filepath.Join(side, "hard.gguf"), hf("tokenizer.json"), "hard link of the input"},
		{[]string{"convert", hfDir, "-o", hf("tokenizer_config.json"), "--split-max-tensors", "5"}, hf("tokenizer_config.json"), hf("tokenizer_config.json"), "is the input"},
		{[]string{"quantize", model, model, "q4_0"}, model, model, "is the input"},
		{[]string{"quantize", model, filepath.Join(side, "hard-model.gguf"), "q4_0"}, filepath.Join(side, "hard-model.gguf"), model, "hard link of the input"},
		{[]string{"calibrate", hfDir, "--export-imatrix", hf("model.safetensors")}, hf("model.safetensors"), hf("model.safetensors"), "is the input"},
		{[]string{"calibrate", hfDir, "--import-imatrix", hf("imatrix.gguf")}, hf("imatrix.gguf"), hf("imatrix.gguf"), "is the input"},
		{[]string{"verify", model, "--markdown", model}, model, model, "is the input"},
		{[]string{"verify", model, "--reference", hfDir, "--save-reference", hf("config.json")}, hf("config.json"), hf("config.json"), "is the input"},
		{[]string{"tokenize", hfDir, "--calibration-out", hf("tokenizer.json")}, hf("tokenizer.json"), hf("tokenizer.json"), "is the input"},
		{[]string{"tokenize", hfDir, "--calibration-dataset", filepath.Join(dir, "prompts.txt"), "--calibration-out", filepath.Join(dir, "prompts.txt")},
			filepath.Join(dir, "prompts.txt"), filepath.Join(dir, "prompts.txt"), "is the input"},
	}
	for _, c := range cases {
		_, stderr, err := tqRun(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), "refusing to write "+c.out) ||
			!strings.Contains(err.Error(), c.relation+" file "+c.in) {
			t.Errorf("tq %s: err %v, want a refusal naming %s and %s\nstderr: %s", strings.Join(c.args, " "), err, c.out, c.in, stderr)
		}
	}
	sameSums(t, "after refused writes", before, dirSums(t, dir))

	// A split output whose shards would replace (or, with another count, remove) input
	// shards of the same name is refused as well.
	splitDir := filepath.Join(dir, "split")
	os.Mkdir(splitDir, 0o755)
	tqCmd(t, "convert", hfDir, "--outtype", "q8_0", "-o", filepath.Join(splitDir, "s.gguf"), "--split-max-tensors", "10")
	first := filepath.Join(splitDir, gguf.SplitPath("s", 0, 3))
	beforeSplit := dirSums(t, splitDir)
	_, _, err := tqRun(t, "quantize", first, filepath.Join(splitDir, "s.gguf"), "q4_0", "--split-max-size", "1M")
	if err == nil || !strings.Contains(err.Error(), "would replace the input file") {
		t.Errorf("quantize onto its own shards: %v", err)
	}
	sameSums(t, "split input", beforeSplit, dirSums(t, splitDir))
}

// TestReSplitCLI: converting again to the same name with another shard count leaves only
// the new shards and their manifest, and says so.
func TestReSplitCLI(t *testing.T) {
	dir := t.TempDir()
	hfDir := hfFixture(t, dir, "qwen3")
	outDir := filepath.Join(dir, "out")
	os.Mkdir(outDir, 0o755)
	out := filepath.Join(outDir, "m.gguf")
	tqCmd(t, "convert", hfDir, "--outtype", "q8_0", "-o", out, "--split-max-tensors", "10")
	names := func() []string {
		var n []string
		ents, _ := os.ReadDir(outDir)
		for _, e := range ents {
			n = append(n, e.Name())
		}
		return n
	}
	want := []string{"SHA256SUMS", "m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"}
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("first split: %v", got)
	}
	_, stderr, err := tqRun(t, "convert", hfDir, "--outtype", "q8_0", "-o", out, "--split-max-tensors", "20")
	if err != nil {
		t.Fatal(err)
	}
	want = []string{"SHA256SUMS", "m-00001-of-00002.gguf", "m-00002-of-00002.gguf"}
	if got := names(); !slices.Equal(got, want) {
		t.Fatalf("second split left %v, want %v", got, want)
	}
	if !strings.Contains(stderr, "removed 3 shard(s) of an earlier split") {
		t.Errorf("stderr does not mention the removed shards:\n%s", stderr)
	}
	if _, err := gguf.VerifyManifest(filepath.Join(outDir, want[1])); err != nil {
		t.Fatal(err)
	}
}
