package infer

import (
	"fmt"
	"github.com/tq-project/tq/quant/kernels"
	"math"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/internal/testmodel"
)

type recObserver struct {
	rows   map[string]int     // name -> rows seen (experts summed)
	sumSq  map[string]float64 // name -> Σx²
	cols   map[string]int
	expert map[string]int // name/expert -> rows
	routes int
	bad    string
}

func newRec() *recObserver {
	return &recObserver{rows: map[string]int{}, sumSq: map[string]float64{}, cols: map[string]int{}, expert: map[string]int{}}
}

func (r *recObserver) Linear(name string, expert int, x []float32, n, cols int) {
	if len(x) != n*cols {
		r.bad = fmt.Sprintf("%s: %d values for %d×%d", name, len(x), n, cols)
	}
	r.rows[name] += n
	r.cols[name] = cols
	for _, v := range x {
		r.sumSq[name] += float64(v) * float64(v)
	}
	if expert >= 0 {
		r.expert[fmt.Sprintf("%s/%d", name, expert)] += n
	}
}

func (r *recObserver) Route(layer int, experts []int32, weights []float32, n, k int) {
	r.routes++
	for t := 0; t < n; t++ {
		var s float64
		for j := 0; j < k; j++ {
			s += float64(weights[t*k+j])
			for j2 := 0; j2 < j; j2++ {
				if experts[t*k+j] == experts[t*k+j2] {
					r.bad = "expert chosen twice"
				}
			}
		}
		if math.Abs(s-1) > 1e-5 {
			r.bad = fmt.Sprintf("layer %d token %d: routing weights sum to %v", layer, t, s)
		}
	}
}

func TestObserver(t *testing.T) {
	for _, arch := range []string{"qwen2", "qwen3moe"} {
		t.Run(arch, func(t *testing.T) {
			src := defaultSource(t, arch)
			m, err := Load(src, Options{Threads: 2, CtxSize: 32})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			s, _ := m.NewSession()
			rec := newRec()
			s.SetObserver(rec)
			const T = 10
			if _, err := s.Eval(randTokens(5, T, 512), LogitsAll); err != nil {
				t.Fatal(err)
			}
			if rec.bad != "" {
				t.Fatal(rec.bad)
			}
			c := m.Config()
			for il := 0; il < c.NLayer; il++ {
				for _, n := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
					name := blkName(il, n+".weight")
					if rec.rows[name] != T {
						t.Errorf("%s: observed %d rows, want %d", name, rec.rows[name], T)
					}
				}
				// q, k and v see the same normalised input
				q, k := rec.sumSq[blkName(il, "attn_q.weight")], rec.sumSq[blkName(il, "attn_k.weight")]
				if q != k || q == 0 {
					t.Errorf("layer %d: Σx² differs between attn_q (%v) and attn_k (%v)", il, q, k)
				}
				if arch == "qwen3moe" {
					want := T * c.NExpertUse
					for _, n := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
						name := blkName(il, n+".weight")
						if rec.rows[name] != want {
							t.Errorf("%s: %d routed rows, want %d", name, rec.rows[name], want)
						}
					}
					if rec.rows[blkName(il, "ffn_gate_inp.weight")] != T {
						t.Errorf("router saw %d rows", rec.rows[blkName(il, "ffn_gate_inp.weight")])
					}
				} else {
					for _, n := range []string{"ffn_gate", "ffn_up", "ffn_down"} {
						if got := rec.rows[blkName(il, n+".weight")]; got != T {
							t.Errorf("%s: %d rows", n, got)
						}
					}
					if rec.cols[blkName(il, "ffn_down.weight")] != c.NFF {
						t.Errorf("ffn_down input width %d", rec.cols[blkName(il, "ffn_down.weight")])
					}
				}
			}
			if arch == "qwen3moe" && rec.routes != c.NLayer {
				t.Errorf("Route called %d times, want %d", rec.routes, c.NLayer)
			}
			experts := 0
			for k := range rec.expert {
				if strings.HasPrefix(k, "blk.0.ffn_gate_exps") {
					experts++
				}
			}
			if arch == "qwen3moe" && experts < 2 {
				t.Errorf("only %d experts used in layer 0", experts)
			}
			if rec.rows["output.weight"] != T {
				t.Errorf("output.weight saw %d rows", rec.rows["output.weight"])
			}
		})
	}
}

