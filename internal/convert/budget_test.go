package convert

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/fixtures"
)

func TestLowerHull(t *testing.T) {
	in := []budgetOption{{bytes: 10, cost: 100}, {bytes: 20, cost: 90}, {bytes: 30, cost: 40}, {bytes: 40, cost: 45}, {bytes: 50, cost: 10}}
	h := lowerHull(in)
	// (20,90) lies above the segment (10,100)-(30,40); (40,45) costs more than (30,40)
	want := []int64{10, 30, 50}
	if len(h) != len(want) {
		t.Fatalf("hull %+v", h)
	}
	for i := range want {
		if h[i].bytes != want[i] {
			t.Fatalf("hull %+v", h)
		}
	}
}

// The budget solver meets the size target, spends it (close to the target) and more bits give
// less measured error; impossible budgets are refused with the smallest possible size.
func TestTargetBPW(t *testing.T) {
	o := fixtures.Preset("qwen3")
	dir := genModel(t, o)
	ref := referenceTensors(t, dir, o)
	relErr := func(out string) float64 {
		m, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var se, sx float64
		for name, r := range ref {
			got, _ := ggufFloats(t, m, name)
			for i, x := range r.vals {
				d := float64(got[i] - x)
				se += d * d
				sx += float64(x) * float64(x)
			}
		}
		return se / sx
	}
	// at the size of the Q4_K_M mixture, the solver's choice has no more error than Q4_K_M
	q4 := filepath.Join(t.TempDir(), "q4.gguf")
	q4res, err := Convert(context.Background(), dir, q4, Options{Types: TypeOptions{OutType: "q4_k_m"}})
	if err != nil {
		t.Fatal(err)
	}
	bud := filepath.Join(t.TempDir(), "bud.gguf")
	budRes, err := Convert(context.Background(), dir, bud, Options{Types: TypeOptions{MaxSize: q4res.Plan.Bytes}})
	if err != nil {
		t.Fatal(err)
	}
	eq4, eb := relErr(q4), relErr(bud)
	t.Logf("same size %d/%d bytes: q4_k_m error %.3e, budget error %.3e", q4res.Plan.Bytes, budRes.Plan.Bytes, eq4, eb)
	if budRes.Plan.Bytes > q4res.Plan.Bytes || eb > eq4*1.02 {
		t.Errorf("budget at the Q4_K_M size: %d bytes, error %.3e vs %.3e", budRes.Plan.Bytes, eb, eq4)
	}

	prevErr := 1e9
	targets := []float64{3.5, 7.0}
	if fullTests() {
		targets = []float64{3.5, 4.5, 5.0, 6.0, 7.0}
	}
	for _, bpw := range targets {
		out := filepath.Join(t.TempDir(), "m.gguf")
		res, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{TargetBPW: bpw}})
		if err != nil {
			t.Fatal(err)
		}
		p := res.Plan
		if p.BPW > bpw || p.BPW < bpw-0.6 {
			t.Errorf("target %.1f: got %.3f bpw", bpw, p.BPW)
		}
		if !strings.Contains(p.Policy, "budget") {
			t.Errorf("policy %q", p.Policy)
		}
		e := relErr(out)
		t.Logf("target %.1f bpw: %.3f bpw, relative squared error %.3e, types %v", bpw, p.BPW, e, p.TypeCount)
		if e >= prevErr {
			t.Errorf("target %.1f: error %.3e not below the smaller budget's %.3e", bpw, e, prevErr)
		}
		prevErr = e
	}
	if _, err := PlanConvert(dir, Options{Types: TypeOptions{TargetBPW: 1.0}}); err == nil || !strings.Contains(err.Error(), "smallest possible") {
		t.Errorf("infeasible budget: %v", err)
	}
	// max-size with turboquant: the policy's types are a floor (a budget below the policy's own
	// size is refused), lm_head stays F16 (fixed), and the extra bytes go to some tensors
	base, err := PlanConvert(dir, Options{Types: TypeOptions{TurboQuant: true}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PlanConvert(dir, Options{Types: TypeOptions{TurboQuant: true, MaxSize: base.Bytes - 1}}); err == nil || !strings.Contains(err.Error(), "smallest possible") {
		t.Errorf("turboquant budget below the policy's size: %v", err)
	}
	limit := base.Bytes + base.Bytes/10
	p, err := PlanConvert(dir, Options{Types: TypeOptions{TurboQuant: true, MaxSize: limit}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Bytes > limit || p.Bytes <= base.Bytes {
		t.Errorf("max-size %d: %d bytes (policy alone %d)", limit, p.Bytes, base.Bytes)
	}
	for i, pt := range p.Tensors {
		if pt.Name == "output.weight" && pt.Type != "f16" {
			t.Errorf("budget changed the skipped lm_head to %s", pt.Type)
		}
		if pt.Bytes < base.Tensors[i].Bytes {
			t.Errorf("%s: budget went below the policy (%s, %d bytes < %s, %d)", pt.Name, pt.Type, pt.Bytes, base.Tensors[i].Type, base.Tensors[i].Bytes)
		}
	}
}

// fakeSensitivity says every tensor containing hot costs 1000 times the KL of the others in
// the reference type.
// With rels set, it also records the probe's relative error: 1e6 for the hot tensors and 1e-6
// for the others, which turns the hot tensors' KL per unit of error into the smallest.
type fakeSensitivity struct {
	hot  string
	rels bool
}

func (f fakeSensitivity) Sensitivity(name string) (gguf.GGMLType, float64, float64, bool) {
	if strings.Contains(name, "token_embd") {
		return 0, 0, 0, false // unmeasured: takes the median factor
	}
	hot, cold := 0.0, 0.0
	if f.rels {
		hot, cold = 1e6, 1e-6
	}
	if strings.Contains(name, f.hot) {
		return gguf.TypeQ4_K, 1, hot, true
	}
	return gguf.TypeQ4_K, 1e-3, cold, true
}

// With measured sensitivities the budget gives the sensitive tensors more bits than the rest
// at the same total size, the opposite hot set gives the opposite allocation, and the rule
// says the cost is predicted KL.
func TestBudgetSensitivity(t *testing.T) {
	o := fixtures.Preset("qwen3")
	dir := genModel(t, o)
	bitsOf := func(hot string, rels bool) (hotBPW, coldBPW float64, p *Plan) {
		p, err := PlanConvert(dir, Options{Types: TypeOptions{TargetBPW: 5, Sensitivity: fakeSensitivity{hot, rels}}})
		if err != nil {
			t.Fatal(err)
		}
		var hb, hw, cb, cw float64
		for _, pt := range p.Tensors {
			if !strings.HasPrefix(pt.Rule, "budget") {
				continue
			}
			if !strings.Contains(pt.Rule, "predicted KL") {
				t.Fatalf("%s: rule %q", pt.Name, pt.Rule)
			}
			n := float64(pt.Bytes) * 8 / pt.BPW
			if strings.Contains(pt.Name, hot) {
				hb, hw = hb+float64(pt.Bytes)*8, hw+n
			} else if !strings.Contains(pt.Name, "token_embd") {
				cb, cw = cb+float64(pt.Bytes)*8, cw+n
			}
		}
		return hb / hw, cb / cw, p
	}
	h1, c1, p1 := bitsOf("attn_", false)
	h2, c2, p2 := bitsOf("ffn_", false)
	t.Logf("hot attn: attn %.2f bpw, rest %.2f; hot ffn: ffn %.2f bpw, rest %.2f", h1, c1, h2, c2)
	if !(h1 > c1+1 && h2 > c2+1) {
		t.Errorf("sensitive tensors did not get more bits: attn-hot %.2f vs %.2f, ffn-hot %.2f vs %.2f", h1, c1, h2, c2)
	}
	if p1.BPW > 5 || p2.BPW > 5 {
		t.Errorf("budget exceeded: %.3f, %.3f bpw", p1.BPW, p2.BPW)
	}
	// the recorded relative errors are what the KL is divided by: the same KL over a far
	// larger error makes the hot set the least sensitive
	h3, c3, _ := bitsOf("attn_", true)
	t.Logf("hot attn with recorded errors: attn %.2f bpw, rest %.2f", h3, c3)
	if !(h3 < c3) {
		t.Errorf("the recorded relative errors were not used: attn %.2f bpw, rest %.2f", h3, c3)
	}
}

// otherModel's measurements name no tensor of the model.
type otherModel struct{}

func (otherModel) Sensitivity(string) (gguf.GGMLType, float64, float64, bool) { return 0, 0, 0, false }

// Sensitivities that name none of the model's tensors change nothing and say so.
func TestBudgetSensitivityOfAnotherModel(t *testing.T) {
	dir := genModel(t, fixtures.Preset("qwen3"))
	p, err := PlanConvert(dir, Options{Types: TypeOptions{TargetBPW: 5, Sensitivity: otherModel{}}})
	if err != nil {
		t.Fatal(err)
	}
	q, err := PlanConvert(dir, Options{Types: TypeOptions{TargetBPW: 5}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(p.Warnings, "\n"), "name none of the tensors") {
		t.Errorf("no warning: %q", p.Warnings)
	}
	for i := range p.Tensors {
		if p.Tensors[i].Type != q.Tensors[i].Type || strings.Contains(p.Tensors[i].Rule, "KL") {
			t.Errorf("%s: %s (%s), without sensitivities %s", p.Tensors[i].Name, p.Tensors[i].Type, p.Tensors[i].Rule, q.Tensors[i].Type)
		}
	}
}

// bestPresetWithin picks, among the presets whose mixture fits, the one with the least
// predicted cost, and none when nothing fits or a type has no measured cost.
func TestBestPresetWithin(t *testing.T) {
	var ts []policy.Tensor
	for _, n := range []string{"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight",
		"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"} {
		ts = append(ts, policy.Tensor{Name: n, Shape: []int64{256, 256}, Type: gguf.TypeF16})
	}
	model := policy.Model{Arch: "llama", NLayer: 1, NHead: 4, NHeadKV: 4}
	// cost falls with bytes: more bits predict less error
	var free []*budgetTensor
	for i := range ts {
		bt := &budgetTensor{idx: i}
		for _, typ := range ladder256 {
			rb, _ := typ.RowBytes(256)
			bt.all = append(bt.all, budgetOption{typ: typ, bytes: rb * 256, cost: 1e6 / float64(rb)})
		}
		free = append(free, bt)
	}
	o := &TypeOptions{}
	q8, _ := gguf.TypeQ8_0.RowBytes(256)
	pre, types, _ := bestPresetWithin(model, ts, free, 7*256*q8, 0, o)
	if pre != "q8_0" || types[0] != gguf.TypeQ8_0 {
		t.Errorf("room for q8_0: got %q %v", pre, types)
	}
	q4, _ := gguf.TypeQ4_K.RowBytes(256)
	pre, _, _ = bestPresetWithin(model, ts, free, 7*256*q4+256*40, 0, o)
	if pre == "" || pre == "q8_0" || pre == "q6_k" || pre == "q5_k_m" {
		t.Errorf("room for about 4.6 bpw: got %q", pre)
	}
	if pre, _, _ = bestPresetWithin(model, ts, free, 1000, 0, o); pre != "" {
		t.Errorf("nothing fits 1000 bytes, got %q", pre)
	}
	for _, bt := range free {
		bt.all = bt.all[:2] // only q2_K and q3_K measured
	}
	pre, types, _ = bestPresetWithin(model, ts, free, 7*256*q8, 0, o)
	for i, typ := range types {
		if typ != gguf.TypeQ2_K && typ != gguf.TypeQ3_K {
			t.Errorf("with only q2_K/q3_K measured, preset %q gives %s type %s", pre, ts[i].Name, typ)
		}
	}
}
