package infer

import (
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
)

func expectLoadError(t *testing.T, src Source, opts Options, want ...string) {
	t.Helper()
	_, err := Load(src, opts)
	if err == nil {
		t.Fatalf("Load succeeded, want an error mentioning %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not mention %q", err, w)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	fresh := func() *MapSource { return defaultSource(t, "qwen3") }

	t.Run("missing tensor", func(t *testing.T) {
		s := fresh()
		delete(s.Tensors, "blk.1.ffn_up.weight")
		expectLoadError(t, s, Options{}, `"blk.1.ffn_up.weight"`, "missing")
	})
	t.Run("missing embedding", func(t *testing.T) {
		s := fresh()
		delete(s.Tensors, "token_embd.weight")
		expectLoadError(t, s, Options{}, `"token_embd.weight"`, "missing")
	})
	t.Run("wrong shape", func(t *testing.T) {
		s := fresh()
		s.Tensors["blk.0.attn_q.weight"].Dims = []int64{256, 128}
		expectLoadError(t, s, Options{}, `"blk.0.attn_q.weight"`, "shape [256 128]", "want [256 256]")
	})
	t.Run("wrong byte size", func(t *testing.T) {
		s := fresh()
		tn := s.Tensors["blk.0.ffn_down.weight"]
		tn.Data = tn.Data[:len(tn.Data)-4]
		expectLoadError(t, s, Options{}, `"blk.0.ffn_down.weight"`, "bytes")
	})
	t.Run("unsupported type", func(t *testing.T) {
		s := fresh()
		tn := s.Tensors["blk.0.attn_k.weight"]
		tn.Type = gguf.TypeIQ2_XXS // 66 bytes per 256: 256x128 -> 128 rows of 66 bytes
		tn.Data = make([]byte, 128*66)
		expectLoadError(t, s, Options{}, `"blk.0.attn_k.weight"`, "iq2_xxs", "not supported")
	})
	t.Run("unknown type id", func(t *testing.T) {
		s := fresh()
		s.Tensors["blk.0.attn_k.weight"].Type = gguf.GGMLType(200)
		expectLoadError(t, s, Options{}, `"blk.0.attn_k.weight"`, "unknown type")
	})
	t.Run("unsupported arch", func(t *testing.T) {
		s := fresh()
		s.Metadata["general.architecture"] = "gpt2"
		expectLoadError(t, s, Options{}, `unsupported architecture "gpt2"`, "qwen3moe")
	})
	t.Run("missing arch", func(t *testing.T) {
		s := fresh()
		delete(s.Metadata, "general.architecture")
		expectLoadError(t, s, Options{}, "general.architecture", "missing")
	})
	t.Run("wrong metadata type", func(t *testing.T) {
		s := fresh()
		s.Metadata["qwen3.block_count"] = "two"
		expectLoadError(t, s, Options{}, "qwen3.block_count", "want an integer")
	})
	t.Run("missing rms eps", func(t *testing.T) {
		s := fresh()
		delete(s.Metadata, "qwen3.attention.layer_norm_rms_epsilon")
		expectLoadError(t, s, Options{}, "layer_norm_rms_epsilon")
	})
	t.Run("heads not divisible", func(t *testing.T) {
		s := fresh()
		s.Metadata["qwen3.attention.head_count_kv"] = uint32(3)
		expectLoadError(t, s, Options{}, "not a multiple of head_count_kv 3")
	})
	t.Run("huge dimension", func(t *testing.T) {
		s := fresh()
		s.Metadata["qwen3.embedding_length"] = uint64(1 << 40)
		expectLoadError(t, s, Options{}, "qwen3.embedding_length", "out of range")
	})
	t.Run("extra tensor", func(t *testing.T) {
		s := fresh()
		s.Add(&Tensor{Name: "rope_freqs.weight", Type: gguf.TypeF32, Dims: []int64{32}, Data: make([]byte, 128)})
		expectLoadError(t, s, Options{}, `unexpected tensor "rope_freqs.weight"`)
	})
	t.Run("moe without experts", func(t *testing.T) {
		s := defaultSource(t, "qwen3moe")
		s.Metadata["qwen3moe.expert_used_count"] = uint32(0)
		expectLoadError(t, s, Options{}, "expert_used_count must be > 0")
	})
	t.Run("bad cache type", func(t *testing.T) {
		expectLoadError(t, fresh(), Options{CacheTypeK: "q5_1"}, "cache-type-k", `"q5_1"`)
	})
	t.Run("bad rope scaling", func(t *testing.T) {
		s := fresh()
		s.Metadata["qwen3.rope.scaling.type"] = "longrope"
		expectLoadError(t, s, Options{}, "longrope")
	})
}

func TestEvalErrors(t *testing.T) {
	src := defaultSource(t, "llama")
	m, err := Load(src, Options{CtxSize: 8, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, _ := m.NewSession()
	if _, err := s.Eval(randTokens(1, 9, 512), LogitsLast); err == nil || !strings.Contains(err.Error(), "context size 8") {
		t.Fatalf("prompt longer than ctx: got %v", err)
	}
	if s.Pos() != 0 {
		t.Fatalf("a rejected prompt must not advance the session (pos %d)", s.Pos())
	}
	if _, err := s.Eval(randTokens(1, 5, 512), LogitsNone); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Eval(randTokens(2, 4, 512), LogitsLast); err == nil || !strings.Contains(err.Error(), "5 already cached") {
		t.Fatalf("overflowing the context: got %v", err)
	}
	if _, err := s.Eval([]int32{512}, LogitsLast); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("token out of range: got %v", err)
	}
	if _, err := s.Eval([]int32{-1}, LogitsLast); err == nil {
		t.Fatal("negative token accepted")
	}
	if _, err := s.Eval(nil, LogitsLast); err == nil {
		t.Fatal("empty input accepted")
	}
	if err := s.Truncate(6); err == nil {
		t.Fatal("truncate beyond the cached tokens accepted")
	}
}
