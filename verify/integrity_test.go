package verify

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/tokenizer"
)

// integrityOnly runs only the integrity section.
func integrityOnly(t *testing.T, model string, mod func(*Options)) *Report {
	t.Helper()
	o := Options{Model: model, SampleRows: 8, Skip: []string{SectionPPL, SectionKLD, SectionTemplate, SectionToolCalls}}
	if mod != nil {
		mod(&o)
	}
	return run(t, o)
}

func problemsOf(rep *Report, check string) string {
	if c := rep.Integrity.Check(check); c != nil {
		return c.Status + ": " + strings.Join(c.Problems, "; ")
	}
	return "missing"
}

// requantize returns the tensor's values re-encoded as typ.
func requantize(t *testing.T, path, name string, typ gguf.GGMLType) []byte {
	t.Helper()
	m, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ti, _ := m.Tensor(name)
	data, _ := m.TensorData(name)
	vals := make([]float32, ti.NumElements())
	if err := quant.Dequantize(ti.Type, vals, data); err != nil {
		t.Fatal(err)
	}
	cols := int(ti.Dims[0])
	rs, _ := quant.RowSize(typ, cols)
	out := make([]byte, rs*len(vals)/cols)
	if err := quant.Quantize(typ, out, vals, len(vals)/cols, cols, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// rewriteTyped is rewriteGGUF that may also change tensor types.
func rewriteTyped(t *testing.T, src, dst string, md func(*gguf.Metadata), types map[string]gguf.GGMLType, data map[string][]byte) {
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
		typ := ti.Type
		if nt, ok := types[ti.Name]; ok {
			typ = nt
		}
		if err := w.AddTensor(ti.Name, ti.Dims, typ); err != nil {
			t.Fatal(err)
		}
	}
	for _, ti := range m.Tensors() {
		b, ok := data[ti.Name]
		if !ok {
			b, _ = m.TensorData(ti.Name)
		}
		if err := w.WriteTensorData(ti.Name, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrityMetadata(t *testing.T) {
	f := getFixtures(t)
	cases := []struct {
		name, want string
		md         func(*gguf.Metadata)
	}{
		{"context_length int32", "qwen3.context_length: stored as int32, llama.cpp requires uint32", func(md *gguf.Metadata) {
			v, _ := md.GetUint("qwen3.context_length")
			md.Set("qwen3.context_length", gguf.Int32(int32(v)))
		}},
		{"block_count", "layer 2 has no tensors", func(md *gguf.Metadata) { md.Set("qwen3.block_count", gguf.Uint32(3)) }},
		{"missing key", "qwen3.embedding_length is missing", func(md *gguf.Metadata) { md.Delete("qwen3.embedding_length") }},
		{"tokens", "tokenizer", func(md *gguf.Metadata) {
			toks, _ := md.GetStringArray(tokenizer.KeyTokens)
			md.Set(tokenizer.KeyTokens, gguf.Array(toks[:len(toks)-1]))
		}},
		{"eos out of range", "eos_token_id", func(md *gguf.Metadata) { md.Set(tokenizer.SpecialIDKey("eos"), gguf.Uint32(1<<20)) }},
		{"no tokenizer", "tokenizer", func(md *gguf.Metadata) { md.Delete(tokenizer.KeyModel) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.gguf")
			rewriteGGUF(t, f.gguf, out, c.md, nil)
			rep := integrityOnly(t, out, nil)
			if got := problemsOf(rep, CheckMetadata); !strings.HasPrefix(got, "fail") || !strings.Contains(got, c.want) {
				t.Fatalf("metadata check %q, want %q", got, c.want)
			}
			if rep.Verdict != VerdictFail || rep.Skipped[SectionToolCalls] == "" {
				t.Fatalf("verdict %s", rep.Verdict)
			}
		})
	}
}

func TestIntegrityTurboQuant(t *testing.T) {
	f := getFixtures(t)
	cases := []struct {
		name, want string
		md         func(*gguf.Metadata)
		tensor     string
		typ        gguf.GGMLType
	}{
		{"lm_head q8_0", "lm_head (output.weight) is q8_0", nil, "output.weight", gguf.TypeQ8_0},
		{"attn_output q4_0", "blk.0.attn_output.weight (o_proj) is q4_0", nil, "blk.0.attn_output.weight", gguf.TypeQ4_0},
		{"ffn_down q4_K", "blk.1.ffn_down.weight (down_proj) is q4_K", nil, "blk.1.ffn_down.weight", gguf.TypeQ4_K},
		{"kv dtype", "kv_cache_dtype \"q3\"", func(md *gguf.Metadata) { md.Set("turboquant.kv_cache_dtype", gguf.String("q3")) }, "", 0},
		{"no kv dtype", "turboquant.kv_cache_dtype is missing", func(md *gguf.Metadata) { md.Delete("turboquant.kv_cache_dtype") }, "", 0},
		{"skip_layers", "does not contain lm_head", func(md *gguf.Metadata) { md.Delete("turboquant.skip_layers") }, "", 0},
		{"method", "quant_method", func(md *gguf.Metadata) { md.Set("turboquant.quant_method", gguf.String("gptq")) }, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.gguf")
			var types map[string]gguf.GGMLType
			var data map[string][]byte
			if c.tensor != "" {
				types = map[string]gguf.GGMLType{c.tensor: c.typ}
				data = map[string][]byte{c.tensor: requantize(t, f.gguf, c.tensor, c.typ)}
			}
			rewriteTyped(t, f.gguf, out, c.md, types, data)
			rep := integrityOnly(t, out, nil)
			if got := problemsOf(rep, CheckTurboQuant); !strings.HasPrefix(got, "fail") || !strings.Contains(got, c.want) {
				t.Fatalf("turboquant check %q, want %q", got, c.want)
			}
		})
	}
	// a plain (non-turboquant) file skips the check
	out := filepath.Join(t.TempDir(), "plain.gguf")
	rewriteGGUF(t, f.gguf, out, func(md *gguf.Metadata) {
		for _, k := range md.Keys() {
			if strings.HasPrefix(k, "turboquant.") {
				md.Delete(k)
			}
		}
	}, nil)
	if got := problemsOf(integrityOnly(t, out, nil), CheckTurboQuant); got != "skipped: " {
		t.Errorf("plain file: %q", got)
	}
}

// NaN in a Q8_0 block scale: found in a sampled row by default, in any row with Full.
func TestIntegrityValues(t *testing.T) {
	f := getFixtures(t)
	m, _ := gguf.Open(f.gguf)
	const name = "blk.0.attn_output.weight"
	ti, _ := m.Tensor(name)
	data, _ := m.TensorData(name)
	orig := append([]byte(nil), data...)
	m.Close()
	rb, _ := ti.Type.RowBytes(int64(ti.Dims[0]))
	nrows := int64(ti.Dims[1])
	sampled := sampleRows(nrows, 8)
	// a row outside the sample
	hidden := int64(-1)
	for r := int64(1); r < nrows; r++ {
		in := false
		for _, s := range sampled {
			in = in || s == r
		}
		if !in {
			hidden = r
			break
		}
	}
	for _, c := range []struct {
		row  int64
		full bool
		fail bool
	}{{0, false, true}, {hidden, false, false}, {hidden, true, true}} {
		b := append([]byte(nil), orig...)
		binary.LittleEndian.PutUint16(b[c.row*rb:], 0x7E00) // fp16 NaN as the first block's scale
		out := filepath.Join(t.TempDir(), "nan.gguf")
		rewriteGGUF(t, f.gguf, out, nil, map[string][]byte{name: b})
		rep := integrityOnly(t, out, func(o *Options) { o.Full = c.full })
		got := problemsOf(rep, CheckValues)
		if c.fail != strings.HasPrefix(got, "fail") || (c.fail && !strings.Contains(got, name)) {
			t.Errorf("row %d full=%v: values check %q", c.row, c.full, got)
		}
	}
}

func TestIntegrityTypesAndManifest(t *testing.T) {
	f := getFixtures(t)
	// an activation-only type as a weight
	out := filepath.Join(t.TempDir(), "q8k.gguf")
	const norm = "blk.0.attn_norm.weight"
	rewriteTyped(t, f.gguf, out, nil, map[string]gguf.GGMLType{norm: gguf.TypeQ8_K}, map[string][]byte{norm: make([]byte, 292)})
	if got := problemsOf(integrityOnly(t, out, nil), CheckTypes); !strings.Contains(got, "activation format") {
		t.Errorf("types check %q", got)
	}
	// no manifest: a warning, or a failure when required
	dir := copyTree(t, filepath.Dir(f.gguf))
	os.Remove(filepath.Join(dir, "model.gguf.sha256"))
	model := filepath.Join(dir, "model.gguf")
	rep := integrityOnly(t, model, nil)
	if c := rep.Integrity.Check(CheckManifest); c.Status != StatusWarn || rep.Verdict != VerdictPass {
		t.Errorf("missing manifest: %+v, verdict %s", c, rep.Verdict)
	}
	rep = integrityOnly(t, model, func(o *Options) { o.RequireManifest = true })
	if c := rep.Integrity.Check(CheckManifest); c.Status != StatusFail || rep.Verdict != VerdictFail {
		t.Errorf("required manifest: %+v", c)
	}
	// a split model whose manifest lacks a shard
	sdir := copyTree(t, filepath.Dir(f.split))
	sums, _ := os.ReadFile(filepath.Join(sdir, gguf.ManifestName))
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	os.WriteFile(filepath.Join(sdir, gguf.ManifestName), []byte(strings.Join(lines[:len(lines)-1], "\n")+"\n"), 0o644)
	rep = integrityOnly(t, filepath.Join(sdir, filepath.Base(f.split)), nil)
	if got := problemsOf(rep, CheckManifest); !strings.Contains(got, "not listed") {
		t.Errorf("manifest without a shard: %q", got)
	}
}

// Usage errors are *Error (exit status 2), not failed verdicts.
func TestRunUsageErrors(t *testing.T) {
	f := getFixtures(t)
	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"no model", Options{}, "no model"},
		{"both references", Options{Model: f.gguf, Reference: f.hf, ReferenceLogits: "x"}, "mutually exclusive"},
		{"save without reference", Options{Model: f.gguf, SaveReference: "x"}, "needs --reference"},
		{"odd ctx", Options{Model: f.gguf, Ctx: 65}, "even"},
		{"bad skip", Options{Model: f.gguf, Skip: []string{"speed"}}, "unknown section"},
		{"bad cache", Options{Model: f.gguf, CacheType: "q3_k"}, "cache-type"},
		{"explicit kld without reference", Options{Model: f.gguf, Explicit: []string{"max_kld"}}, "needs --reference"},
		{"missing text", Options{Model: f.gguf, TextPath: "/nonexistent/text.txt"}, "--text"},
		{"missing reference logits", Options{Model: f.gguf, ReferenceLogits: "/nonexistent.tqlogits"}, "nonexistent"},
		{"short text", Options{Model: f.gguf, Text: []byte("too short"), Skip: []string{SectionIntegrity}}, "needs at least"},
	}
	for _, c := range cases {
		_, err := Run(context.Background(), c.o)
		var ve *Error
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.As(err, &ve) {
			t.Errorf("%s: error %v, want *Error containing %q", c.name, err, c.want)
		}
	}
}
