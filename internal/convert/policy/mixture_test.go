package policy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
)

// denseModel builds the tensor list of a llama-style dense model (GGUF names, ggml shapes).
func denseModel(nLayer int, embd, ff, vocab, nHead, nKV, hd int64, tied bool) []Tensor {
	var ts []Tensor
	add := func(name string, t gguf.GGMLType, shape ...int64) {
		ts = append(ts, Tensor{Name: name, Shape: shape, Type: t})
	}
	add("token_embd.weight", gguf.TypeF16, embd, vocab)
	if !tied {
		add("output.weight", gguf.TypeF16, embd, vocab)
	}
	add("output_norm.weight", gguf.TypeF32, embd)
	for i := 0; i < nLayer; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", gguf.TypeF32, embd)
		add(p+"attn_q.weight", gguf.TypeF16, embd, nHead*hd)
		add(p+"attn_k.weight", gguf.TypeF16, embd, nKV*hd)
		add(p+"attn_v.weight", gguf.TypeF16, embd, nKV*hd)
		add(p+"attn_output.weight", gguf.TypeF16, nHead*hd, embd)
		add(p+"ffn_norm.weight", gguf.TypeF32, embd)
		add(p+"ffn_gate.weight", gguf.TypeF16, embd, ff)
		add(p+"ffn_up.weight", gguf.TypeF16, embd, ff)
		add(p+"ffn_down.weight", gguf.TypeF16, ff, embd)
	}
	return ts
}

func byName(ds []Decision) map[string]Decision {
	m := map[string]Decision{}
	for _, d := range ds {
		m[d.Name] = d
	}
	return m
}

func parseList(s string) map[int]bool {
	m := map[int]bool{}
	for _, f := range strings.Fields(s) {
		var a, b int
		if n, _ := fmt.Sscanf(f, "%d-%d", &a, &b); n == 2 {
			for i := a; i <= b; i++ {
				m[i] = true
			}
			continue
		}
		fmt.Sscanf(f, "%d", &a)
		m[a] = true
	}
	return m
}

// The index lists below are the table of llama-cpp facts §4.4 (read from llama-quant.cpp).
func TestUseMoreBitsTable(t *testing.T) {
	cases := map[int]string{
		28: "0 1 2 5 8 11 14 17 20 23 24 25 26 27",
		36: "0 1 2 3 6 9 12 15 18 21 24 27 30 31 32 33 34 35",
		40: "0 1 2 3 4 7 10 13 16 19 22 25 28 31 34 35 36 37 38 39",
		48: "0 1 2 3 4 5 8 11 14 17 20 23 26 29 32 35 38 41 42 43 44 45 46 47",
		64: "0-7 10 13 16 19 22 25 28 31 34 37 40 43 46 49 52 55-63",
	}
	for n, list := range cases {
		want := parseList(list)
		for i := 0; i < n; i++ {
			if got := useMoreBits(i, n); got != want[i] {
				t.Errorf("useMoreBits(%d,%d) = %v, want %v", i, n, got, want[i])
			}
		}
	}
}

// Worked example of facts §4.4: Q4_K_M, qwen3 dense, 36 layers, untied.
func TestQ4KMDense36(t *testing.T) {
	ts := denseModel(36, 256, 512, 1000, 8, 2, 32, false)
	model := Model{Arch: "qwen3", NLayer: 36, NHead: 8, NHeadKV: 2}
	ds, err := NewMixture(FileTypeQ4_K_M).Assign(model, ts)
	if err != nil {
		t.Fatal(err)
	}
	m := byName(ds)
	more := parseList("0 1 2 3 6 9 12 15 18 21 24 27 30 31 32 33 34 35")
	check := func(name string, want gguf.GGMLType) {
		t.Helper()
		if d, ok := m[name]; !ok || d.Type != want {
			t.Errorf("%s: got %v (%s), want %v", name, d.Type, d.Rule, want)
		}
	}
	check("output.weight", gguf.TypeQ6_K)
	check("token_embd.weight", gguf.TypeQ4_K)
	check("output_norm.weight", gguf.TypeF32)
	for i := 0; i < 36; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		hi := gguf.TypeQ4_K
		if more[i] {
			hi = gguf.TypeQ6_K
		}
		check(p+"attn_v.weight", hi)
		check(p+"ffn_down.weight", hi)
		for _, n := range []string{"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"} {
			check(p+n+".weight", gguf.TypeQ4_K)
		}
		check(p+"attn_norm.weight", gguf.TypeF32)
		if m[p+"attn_norm.weight"].Quantize {
			t.Errorf("norm marked for quantization")
		}
	}
	// Result order follows the input order.
	for i := range ts {
		if ds[i].Name != ts[i].Name {
			t.Fatalf("decision %d is %s, want %s", i, ds[i].Name, ts[i].Name)
		}
	}
}

