package infer

import (
	"math"
	"testing"

	"github.com/tq-project/tq/internal/llamacppref"

	"github.com/tq-project/tq/internal/convert"
)

// Tolerances of the hybrid parity against llama.cpp.
//
// On a bit-exact host (bitExactHost: node-llama-cpp runs its AVX2 "haswell" build, whose float
// orders tq reproduces) the constants below apply:
// F32 weights: max |Δp| <= 1e-4 (measured ~3e-5) and identical greedy continuations.
// F16 weights: activations are rounded to f16 before every product in both engines, but the
// f16 GEMMs sum in different orders; on the other architectures this already costs up to
// ~3e-4 and the Qwen3.5 fixtures (outlier channels of 10-40 in the residual stream, peaky
// logits) amplify it to ~2e-3: max |Δp| <= 3e-3 and identical greedy continuations.
// Quantized weights: activations are rounded to q8_0 blocks before each product; a one-ulp
// difference occasionally moves a value across a rounding boundary ("flip"), and in a Gated
// DeltaNet layer the recurrent state carries the flip to every later token (an all-Q8_0
// dense fixture flips at token 3 and drifts to |Δp| ~0.1 by token 17; changing the type of
// any one tensor family removes that flip, which rules out a systematic error). Required: at
// least half of all quantized positions within 1e-5 (a formula error breaks every position),
// max |Δp| <= 0.15, and llama.cpp's greedy token never more than 5e-2 below our argmax under
// teacher forcing.
//
// On any other host (AVX-512, AVX-VNNI, or Go's own cos/sin) llama.cpp's float32 and f16
// products sum in other orders (16-lane AVX-512 accumulators instead of 8-lane AVX2 ones, other
// tile shapes), so for F32/F16 weights the difference is no longer bounded by the bit-exact
// constants. Both engines still apply the same roundings (f16 weights, f16 activations before
// each f16 product, the f16 KV cache) and differ only in float32 summation order. A different
// order moves a sum by a few float32 ulps; where that sum is then rounded to f16 it can land on
// the neighbouring f16 value, so in the worst case the two engines differ by the full effect of
// those roundings — and that effect is what tq's distance from the unrounded float64 evaluation
// of the same weights (Reference) measures, per model and per position. So there the bound is
// max |Δp| <= max(constant, max |p_tq − p_float64|), and max |p_tq − p_float64| itself must stay
// below tolHybridRefF32/tolHybridRefF16 (about 4x what was measured: 4.2e-4 and 1.3e-2 on
// qwen35moe), so a formula error in tq cannot widen the bound. Measured on an Intel Sapphire
// Rapids (AVX-512, AVX-VNNI): f16 qwen35moe |Δp| 4.6e-3 against a derived bound of 1.3e-2, f32
// 1.3e-5 against 4.2e-4. Greedy continuations must then only pass the teacher-forced gap test,
// whose bound is widened the same way: a near-tie may legitimately resolve the other way. For
// quantized weights the same argument holds with the q8_0/q8_K activation roundings, whose
// footprint on these peaky random fixtures is large (|p_tq − p_float64| up to ~1 along the greedy
// sequence), so there the derived bound widens only the teacher-forced gap — and on such a
// fixture it no longer discriminates (measured: a Q4_K qwen35moe fixture whose recurrent state
// carries an order flip reached a gap of 0.55 against a footprint of 1.0) — while max |Δp| <=
// 0.15 and the share of positions within 1e-5 (a formula error breaks every position) still
// apply. On such
// hosts `make test` also runs the strict criteria against llama.cpp's AVX2 variant
// (TQ_LLAMACPP_CPU=haswell), where this model agrees at 24/24 positions.
//
// On a CPU with AMX-INT8 (llamacppref.AMXBuild: ggml loads its "sapphirerapids" variant) one
// premise above fails: that build's F16 products take the float32 activations unrounded
// (ggml-cpu/amx/mmq.cpp, ggml_backend_amx_mul_mat), so llama.cpp applies a subset of tq's
// roundings rather than the same ones, and its quantized products run AMX/VNNI tiles with their
// own summation order. For F16 weights each engine is then held to the float64 evaluation on
// its own — llama.cpp's max |p_llama.cpp − p_float64| must stay below tolHybridRefF16 like tq's,
// so a file llama.cpp reads differently fails — and max |Δp| may reach twice tq's distance
// (llama.cpp's, from a subset of the roundings, is expected to be no larger; measured on a
// Sapphire Rapids: qwen35moe f16 |Δp| 1.4e-2, tq 1.3e-2 and llama.cpp 1.2e-3 from float64). For quantized weights
// the share of positions within 1e-5 drops to minNearAMX: every product now differs from tq's in
// float32 summation order, and the DeltaNet state carries each flip on (measured: 30/72 against
// 55/72 for the AVX-512 "zen4" variant on the same machine); max |Δp| <= 0.15 and the
// teacher-forced gap still apply unchanged.
const (
	tolHybridF32       = 1e-4
	tolHybridF16       = 3e-3
	tolHybridQuant     = 0.15
	tolHybridGreedyGap = 5e-2
	tolHybridRefF32    = 2e-3
	tolHybridRefF16    = 5e-2
	minNearAMX         = 0.25
)

