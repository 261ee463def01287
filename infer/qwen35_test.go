package infer

import (
	"context"
	"encoding/binary"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
)

var hybridArchs = []string{"qwen35moe", "qwen35"}

var hybridSources sync.Map // arch -> *MapSource of the fixture (F32), built once per test binary

// hybridFixture generates the Qwen3.5 fixture of arch into a fresh temp folder: 4 blocks (3
// Gated DeltaNet, 1 gated attention), an MTP block and a vision stub, in the released layout.
func hybridFixture(t testing.TB, arch string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), arch)
	if err := fixtures.Generate(dir, fixtures.Preset(arch)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// hybridSource returns a private copy (maps and tensor headers copied, bytes shared) of the
// fixture of arch served through modelsrc.OpenHF as F32 tensors.
func hybridSource(t testing.TB, arch string) *MapSource {
	t.Helper()
	v, ok := hybridSources.Load(arch)
	if !ok {
		v = hfSource(t, hybridFixture(t, arch))
		hybridSources.Store(arch, v)
	}
	base := v.(*MapSource)
	s := NewMapSource()
	for k, v := range base.Metadata {
		s.Metadata[k] = v
	}
	for k, v := range base.Tensors {
		c := *v
		c.Dims = append([]int64(nil), v.Dims...)
		s.Tensors[k] = &c
	}
	return s
}

// hfSource serves an HF folder through modelsrc.OpenHF as F32 tensors.
func hfSource(t testing.TB, dir string) *MapSource {
	t.Helper()
	src, err := modelsrc.OpenHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ms := NewMapSource()
	for _, kv := range src.Metadata() {
		ms.Metadata[kv.Key] = MetaValue(kv.Value)
	}
	for _, d := range src.Tensors() {
		n := int64(1)
		for _, s := range d.Shape {
			n *= s
		}
		v := make([]float32, n)
		if err := src.ReadFloat32(d.Name, v); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4*n)
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		ms.Add(&Tensor{Name: d.Name, Type: gguf.TypeF32, Dims: append([]int64(nil), d.Shape...), Data: b})
	}
	return ms
}

// convertFixture writes the fixture as a GGUF with the given conversion options.
func convertFixture(t testing.TB, dir string, o convert.Options) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := convert.Convert(context.Background(), dir, out, o); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHybridConfig(t *testing.T) {
	src := hybridSource(t, "qwen35moe")
	c, err := ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	h := c.Hybrid
	if c.NLayer != 4 || h == nil || h.NTrunk != 4 || h.NextN != 1 || h.NKHeads != 2 || h.NVHeads != 4 || h.DState != 64 ||
		h.ConvK != 4 || c.NRot != 16 || h.NFFShexp != 256 || h.Sections != [4]int{3, 3, 2, 0} {
		t.Fatalf("config %+v hybrid %+v", c, h)
	}
	if !h.Linear[0] || !h.Linear[2] || h.Linear[3] {
		t.Errorf("layer kinds %v", h.Linear)
	}
	for i, id := range h.RopeIdentity {
		if id {
			t.Errorf("pair %d unrotated with sections [3 3 2 0]", i)
		}
	}
	// an extra ("e") section leaves its pairs unrotated for text
	src.Metadata["qwen35moe.rope.dimension_sections"] = []int32{2, 2, 2, 2}
	c, err = ReadConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for i, id := range c.Hybrid.RopeIdentity {
		if id {
			ids = append(ids, i)
		}
	}
	if len(ids) != 2 || ids[0] != 6 || ids[1] != 7 {
		t.Errorf("unrotated pairs %v, want [6 7] (sectors 6, 7 of 8)", ids)
	}
	for key, val := range map[string]any{
		"qwen35moe.ssm.inner_size":             uint32(300),
		"qwen35moe.ssm.time_step_rank":         uint32(3),
		"qwen35moe.rope.dimension_sections":    []int32{40, 40},
		"qwen35moe.ssm.conv_kernel":            uint32(0),
		"qwen35moe.nextn_predict_layers":       uint32(5),
		"qwen35moe.attention.recurrent_layers": []int32{1},
	} {
		s := hybridSource(t, "qwen35moe")
		s.Metadata[key] = val
		if _, err := ReadConfig(s); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(key, "qwen35moe.")) {
			t.Errorf("%s = %v: error %v", key, val, err)
		}
	}
	s := hybridSource(t, "qwen35moe")
	delete(s.Metadata, "qwen35moe.rope.dimension_sections")
	if _, err := ReadConfig(s); err == nil {
		t.Error("missing rope.dimension_sections accepted")
	}
}