func TestTiedAndPresets(t *testing.T) {
	ts := denseModel(8, 256, 512, 1000, 4, 4, 64, true)
	model := Model{Arch: "qwen3", NLayer: 8, NHead: 4, NHeadKV: 4}
	cases := []struct {
		ft                       FileType
		embd, v0, v4, down0, out gguf.GGMLType
		attnOut                  gguf.GGMLType
	}{
		{FileTypeQ4_K_M, gguf.TypeQ6_K, gguf.TypeQ6_K, gguf.TypeQ4_K, gguf.TypeQ6_K, 0, gguf.TypeQ4_K}, // use_more_bits(4,8) is false
		{FileTypeQ4_K_S, gguf.TypeQ6_K, gguf.TypeQ5_K, gguf.TypeQ4_K, gguf.TypeQ5_K, 0, gguf.TypeQ4_K},
		{FileTypeQ3_K_M, gguf.TypeQ6_K, gguf.TypeQ5_K, gguf.TypeQ4_K, gguf.TypeQ4_K, 0, gguf.TypeQ4_K}, // n/16 = 0
		{FileTypeQ8_0, gguf.TypeQ8_0, gguf.TypeQ8_0, gguf.TypeQ8_0, gguf.TypeQ8_0, 0, gguf.TypeQ8_0},
		{FileTypeQ2_K, gguf.TypeQ6_K, gguf.TypeQ3_K, gguf.TypeQ3_K, gguf.TypeQ3_K, 0, gguf.TypeQ3_K},
		{FileTypeQ6_K, gguf.TypeQ6_K, gguf.TypeQ6_K, gguf.TypeQ6_K, gguf.TypeQ6_K, 0, gguf.TypeQ6_K},
		{FileTypeF16, gguf.TypeF16, gguf.TypeF16, gguf.TypeF16, gguf.TypeF16, 0, gguf.TypeF16},
	}
	for _, c := range cases {
		ds, err := NewMixture(c.ft).Assign(model, ts)
		if err != nil {
			t.Fatal(err)
		}
		m := byName(ds)
		got := []gguf.GGMLType{m["token_embd.weight"].Type, m["blk.0.attn_v.weight"].Type, m["blk.4.attn_v.weight"].Type,
			m["blk.0.ffn_down.weight"].Type, m["blk.0.attn_output.weight"].Type}
		want := []gguf.GGMLType{c.embd, c.v0, c.v4, c.down0, c.attnOut}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%v: field %d got %v want %v", c.ft, i, got[i], want[i])
			}
		}
	}
}

func TestFallbacks(t *testing.T) {
	cases := []struct {
		in   gguf.GGMLType
		cols int64
		want gguf.GGMLType
		fb   bool
	}{
		{gguf.TypeQ4_K, 256, gguf.TypeQ4_K, false},
		{gguf.TypeQ4_K, 96, gguf.TypeQ5_0, true},
		{gguf.TypeQ5_K, 96, gguf.TypeQ5_1, true},
		{gguf.TypeQ6_K, 96, gguf.TypeQ8_0, true},
		{gguf.TypeQ2_K, 96, gguf.TypeQ4_0, true},
		{gguf.TypeQ3_K, 96, gguf.TypeQ4_0, true},
		{gguf.TypeIQ4_XS, 96, gguf.TypeIQ4_NL, true},
		{gguf.TypeQ4_K, 100, gguf.TypeF16, true},
		{gguf.TypeQ8_0, 100, gguf.TypeF16, true},
		{gguf.TypeF16, 7, gguf.TypeF16, false},
	}
	for _, c := range cases {
		got, fb, err := Fallback(c.in, c.cols)
		if err != nil || got != c.want || fb != c.fb {
			t.Errorf("Fallback(%v,%d) = %v,%v,%v want %v,%v", c.in, c.cols, got, fb, err, c.want, c.fb)
		}
	}
	// Output rule: row not a multiple of the default block -> Q8_0 directly.
	ts := denseModel(2, 96, 96, 50, 3, 3, 32, false)
	ds, err := NewMixture(FileTypeQ4_K_M).Assign(Model{Arch: "llama", NLayer: 2, NHead: 3, NHeadKV: 3}, ts)
	if err != nil {
		t.Fatal(err)
	}
	m := byName(ds)
	if m["output.weight"].Type != gguf.TypeQ8_0 {
		t.Errorf("output with 96 cols: %v", m["output.weight"].Type)
	}
	if d := m["blk.1.attn_q.weight"]; d.Type != gguf.TypeQ5_0 || !d.Fallback {
		t.Errorf("attn_q 96 cols: %+v", d)
	}
}