// TestHybridLlamaCppParity compares next-token distributions (every position of a 24-token
// prompt, whole vocabulary) and 32-token greedy continuations with llama.cpp (node-llama-cpp
// 3.21.1, CPU, f16 KV cache, f32 recurrent state) on the Qwen3.5 fixtures converted by tq
// (tolerances above).
func TestHybridLlamaCppParity(t *testing.T) {
	llamacppref.Bridge(t)
	type pcase struct {
		name string
		arch string
		opts convert.Options
		tol  float64 // tolHybridF32, tolHybridF16 or tolHybridQuant
	}
	cases := []pcase{
		{"qwen35moe/f32", "qwen35moe", convert.Options{Types: convert.TypeOptions{OutType: "f32"}}, tolHybridF32},
		{"qwen35moe/f16", "qwen35moe", convert.Options{Types: convert.TypeOptions{OutType: "f16"}}, tolHybridF16},
		{"qwen35moe/turboquant", "qwen35moe", convert.Options{Types: convert.TypeOptions{TurboQuant: true}}, tolHybridQuant},
		{"qwen35/f32", "qwen35", convert.Options{Types: convert.TypeOptions{OutType: "f32"}}, tolHybridF32},
		{"qwen35/f16", "qwen35", convert.Options{Types: convert.TypeOptions{OutType: "f16"}}, tolHybridF16},
		{"qwen35/q4_0", "qwen35", convert.Options{Types: convert.TypeOptions{OutType: "q4_0"}}, tolHybridQuant},
		{"qwen35/q8_0", "qwen35", convert.Options{Types: convert.TypeOptions{OutType: "q8_0"}}, tolHybridQuant},
	}
	if testing.Short() {
		// the share of near-exact quantized positions is a property of the quantized set, not of
		// the turboquant file alone (about a third of its positions): keep a q8_0 one beside it
		cases = []pcase{cases[1], cases[2], cases[6]}
	}
	prompt := randTokens(21, 24, 1400)
	var positions []int
	for i := range prompt {
		positions = append(positions, i)
	}
	greedyPrompt := prompt[:8]
	const nGreedy = 32
	dirs := map[string]string{}
	paths := make([]string, len(cases))
	var reqs []llamaReq
	for i, c := range cases {
		if dirs[c.arch] == "" {
			dirs[c.arch] = hybridFixture(t, c.arch)
		}
		paths[i] = convertFixture(t, dirs[c.arch], c.opts)
		reqs = append(reqs,
			llamaReq{Op: "probs", Model: paths[i], Tokens: prompt, Positions: positions, Threads: 1, Ctx: 256},
			llamaReq{Op: "greedy", Model: paths[i], Tokens: greedyPrompt, N: nGreedy, Threads: 1, Ctx: 256})
	}
	resp := llamaBatch(t, reqs)
	qNear, qTotal := 0, 0
	for i, c := range cases {
		exact := c.tol != tolHybridQuant
		t.Run(c.name, func(t *testing.T) {
			src, s, logits := evalGGUF(t, paths[i], prompt)
			tol, gapTol := c.tol, tolHybridGreedyGap
			strict := bitExactHost()
			if !strict {
				exact64 := refProbs(t, src, prompt)
				d := refDistance(t, exact64, logits, refLimit(c.tol))
				if exact {
					tol = max(tol, d)
				}
				if c.tol == tolHybridF16 && llamacppref.AMXBuild() {
					// llama.cpp's AMX build skips the f16 rounding of the activations that tq
					// applies (tolerances above): its own distance from the float64 evaluation
					// must stay under tq's cap, and the engines may differ by twice tq's.
					dl := llamaRefDistance(t, exact64, resp[2*i])
					t.Logf("AMX build: max |p_llama.cpp − p_float64| = %.2e", dl)
					if dl > refLimit(c.tol) {
						t.Errorf("llama.cpp is %.3e from the float64 evaluation (limit %.0e)", dl, refLimit(c.tol))
					}
					tol = max(tol, 2*d)
				}
			}
			worst, near := compareDists(t, logits, resp[2*i], len(positions))
			t.Logf("max |Δp| vs llama.cpp %.2e (tolerance %.2g); positions within %.0e: %d/%d", worst, tol, nearExact, near, len(positions))
			if worst > tol {
				t.Errorf("max |Δp| %.3e > %.2g", worst, tol)
			}
			if !exact {
				qNear += near
				qTotal += len(positions)
			}
			want := resp[2*i+1].Tokens
			if len(want) != nGreedy {
				t.Fatalf("llama.cpp greedy returned %d tokens", len(want))
			}
			s.Reset()
			got := greedy(t, s, greedyPrompt, nGreedy)
			diverge := firstDivergence(got, want)
			if diverge >= 0 && exact && strict {
				t.Errorf("greedy continuation differs at token %d:\n ours  %v\n llama %v", diverge, got, want)
			}
			if !strict {
				// the rounding footprint along the sequence the gap is measured on
				seq := append(append([]int32(nil), greedyPrompt...), want...)
				s.Reset()
				seqLogits, err := s.Eval(seq, LogitsAll)
				if err != nil {
					t.Fatal(err)
				}
				gapTol = max(gapTol, refDistance(t, refProbs(t, src, seq), seqLogits, refLimit(c.tol)))
			}
			agree, gap := teacherForced(t, s, greedyPrompt, want)
			t.Logf("greedy: first divergence %d (-1: none) of %d; teacher-forced argmax agreement %d/%d, largest gap %.2e", diverge, nGreedy, agree, nGreedy, gap)
			if gap > gapTol {
				t.Errorf("llama.cpp's greedy token is %.3e below our argmax (tolerance %.2g)", gap, gapTol)
			}
		})
	}
	if qTotal > 0 {
		t.Logf("quantized models: %d/%d positions agree to %.0e", qNear, qTotal, nearExact)
		want := minNearExact
		if llamacppref.AMXBuild() {
			want = minNearAMX
		}
		if float64(qNear) < want*float64(qTotal) {
			t.Errorf("only %d/%d quantized positions agree to %.0e (want >= %.0f%%)", qNear, qTotal, nearExact, 100*want)
		}
	}
}