// With f32 weights and an f32 KV cache the fast path computes the float64 reference's math in
// float32. Each block, fed the same input rows, agrees with the reference block to float32
// rounding: max |Δx| <= 5e-6·max |x| (measured up to ~2e-6). End to end the fixtures amplify
// rounding (residual outlier channels of 10-40, peaky logits): max |Δlogit| <= 2e-4·max |logit|
// (measured up to ~7e-5) and |Δp| <= 5e-5 (measured ~2e-5) over 24 positions.
func TestHybridFastMatchesReference(t *testing.T) {
	for _, arch := range hybridArchs {
		t.Run(arch, func(t *testing.T) {
			src := hybridSource(t, arch)
			ref, err := NewReference(src)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(src, Options{Threads: 2, CtxSize: 64, CacheTypeK: "f32", CacheTypeV: "f32"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			c := m.Config()
			toks := randTokens(1, 24, c.NVocab)
			want, err := ref.Logits(toks)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := m.NewSession()
			got, err := s.Eval(toks, LogitsAll)
			if err != nil {
				t.Fatal(err)
			}
			var worstL, worstP float64
			for i := range toks {
				var mx, d float64
				for j := range want[i] {
					mx = math.Max(mx, math.Abs(want[i][j]))
					d = math.Max(d, math.Abs(float64(got[i][j])-want[i][j]))
				}
				worstL = math.Max(worstL, d/mx)
				worstP = math.Max(worstP, maxAbsDiff(softmax32(got[i]), softmax64(want[i])))
			}
			t.Logf("%s: end to end max |Δlogit|/max|logit| %.2e, max |Δp| %.2e", arch, worstL, worstP)
			if worstL > 2e-4 || worstP > 5e-5 {
				t.Errorf("fast path deviates from the float64 reference: logit %.3e, |Δp| %.3e", worstL, worstP)
			}
			// block by block on identical inputs
			E := c.NEmbd
			s.Reset()
			s.beginBatch(len(toks))
			s.embed(toks)
			x := make([][]float64, len(toks))
			for il := 0; il < c.NLayer; il++ {
				for i := range x {
					x[i] = f64(s.x[i*E : (i+1)*E])
				}
				ref.hybridBlock(il, x)
				s.layer(m.blocks[il], il, len(toks), 0)
				var d, mx float64
				for i := range x {
					for j := range x[i] {
						d = math.Max(d, math.Abs(float64(s.x[i*E+j])-x[i][j]))
						mx = math.Max(mx, math.Abs(x[i][j]))
					}
				}
				t.Logf("block %d (linear %v): max |Δx| %.2e of max |x| %.1f", il, c.Hybrid.Linear[il], d, mx)
				if d > 5e-6*mx {
					t.Errorf("block %d: max |Δx| %.3e > 5e-6·%.1f", il, d, mx)
				}
			}
		})
	}
}

// A prompt evaluated in one batch (GEMM products, one conv and delta-rule call over all
// tokens), in uneven batches (state carried between calls) and token by token (decode) gives
// the same distributions: |Δp| <= 5e-5 with f32 weights (float summation order of the GEMM
// and dot paths, amplified as in TestHybridFastMatchesReference), 2e-3 with Q8_0 weights and
// the f16 KV cache. Truncate(0) restarts from zero state (bit-identical rerun); a partial
// truncation is refused.
func TestHybridPromptEqualsDecode(t *testing.T) {
	for _, arch := range hybridArchs {
		for _, q := range []string{"f32", "q8_0"} {
			t.Run(arch+"/"+q, func(t *testing.T) {
				var src Source
				// f32 weights: a batch of >= 2 tokens multiplies in tinyBLAS order and a single
				// token in vec_dot order (as llama.cpp does), so the two differ by float32
				// rounding, amplified through the recurrent state (measured up to 5.5e-5).
				tol := 1e-4
				if q == "f32" {
					src = hybridSource(t, arch)
				} else {
					g, err := OpenGGUF(convertFixture(t, hybridFixture(t, arch), convert.Options{Types: convert.TypeOptions{OutType: q}}))
					if err != nil {
						t.Fatal(err)
					}
					defer g.Close()
					src, tol = g, 2e-3
				}
				toks := randTokens(9, 19, 1400)
				run := func(batch int, steps []int) [][]float32 {
					m, err := Load(src, Options{Threads: 2, CtxSize: 64, BatchSize: batch})
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					s, _ := m.NewSession()
					var out [][]float32
					i := 0
					for _, n := range steps {
						l, err := s.Eval(toks[i:i+n], LogitsAll)
						if err != nil {
							t.Fatal(err)
						}
						out = append(out, l...)
						i += n
					}
					if err := s.Truncate(3); err == nil {
						t.Error("partial truncation of the recurrent state accepted")
					}
					if err := s.Truncate(0); err != nil {
						t.Fatal(err)
					}
					i = 0
					for _, n := range steps {
						again, err := s.Eval(toks[i:i+n], LogitsAll)
						if err != nil {
							t.Fatal(err)
						}
						for j := range again {
							for v := range again[j] {
								if again[j][v] != out[i+j][v] {
									t.Fatalf("after Truncate(0), position %d differs", i+j)
								}
							}
						}
						i += n
					}
					return out
				}
				whole := run(512, []int{19})
				ones := make([]int, 19)
				for i := range ones {
					ones[i] = 1
				}
				for name, got := range map[string][][]float32{"decode": run(512, ones), "batches of 5": run(5, []int{12, 7}), "mixed": run(512, []int{8, 1, 1, 9})} {
					var worst float64
					for j := range whole {
						worst = math.Max(worst, maxAbsDiff(softmax32(got[j]), softmax32(whole[j])))
					}
					t.Logf("%s vs one batch: max |Δp| %.2e", name, worst)
					if worst > tol {
						t.Errorf("%s: max |Δp| %.3e > %.0e", name, worst, tol)
					}
				}
			})
		}
	}
}

// The MTP block is loaded and checked but not run: dropping its tensors (and the nextn key)
// leaves the logits unchanged; a wrong MTP tensor shape fails the load.
func TestHybridMTPIgnored(t *testing.T) {
	src := hybridSource(t, "qwen35moe")
	toks := randTokens(4, 10, 1400)
	eval := func(s Source) [][]float32 {
		m, err := Load(s, Options{Threads: 1, CtxSize: 32})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		se, _ := m.NewSession()
		l, err := se.Eval(toks, LogitsAll)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	full := eval(src)
	trunk := NewMapSource()
	for k, v := range src.Metadata {
		trunk.Metadata[k] = v
	}
	trunk.Metadata["qwen35moe.block_count"] = uint32(4)
	delete(trunk.Metadata, "qwen35moe.nextn_predict_layers")
	for k, v := range src.Tensors {
		if !strings.HasPrefix(k, "blk.4.") {
			trunk.Tensors[k] = v
		}
	}
	got := eval(trunk)
	for i := range full {
		for j := range full[i] {
			if full[i][j] != got[i][j] {
				t.Fatalf("logits depend on the MTP block (position %d)", i)
			}
		}
	}
	bad := NewMapSource()
	for k, v := range src.Metadata {
		bad.Metadata[k] = v
	}
	for k, v := range src.Tensors {
		bad.Tensors[k] = v
	}
	eh := *src.Tensors["blk.4.nextn.eh_proj.weight"]
	eh.Dims = []int64{eh.Dims[1], eh.Dims[0]}
	bad.Tensors["blk.4.nextn.eh_proj.weight"] = &eh
	if _, err := Load(bad, Options{Threads: 1, CtxSize: 32}); err == nil || !strings.Contains(err.Error(), "eh_proj") {
		t.Errorf("bad MTP tensor: %v", err)
	}
}

// The layer-by-layer runner (calibration's access pattern) reproduces Session.Eval's hidden
// states for the hybrid blocks: logits computed from its output match to float rounding.
func TestHybridLayerRunner(t *testing.T) {
	src := hybridSource(t, "qwen35moe")
	toks := randTokens(6, 14, 1400)
	m, err := Load(src, Options{Threads: 2, CtxSize: 32, CacheTypeK: "f32", CacheTypeV: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s, _ := m.NewSession()
	want, err := s.Eval(toks, LogitsAll)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewLayerRunner(src, Options{Threads: 2, CtxSize: 32, CacheTypeK: "f32", CacheTypeV: "f32"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := r.Config()
	E := c.NEmbd
	emb := bytesF32(src.Tensors["token_embd.weight"].Data)
	x := make([]float32, len(toks)*E)
	for i, tok := range toks {
		copy(x[i*E:(i+1)*E], emb[int(tok)*E:(int(tok)+1)*E])
	}
	for il := 0; il < c.NLayer; il++ {
		if err := r.LoadBlock(il, src); err != nil {
			t.Fatal(err)
		}
		if err := r.Forward(x, len(toks), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.LoadBlock(c.NLayer, src); err == nil {
		t.Error("the MTP block loaded as a trunk block")
	}
	norm := bytesF32(src.Tensors["output_norm.weight"].Data)
	out := bytesF32(src.Tensors["output.weight"].Data)
	for i := range toks {
		h := make([]float32, E)
		rmsNorm(h, x[i*E:(i+1)*E], norm, float32(c.RMSEps))
		logits := make([]float32, c.NVocab)
		for v := range logits {
			logits[v] = kDotF32(out[v*E:(v+1)*E], h)
		}
		if d := maxAbsDiff(softmax32(logits), softmax32(want[i])); d > 1e-5 {
			t.Errorf("position %d: layer runner differs from Eval by %.2e", i, d)
		}
	}
}

var hybridFuzzKeys = []string{"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size",
	"full_attention_interval", "rope.dimension_sections", "nextn_predict_layers", "block_count", "attention.recurrent_layers",
	"expert_shared_feed_forward_length", "rope.dimension_count", "attention.key_length"}

var hybridFuzzValues = append([]any{[]int32{3, 3, 2}, []int32{0, 0, 0, 0}, []int32{8, 8, 8, 8, 8}, []bool{true, false},
	[]bool{true, true, true, true, true}, []int32{1, 1, 1, 0, 0}, uint32(4), uint32(5), uint32(16), uint32(128)}, fuzzValues...)

// FuzzHybridConfig sets qwen35moe metadata keys to hostile values: ReadConfig and Load return
// an error or a consistent model that evaluates without panicking.
func FuzzHybridConfig(f *testing.F) {
	f.Add(uint8(0), uint8(0), uint8(1), uint8(2))
	f.Add(uint8(6), uint8(2), uint8(8), uint8(13))
	f.Add(uint8(9), uint8(4), uint8(5), uint8(7))
	f.Add(uint8(7), uint8(1), uint8(3), uint8(5))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 uint8) {
		src := hybridSource(t, "qwen35moe")
		for _, kv := range [][2]uint8{{k1, v1}, {k2, v2}} {
			key := "qwen35moe." + hybridFuzzKeys[int(kv[0])%len(hybridFuzzKeys)]
			if v := hybridFuzzValues[int(kv[1])%len(hybridFuzzValues)]; v == nil {
				delete(src.Metadata, key)
			} else {
				src.Metadata[key] = v
			}
		}
		c, err := ReadConfig(src)
		if err != nil {
			return
		}
		h := c.Hybrid
		if h == nil || c.NLayer != h.NTrunk || len(h.Linear) != c.NLayer || h.NVHeads%h.NKHeads != 0 || h.ConvK < 1 || len(h.RopeIdentity) != c.NRot/2 {
			t.Fatalf("inconsistent config accepted: %+v %+v", c, h)
		}
		m, err := Load(src, Options{Threads: 1, CtxSize: 16})
		if err != nil {
			return
		}
		defer m.Close()
		s, _ := m.NewSession()
		if _, err := s.Eval([]int32{1, 2, 3}, LogitsLast); err != nil {
			t.Fatal(err)
		}
	})
}