// The f32 batch path (dequantized weight tiles, unrounded activations) must agree with the
// float64 reference on the same dequantized weights to float32 rounding when the KV cache is
// f32, also for quantized weights.
func TestFullPrecisionMatchesReference(t *testing.T) {
	for _, arch := range []string{"llama", "qwen3moe"} {
		t.Run(arch, func(t *testing.T) {
			spec := testmodel.Default(arch)
			spec.Types = map[string]gguf.GGMLType{"default": gguf.TypeQ4_K, "ffn_down": gguf.TypeQ6_K, "attn_v": gguf.TypeQ8_0}
			src := buildSource(t, spec)
			ref, err := NewReference(src)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(src, Options{Threads: 2, CtxSize: 64, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			toks := randTokens(8, 12, spec.Vocab)
			want, _ := ref.Logits(toks)
			s, _ := m.NewSession()
			got, err := s.Eval(toks, LogitsAll)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for i := range toks {
				l, _ := logitErr(got[i], want[i])
				worst = math.Max(worst, l)
			}
			t.Logf("max rel logit err %.2e", worst)
			if worst > 1e-4 {
				t.Errorf("f32 batch path deviates from the reference: %.3e", worst)
			}
		})
	}
}

// RoPE scaling (linear, YaRN) and llama's rope_freqs follow the float64 reference.
func TestRopeVariantsMatchReference(t *testing.T) {
	cases := []struct {
		name  string
		arch  string
		typ   string
		fac   float64
		freqs bool
	}{
		{"linear", "qwen3", "linear", 4, false},
		{"yarn", "qwen3", "yarn", 4, false},
		{"yarn-llama", "llama", "yarn", 8, false},
		{"rope_freqs", "llama", "", 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := testmodel.Default(c.arch)
			spec.RopeScaling, spec.RopeFactor, spec.RopeOrigCtx = c.typ, c.fac, 64
			src := buildSource(t, spec)
			if c.freqs {
				f := make([]float32, spec.HeadDim/2)
				for i := range f {
					f[i] = 1 + float32(i%7)
				}
				src.Add(&Tensor{Name: "rope_freqs.weight", Type: gguf.TypeF32, Dims: []int64{int64(len(f))}, Data: f32Bytes(f)})
			}
			ref, err := NewReference(src)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(src, Options{Threads: 2, CtxSize: 256, CacheTypeK: "f32", CacheTypeV: "f32"})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			// long enough that positions beyond the original context matter for YaRN
			toks := randTokens(9, 160, spec.Vocab)
			want, _ := ref.Logits(toks)
			s, _ := m.NewSession()
			got, err := s.Eval(toks, LogitsAll)
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for _, i := range []int{0, 50, 100, 159} {
				l, _ := logitErr(got[i], want[i])
				worst = math.Max(worst, l)
			}
			t.Logf("max rel logit err %.2e", worst)
			if worst > 5e-4 {
				t.Errorf("rope variant deviates from the reference: %.3e", worst)
			}
		})
	}
}

// PackWeights keeps the 16-bit weight tiles packed after their first product: the logits of
// several evaluations through the kept tiles are bit for bit those without it (dense and MoE,
// BF16 and F16), and the tiles are in fact kept. The AMX path (which never keeps bf16 tiles)
// is off here.
func TestPackWeightsSameLogits(t *testing.T) {
	kernels.SetAMX(false)
	defer kernels.SetAMX(true)
	for _, c := range []struct {
		arch string
		typ  gguf.GGMLType
	}{{"llama", gguf.TypeBF16}, {"qwen3moe", gguf.TypeF16}} {
		t.Run(c.arch, func(t *testing.T) {
			spec := testmodel.Default(c.arch)
			spec.Types = map[string]gguf.GGMLType{"default": c.typ}
			src := buildSource(t, spec)
			run := func(pack bool) ([][][]float32, *Model) {
				m, err := Load(src, Options{Threads: 2, CtxSize: 64, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true, PackWeights: pack})
				if err != nil {
					t.Fatal(err)
				}
				var out [][][]float32
				for i := 0; i < 3; i++ {
					s, _ := m.NewSession()
					got, err := s.Eval(randTokens(uint64(20+i), 12, spec.Vocab), LogitsAll)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, got)
				}
				return out, m
			}
			want, m0 := run(false)
			defer m0.Close()
			got, m1 := run(true)
			defer m1.Close()
			for i := range want {
				for j := range want[i] {
					for k := range want[i][j] {
						if math.Float32bits(got[i][j][k]) != math.Float32bits(want[i][j][k]) {
							t.Fatalf("eval %d token %d logit %d: %g with packed weights, %g without", i, j, k, got[i][j][k], want[i][j][k])
						}
					}
				}
			}
			kept := 0
			var bytes int64
			for _, p := range m1.output.packed {
				if p != nil {
					kept++
					bytes += p.Bytes()
				}
			}
			if kept == 0 || len(m0.output.packed) != 0 {
				t.Errorf("the LM head kept %d packed tiles with PackWeights, %d without", kept, len(m0.output.packed))
			}
			// what calibration budgets for it
			if want := PackedWeightBytes([]int64{int64(m1.output.in), int64(m1.output.out)}); kernels.UsingAsm() && bytes != want {
				t.Errorf("the LM head's packed tiles take %d bytes, PackedWeightBytes says %d", bytes, want)
			}
		})
	}
}