// refLimit is the cap on tq's distance from the float64 evaluation for a case of tolerance tol:
// tolHybridRefF32 / tolHybridRefF16 for float weights, none (1) for quantized weights, whose
// activation roundings alone move these fixtures' probabilities by up to ~1.
func refLimit(tol float64) float64 {
	switch tol {
	case tolHybridF32:
		return tolHybridRefF32
	case tolHybridF16:
		return tolHybridRefF16
	}
	return 1
}

// refProbs returns the float64 evaluation (Reference) of src on prompt as probabilities, one
// distribution per position: the weights without any activation rounding.
func refProbs(t *testing.T, src Source, prompt []int32) [][]float64 {
	t.Helper()
	ref, err := NewReference(src)
	if err != nil {
		t.Fatal(err)
	}
	logits, err := ref.Logits(prompt)
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]float64, len(logits))
	for p := range logits {
		out[p] = softmax64(logits[p])
	}
	return out
}

// refDistance returns max |p_tq − p_float64| over the positions of exact (refProbs): the
// rounding footprint that bounds the difference between two correct engines that differ only in
// summation order (see the tolerances above). It fails the test if that footprint exceeds limit
// (tolHybridRefF16 for f16 weights, tolHybridRefF32 for f32), which would mean a formula error
// in tq.
func refDistance(t *testing.T, exact [][]float64, logits [][]float32, limit float64) float64 {
	t.Helper()
	var d float64
	for p := range exact {
		ours := softmax32(logits[p])
		for k := range ours {
			d = max(d, math.Abs(ours[k]-exact[p][k]))
		}
	}
	t.Logf("not a bit-exact host: max |p_tq − p_float64| = %.2e (limit %.0e) widens the tolerance", d, limit)
	if d > limit {
		t.Errorf("tq is %.3e from the float64 evaluation (limit %.0e)", d, limit)
	}
	return d
}

// llamaRefDistance returns max |p_llama.cpp − p_float64| over the positions of llama.cpp's answer
// pr, exact being refProbs of the same prompt.
func llamaRefDistance(t *testing.T, exact [][]float64, pr llamaResp) float64 {
	t.Helper()
	var d float64
	for _, e := range pr.Probs {
		if e.Pos < 0 || e.Pos >= len(exact) {
			t.Fatalf("llama.cpp answered position %d of a %d-token prompt", e.Pos, len(exact))
		}
		for _, tp := range e.Top {
			if id := int(tp[0]); id >= 0 && id < len(exact[e.Pos]) {
				d = max(d, math.Abs(tp[1]-exact[e.Pos][id]))
			}
		}
	}
	return d
}