func TestOverridesPureAndMoE(t *testing.T) {
	ts := denseModel(4, 256, 512, 1000, 4, 4, 64, false)
	mix := NewMixture(FileTypeQ4_K_M)
	o, err := ParseOverride("ATTN_Q=q8_0")
	if err != nil {
		t.Fatal(err)
	}
	o2, _ := ParseOverride(`blk\.[23]\.ffn_up=f16`)
	mix.Overrides = []Override{o, o2}
	mix.OutputType = gguf.TypeQ8_0
	model := Model{Arch: "llama", NLayer: 4, NHead: 4, NHeadKV: 4}
	m := byName(must(mix.Assign(model, ts)))
	if m["blk.0.attn_q.weight"].Type != gguf.TypeQ8_0 || m["blk.2.ffn_up.weight"].Type != gguf.TypeF16 ||
		m["blk.1.ffn_up.weight"].Type != gguf.TypeQ4_K || m["output.weight"].Type != gguf.TypeQ8_0 {
		t.Errorf("overrides not applied: %+v %+v %+v", m["blk.0.attn_q.weight"], m["blk.2.ffn_up.weight"], m["output.weight"])
	}
	mix = NewMixture(FileTypeQ4_K_M)
	mix.Pure = true
	m = byName(must(mix.Assign(model, ts)))
	if m["blk.0.attn_v.weight"].Type != gguf.TypeQ4_K || m["output.weight"].Type != gguf.TypeQ4_K {
		t.Errorf("pure: %+v %+v", m["blk.0.attn_v.weight"], m["output.weight"])
	}
	for _, bad := range []string{"noequals", "x=q9_9", "(=q8_0", "x=iq2_xxs"} {
		if _, err := ParseOverride(bad); err == nil {
			t.Errorf("ParseOverride(%q) accepted", bad)
		}
	}
	// 8-expert MoE: attn_v/attn_k -> Q8_0; ffn_down by layer parsed from the name.
	moe := []Tensor{
		{Name: "blk.0.attn_v.weight", Shape: []int64{256, 256}},
		{Name: "blk.0.attn_k.weight", Shape: []int64{256, 256}},
		{Name: "blk.0.ffn_down_exps.weight", Shape: []int64{256, 256, 8}},
		{Name: "blk.0.ffn_gate_inp.weight", Shape: []int64{256, 8}, Type: gguf.TypeF32},
		{Name: "output.weight", Shape: []int64{256, 100}},
	}
	m = byName(must(NewMixture(FileTypeQ4_K_M).Assign(Model{Arch: "qwen3moe", NLayer: 8, NHead: 4, NHeadKV: 4, NExpert: 8}, moe)))
	if m["blk.0.attn_v.weight"].Type != gguf.TypeQ8_0 || m["blk.0.attn_k.weight"].Type != gguf.TypeQ8_0 ||
		m["blk.0.ffn_down_exps.weight"].Type != gguf.TypeQ6_K || m["blk.0.ffn_gate_inp.weight"].Type != gguf.TypeF32 {
		t.Errorf("moe: %+v", m)
	}
	// A layer index beyond block_count is an error for MoE models.
	bad := []Tensor{{Name: "blk.9.ffn_down_exps.weight", Shape: []int64{256, 256, 8}}}
	if _, err := NewMixture(FileTypeQ4_K_M).Assign(Model{NLayer: 8, NExpert: 8}, bad); err == nil {
		t.Error("bad layer accepted")
	}
}

func must(ds []Decision, err error) []Decision {
	if err != nil {
		panic(err)
	}
	return ds
}

func TestSortAndParse(t *testing.T) {
	names := []string{"blk.10.attn_q.weight", "blk.9.attn_q.weight", "token_embd.weight", "blk.9.attn_k.weight", "output.weight"}
	SortNames(names)
	want := "output.weight token_embd.weight blk.9.attn_k.weight blk.9.attn_q.weight blk.10.attn_q.weight"
	if strings.Join(names, " ") != want {
		t.Errorf("sorted: %v", names)
	}
	for _, s := range []string{"q4_k_m", "Q4_K", "f16", "BF16", "15", "q8_0", "iq4_xs"} {
		if _, err := ParseFileType(s); err != nil {
			t.Errorf("ParseFileType(%q): %v", s, err)
		}
	}
	if ft, _ := ParseFileType("q4_k"); ft != FileTypeQ4_K_M {
		t.Errorf("q4_k alias = %v", ft)
	}
	if _, err := ParseFileType("q9"); err == nil || !strings.Contains(err.Error(), "q4_k_m") {
		t.Errorf("bad type error %v", err)
	}
}