// TestAMXTiles checks amxTiles' split of a weight's rows: whole tiles of a multiple of 32 rows
// up to amxTileMax, covering every row once, and more than one where several workers share it.
func TestAMXTiles(t *testing.T) {
	for _, out := range []int{1, 31, 64, 1152, 1536, 2304, 4608, 5000, 151936} {
		for _, workers := range []int{1, 2, 3, 16} {
			nt, rows := amxTiles(out, workers)
			if rows%32 != 0 || rows > amxTileMax || nt < 1 || (nt-1)*rows >= out || nt*rows < out {
				t.Fatalf("out=%d workers=%d: %d tiles of %d rows", out, workers, nt, rows)
			}
			if workers > 1 && out >= 64 && nt < 2 {
				t.Fatalf("out=%d workers=%d: one tile for several workers", out, workers)
			}
		}
	}
}

// TestAMXLogits runs a FullPrecision bf16 model with the AMX GEMM and without (where the
// machine has AMX): the logits agree to float32 rounding carried through the layers (relative
// 1e-4 of the largest logit), and batches below kernels.AMXMinRows take the FMA path, bit for bit.
func TestAMXLogits(t *testing.T) {
	if !kernels.HasAMX() {
		t.Skip("no AMX-BF16 on this machine: the FMA GEMM is the only path")
	}
	for _, arch := range []string{"llama", "qwen3moe"} {
		t.Run(arch, func(t *testing.T) {
			spec := testmodel.Default(arch)
			spec.Types = map[string]gguf.GGMLType{"default": gguf.TypeBF16}
			src := buildSource(t, spec)
			run := func(amx bool, n int) [][]float32 {
				kernels.SetAMX(amx)
				defer kernels.SetAMX(true)
				m, err := Load(src, Options{Threads: 2, CtxSize: 64, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				s, _ := m.NewSession()
				got, err := s.Eval(randTokens(31, n, spec.Vocab), LogitsAll)
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			off, on := run(false, 40), run(true, 40)
			big, diff := 0.0, 0.0
			for i := range off {
				for j := range off[i] {
					big = max(big, math.Abs(float64(off[i][j])))
					diff = max(diff, math.Abs(float64(off[i][j]-on[i][j])))
				}
			}
			if diff > 1e-4*big {
				t.Fatalf("logits differ by %g (largest %g) with AMX", diff, big)
			}
			t.Logf("largest difference %.3g of %.3g", diff, big)
			// a short batch stays on the FMA path
			offS, onS := run(false, kernels.AMXMinRows-1), run(true, kernels.AMXMinRows-1)
			for i := range offS {
				for j := range offS[i] {
					if math.Float32bits(offS[i][j]) != math.Float32bits(onS[i][j]) {
						t.Fatalf("%d tokens: logit [%d][%d] %g with AMX on, %g off", kernels.AMXMinRows-1, i, j, onS[i][j], offS[i][j])
					}
				}
			}
		})
	}
}
