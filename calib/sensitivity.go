package calib

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
)

// Measured sensitivity (sensitivity.json).
//
// For every quantizable weight tensor, the pass measures what quantizing that tensor does to
// the model's output: the tensor is encoded in a 4.5-bit reference container (Q4_K for rows of
// a multiple of 256, Q4_0 for a multiple of 32) with its importance, its weights are moved
// part of the way to that reconstruction (sensitivityStep), and the mean KL divergence of the
// next-token distribution from the full-precision model's is measured over a sample of the
// calibration tokens. A budget (tq convert --target-bpw / --max-size with --calibration)
// turns each tensor's predicted weight error into predicted KL with that measurement, so it
// knows which tensors matter: in the Qwen3.5 hybrid the linear-attention projections cost
// 100× more KL per weight than the full-attention ones, which a weight-error proxy alone
// cannot see.
//
// The pass streams block by block like the statistics pass. A clean residual stream goes
// through every block; the embedding's probe has a stream from the input, and every block has
// one stream from its own block on, with all of that block's probed tensors changed at once.
// That block's KL is shared among its tensors in proportion to the squared change each of them
// alone makes to the block's output (one run of the block per tensor, from the clean input).
// Until 2026-12-04 every tensor had a stream of its own to the end, about 3.5·n_layer² block
// runs per token for seven tensors a block against n_layer²/2 + 7·n_layer now; the budgets
// measured as well or better with the shared streams (docs/calibration.md). Memory: (streams
// + 2) × sample tokens × n_embd floats besides the clean block, its tensors' encoded rows
// (heldProbe; applied in place for the block's stream, applyProbe) and one tensor's probe
// weights. The LM head scores each stream
// over the whole vocabulary when it is small, else over the reference's most probable tokens
// plus a sample of the rest (topKKL), so its work per token is vocabulary × n_embd for the
// reference plus streams × min(vocabulary, 512) × n_embd. Both are bounded: the sample
// shrinks to fit sensitivityWorkRatio of the statistics pass's block work (but not below
// MinSensitivityTokens), a head bound (sensitivitySample) and a quarter of the memory budget,
// and the pass is skipped (with a warning) when fewer than MinSensitivityTokens tokens would
// remain within the last two.

// sensitivityMode is the encoder of the probes: ggml's own algorithm with the importance
// (quant.ModeReference). The pass measures how much each tensor's output KL grows per unit of
// its weighted weight error (KL over RelError, which a budget scales its own predicted errors
// by), not the error of a particular encoder, so the fastest faithful encoder serves;
// ModeImproved's float64 search took about two thirds of a default calibration's time.
const sensitivityMode = quant.ModeReference

// SensitivityFile is the file name of the measured sensitivities in the output directory.
const SensitivityFile = "sensitivity.json"

// SensitivityFormat identifies the file's layout.
const SensitivityFormat = "tq-sensitivity/1"

// DefaultSensitivityTokens is the calibration tokens the sensitivity pass scores by default.
const DefaultSensitivityTokens = 2048

// MinSensitivityTokens is the smallest sample worth measuring: below it the pass is skipped.
const MinSensitivityTokens = 128

// sensitivityStep is how far each probe moves its weights towards their reconstruction in
// the reference container: half way, and the KL measured is divided by its square. For small
// changes KL is quadratic in the change (the Fisher information), and the changes of
// different tensors add, which is what a budget's sum over tensors assumes; at the whole
// container error the routing of a MoE block flips, so that on the trained qwen3moe the first
// block with all its tensors in Q4_K cost 4× the sum of its tensors each alone, while half way
// the two agree (docs/calibration.md, "Measured sensitivity").
const sensitivityStep = 0.5

// partWay moves y (a reconstruction of x) to x + sensitivityStep·(y − x).
func partWay(y, x []float32) { kernels.Lerp(y, x, sensitivityStep) }

// sensitivityWorkRatio bounds the default sample: the pass's block work at most this many
// times the statistics pass's, but at least MinSensitivityTokens tokens (an explicit
// SensitivityTokens is not bounded by it). A quarter: on the trained models 148-178 tokens
// gave budgets as good as 1,191-1,424 (docs/calibration.md).
const sensitivityWorkRatio = 0.25

// Vocabularies up to sensitivityFullVocab tokens are scored whole; larger ones over the
// reference's sensitivityTopK most probable tokens of each position (topKKL).
var (
	sensitivityFullVocab = 8192
	sensitivityTopK      = 256
	sensitivityTail      = 256
)

// DefaultSensitivityMACs is the LM-head work (multiply-adds, about a minute on two cores) the
// pass may always spend; by default it may spend more, up to sensitivityHeadShare of the work
// its blocks do for the same sample (sensitivitySample).
const DefaultSensitivityMACs = 1e11

// sensitivityHeadShare bounds the default LM-head work relative to the pass's block work. A
// fixed bound alone skipped the pass on every model of 8 B parameters or more while each
// tensor had its own stream: with Qwen3.6-35B-A3B's vocabulary of 248,320 and about 370
// streams, 10¹¹ multiply-adds were 111 tokens, below MinSensitivityTokens, while its blocks'
// bound allowed about 260 (25,000 calibration tokens) at several hundred times the head's
// work. With a stream per block the head is cheaper (42 streams), and this keeps it bounded
// by the same rule.
const sensitivityHeadShare = 0.25

// sensitivityHalfHead keeps a 16-bit LM head 16-bit with top-k KL (loadHead; tests compare
// it with the float32 head).
var sensitivityHalfHead = true

// maxSensitivityTensors bounds the entries a sensitivity file may hold.
const maxSensitivityTensors = 1 << 20

// Sensitivity is the contents of sensitivity.json.
type Sensitivity struct {
	Format string `json:"format"`
	// Tokens and Sequences are the scored calibration positions and the sequences they came from.
	Tokens    int `json:"tokens"`
	Sequences int `json:"sequences"`
	// TopK is 0 when KL was computed over the whole vocabulary, else the number of the
	// reference's most probable tokens it was computed over (see topKKL).
	TopK int `json:"top_k,omitempty"`
	// Metric says what KL is.
	Metric string `json:"metric"`
	// Arithmetic is the pass's products: float32, or bf16 with rounded activations (see
	// Calibrate's sensitivity pass; empty in files written before it was recorded).
	Arithmetic string              `json:"arithmetic,omitempty"`
	Seconds    float64             `json:"seconds"`
	Tensors    []TensorSensitivity `json:"tensors"`

	byName map[string]int
}

// TensorSensitivity is one tensor's measurement.
type TensorSensitivity struct {
	Name string `json:"name"`
	// Type is the reference container the tensor was encoded in.
	Type string `json:"type"`
	// KL is the mean KL(full ‖ this tensor quantized) per scored token, in nats.
	KL float64 `json:"kl"`
	// RelError is the tensor's importance-weighted relative squared error in that container,
	// Σ w·(x−x̂)² / Σ w·x² over all its weights.
	RelError float64 `json:"rel_error"`
	// BlockKL and Share, for a block's tensor: KL is Share of BlockKL, the mean KL with every
	// probed tensor of the block in its container at once; Share is the tensor's part of the
	// squared change the block's tensors, each alone, made to the block's output.
	BlockKL float64 `json:"block_kl,omitempty"`
	Share   float64 `json:"share,omitempty"`
}

// LoadSensitivity reads and validates a sensitivity.json.
func LoadSensitivity(path string) (*Sensitivity, error) {
	b, err := boundedread.ReadFile(path, "sensitivity file", 64<<20)
	if err != nil {
		return nil, err
	}
	return ParseSensitivity(b, path)
}

// ParseSensitivity validates the bytes of a sensitivity file (name is used in errors).
func ParseSensitivity(b []byte, name string) (*Sensitivity, error) {
	var s Sensitivity
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if s.Format != SensitivityFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", name, s.Format, SensitivityFormat)
	}
	if len(s.Tensors) > maxSensitivityTensors {
		return nil, fmt.Errorf("%s: %d tensors (at most %d)", name, len(s.Tensors), maxSensitivityTensors)
	}
	seen := make(map[string]bool, len(s.Tensors))
	for i, t := range s.Tensors {
		if t.Name == "" || seen[t.Name] {
			return nil, fmt.Errorf("%s: tensors[%d]: empty or repeated name %q", name, i, t.Name)
		}
		seen[t.Name] = true
		typ, err := gguf.ParseType(t.Type)
		if err != nil {
			return nil, fmt.Errorf("%s: tensors[%d] (%s): %w", name, i, t.Name, err)
		}
		if tr, _ := typ.Traits(); !tr.Quantized {
			return nil, fmt.Errorf("%s: tensors[%d] (%s): type %s is not a quantized type", name, i, t.Name, t.Type)
		}
		for _, v := range []float64{t.KL, t.RelError, t.BlockKL, t.Share} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return nil, fmt.Errorf("%s: tensors[%d] (%s): kl, rel_error, block_kl and share must be finite and non-negative", name, i, t.Name)
			}
		}
		if t.Share > 1 {
			return nil, fmt.Errorf("%s: tensors[%d] (%s): share %g above 1", name, i, t.Name, t.Share)
		}
	}
	return &s, nil
}

// Sensitivity implements internal/convert's SensitivitySource: tensor name's reference type
// and measured KL.
func (s *Sensitivity) Sensitivity(name string) (gguf.GGMLType, float64, float64, bool) {
	if s.byName == nil {
		s.byName = make(map[string]int, len(s.Tensors))
		for i, t := range s.Tensors {
			s.byName[t.Name] = i
		}
	}
	i, ok := s.byName[name]
	if !ok {
		return 0, 0, 0, false
	}
	t := s.Tensors[i]
	typ, err := gguf.ParseType(t.Type)
	if err != nil {
		return 0, 0, 0, false
	}
	return typ, t.KL, t.RelError, true
}

// sensProbe is one perturbed residual stream per sampled sequence.
type sensProbe struct {
	name     string
	typ      gguf.GGMLType
	relErr   float64
	x        [][]float32
	klSum    float64
	embdRows map[int32][]float32 // token_embd probe: the round-tripped rows
	// the round-tripped head (output.weight's probe; token_embd's when tied): float32 when the
	// vocabulary is scored whole, else headRows, its rows kept in the container and
	// dequantized where scored (top-k KL)
	head     *lmHead
	headRows func(k int) []float32
	// a block's stream: every probed tensor of the block round-tripped at once; its KL is
	// shared among them in proportion to local (blockMember)
	members []blockMember
}

// heldProbe is a block tensor's encoded rows (in typ), kept for the block's stream.
type heldProbe struct {
	name string
	typ  gguf.GGMLType
	q    []byte
}

// blockMember is one probed tensor of a block's stream: its container, its weighted relative
// error and local, the squared change it alone makes to the block's output (summed over the
// sample's positions).
type blockMember struct {
	name   string
	typ    gguf.GGMLType
	relErr float64
	local  float64
}

// sensitivityType is the reference container for a row of cols weights ("" when none).
func sensitivityType(cols int64) (gguf.GGMLType, bool) {
	switch {
	case cols%256 == 0:
		return gguf.TypeQ4_K, true
	case cols%32 == 0:
		return gguf.TypeQ4_0, true
	}
	return 0, false
}

// probed reports whether tensor d gets a probe: a weight the policy may quantize (and does
// not pin to F16) with a reference container.
func (r *run) probed(d modelsrc.TensorDesc) bool {
	t := policy.Tensor{Name: d.Name, Shape: d.Shape}
	if !policy.AllowsQuantization(t, false) || policy.KeepsHighPrecision(t) {
		return false
	}
	_, ok := sensitivityType(d.Shape[0])
	return ok
}

// sampleShape is what the pass's work per token depends on.
type sampleShape struct {
	layers int
	// runs holds, per stream, the blocks it runs: n_layer − its layer for a block's stream,
	// n_layer for the embedding's probe, 0 for the LM head's.
	runs []int
	// local is the single-block passes per token: one per probed tensor of a block (its own
	// output error).
	local       int
	statsTokens int64   // the statistics pass's tokens
	blockMACs   float64 // multiply-adds per token of all blocks' weights (routed experts at their active share)
	vocab, embd int
}

// sensitivitySample returns the pass's sample size before the memory bound, and the top-k of
// its KL (0: the whole vocabulary). tokens is Options.SensitivityTokens (0: the default,
// DefaultSensitivityTokens shrunk so that the pass's block work — the clean stream through
// every block, each stream through its runs and the single-tensor runs — stays within
// sensitivityWorkRatio × the statistics pass's, but not below MinSensitivityTokens); macs is Options.SensitivityMACs (0: the larger of
// DefaultSensitivityMACs and sensitivityHeadShare × the blocks' work for the sample). The
// sample then shrinks to fit the LM head's work in that bound.
func sensitivitySample(s sampleShape, tokens int, macs float64) (int, int) {
	want := tokens
	if want == 0 {
		want = DefaultSensitivityTokens
	}
	perTokBlocks := s.layers + s.local
	for _, r := range s.runs {
		perTokBlocks += r
	}
	if tokens == 0 {
		want = min(want, max(MinSensitivityTokens, int(sensitivityWorkRatio*float64(s.statsTokens)*float64(s.layers)/float64(max(perTokBlocks, 1)))))
	}
	// the head's work per token: the reference over the vocabulary, each stream over the
	// vocabulary or (large vocabularies) over the reference's top sensitivityTopK tokens and
	// a tail sample
	P := len(s.runs)
	topK := 0
	perTok := float64(P+1) * float64(s.vocab) * float64(s.embd)
	if s.vocab > sensitivityFullVocab {
		topK = sensitivityTopK
		perTok = float64(s.vocab)*float64(s.embd) + float64(P)*float64(topK+sensitivityTail)*float64(s.embd)
	}
	if macs <= 0 {
		blocks := float64(want) * float64(perTokBlocks) * s.blockMACs / float64(max(s.layers, 1))
		macs = max(DefaultSensitivityMACs, sensitivityHeadShare*blocks)
	}
	return min(want, int(macs/perTok)), topK
}

// blockMACs is the multiply-adds per token of the model's block weights: every matrix of a
// layer, routed experts at n_expert_used/n_expert.
func (r *run) blockMACs() float64 {
	var n float64
	for name, d := range r.descs {
		if Layer(name) < 0 || len(d.Shape) < 2 {
			continue
		}
		e := float64(elements(d.Shape))
		if len(d.Shape) == 3 && r.cfg.NExpert > 0 && d.Shape[2] == int64(r.cfg.NExpert) {
			e *= float64(r.cfg.NExpertUse) / float64(r.cfg.NExpert)
		}
		n += e
	}
	return n
}

// sensitivity runs the measured-sensitivity pass and writes sensitivity.json; all holds the
// merged statistics (importance). It returns the file's path, or "" when skipped.
func (r *run) sensitivity(all *Stats) (string, error) {
	o := r.opts
	if o.SensitivityTokens < 0 {
		return "", nil
	}
	t0 := time.Now()
	c := r.cfg
	E := c.NEmbd
	headName := "output.weight"
	hd, hasHead := r.descs[headName]
	tied := !hasHead
	if tied {
		headName = "token_embd.weight"
		hd = r.descs[headName]
	}
	if len(hd.Shape) != 2 || hd.Shape[0] != int64(E) {
		return "", fmt.Errorf("calib: sensitivity: LM head %s has shape %v", headName, hd.Shape)
	}
	V := int(hd.Shape[1])
	var names []string
	for name, d := range r.descs {
		if r.probed(d) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	P := len(names)
	if P == 0 {
		return "", nil
	}
	// the sample: whole sequences spread over the calibration set, up to the token bound
	var statsTokens int64
	for _, s := range o.Sequences {
		statsTokens += int64(len(s.Tokens))
	}
	shape := sampleShape{layers: c.NLayer, statsTokens: statsTokens, blockMACs: r.blockMACs(), vocab: V, embd: E}
	newAt := make([]int, c.NLayer) // the probes of each block
	for _, name := range names {
		if l := Layer(name); l >= 0 && l < c.NLayer {
			if newAt[l] == 0 {
				shape.runs = append(shape.runs, c.NLayer-l) // the block's stream
			}
			newAt[l]++
			shape.local++
		} else if name == "token_embd.weight" {
			shape.runs = append(shape.runs, c.NLayer)
		} else {
			shape.runs = append(shape.runs, 0)
		}
	}
	streams := len(shape.runs)
	want, topK := sensitivitySample(shape, o.SensitivityTokens, o.SensitivityMACs)
	// Every stream must multiply the probed tensor as the clean stream multiplies it, or the
	// difference between two arithmetics would count as the probe's damage. With rounded bf16
	// products (the statistics pass's forward on AMX or AVX512-BF16) a bf16 matrix
	// multiplies activations rounded to bf16; a probe is kept in its tensor's own type (bf16,
	// f16 or float32; encodeProbe), so a probe of a bf16 tensor takes the same path. That runs
	// the pass's GEMMs at the rounded kernel's rate (about 1.6× faster on a dense 1 B model).
	// Models with routed experts keep float32 products: there the streams' different
	// roundings flip near-tied routing decisions, which moved single tensors' KL by up to 50×
	// on the trained MoE models (docs/calibration.md, "Measured sensitivity"). Otherwise the
	// 16-bit matrices and their probes are widened exactly.
	rounded := r.runner.Options().BF16Rounded() && c.NExpert == 0
	if o.MemoryBudget > 0 {
		// the LM head in f32 (and its round trip for output.weight's probe) and the streams
		// share a quarter of the budget
		headBytes := int64(V) * int64(E) * 4
		if topK > 0 && halfType(hd) != 0 {
			headBytes /= 2 // kept 16-bit (loadHead)
		}
		if hasHead && r.probed(hd) || tied {
			// its round trip: float32, or in its container with top-k KL
			rt := int64(V) * int64(E) * 4
			if topK > 0 {
				typ, _ := sensitivityType(int64(E))
				if rs, err := quant.RowSize(typ, E); err == nil {
					rt = int64(V) * int64(rs)
				}
			}
			headBytes += rt
		}
		// and, beside the clean block: its tensors' encoded rows (heldProbe), the probe
		// weights of one tensor in its own type (its single-tensor run) and two chunk buffers
		var largest int64
		held := make([]int64, c.NLayer)
		for _, name := range names {
			d := r.descs[name]
			if l := Layer(name); l >= 0 && l < c.NLayer {
				typ, _ := sensitivityType(d.Shape[0])
				if rs, err := quant.RowSize(typ, int(d.Shape[0])); err == nil {
					held[l] += elements(d.Shape) / d.Shape[0] * int64(rs)
				}
				largest = max(largest, storedBytes(d)+2*4*max(probeChunkFloats, d.Shape[0]*int64(probeRowChunk)))
			}
		}
		var most int64
		for _, b := range held {
			most = max(most, b)
		}
		left := o.MemoryBudget/4 - headBytes - largest - most
		if left <= 0 {
			r.warn("sensitivity pass skipped: the LM head (%s) and a block's probes (%s) do not fit a quarter of the memory budget; budgets use the weight-error proxy",
				fmtBytes(headBytes), fmtBytes(largest+most))
			return "", nil
		}
		// the streams, the clean one and one buffer for the single-tensor passes
		want = min(want, int(left/(int64(streams+2)*int64(E)*4)))
	}
	if want < MinSensitivityTokens {
		r.warn("sensitivity pass skipped: %d tensors × vocabulary %d × n_embd %d leave fewer than %d tokens within the work and memory bounds; budgets use the weight-error proxy",
			P, V, E, MinSensitivityTokens)
		return "", nil
	}
	var seqs []Sequence
	tokens := 0
	n := len(o.Sequences)
	for k := 0; k < n && tokens < want; k++ {
		// visit sequences in a spread order: 0, n/2, n/4, 3n/4, ...
		s := o.Sequences[spreadIndex(k, n)]
		v := min(s.Valid, want-tokens)
		if v < 2 {
			continue
		}
		seqs = append(seqs, Sequence{Tokens: s.Tokens[:v], Valid: v})
		tokens += v
	}
	if tokens < MinSensitivityTokens {
		r.warn("sensitivity pass skipped: only %d calibration tokens", tokens)
		return "", nil
	}
	S := len(seqs)
	threads := r.runner.Threads()

	// embeddings: the clean stream and the token_embd probe
	clean := make([][]float32, S)
	for i, s := range seqs {
		clean[i] = make([]float32, len(s.Tokens)*E)
		for j, tok := range s.Tokens {
			if err := r.src.ReadRows("token_embd.weight", int64(tok), 1, clean[i][j*E:(j+1)*E]); err != nil {
				return "", fmt.Errorf("calib: %w", err)
			}
		}
	}
	var probes []*sensProbe
	var tiedEmbd *sensProbe
	if d, ok := r.descs["token_embd.weight"]; ok && r.probed(d) {
		p, err := r.embedProbe(d, seqs, all, threads)
		if err != nil {
			return "", err
		}
		probes = append(probes, p)
		if tied {
			tiedEmbd = p
		}
	}
	var wbuf []float32 // one matrix widened from a 16-bit block tensor, reused
	var fbuf []float32 // a chunk of probe weights, reused
	// every probe loads the block again (new matrices): weights packed for the GEMM would be
	// packed anew each time and left as garbage, so the pass multiplies the 16-bit rows
	if r.runner.Options().PackWeights {
		r.runner.SetPackWeights(false)
		defer r.runner.SetPackWeights(true)
	}
	// the arithmetic (rounded, above)
	if !rounded && r.runner.Options().BF16Products {
		r.runner.SetBF16Products(false)
		defer r.runner.SetBF16Products(true)
	}
	var one [][]float32 // the streams of one tensor's single-block pass, reused
	roundedProbes := 0  // probes multiplied with rounded products
	for il := 0; il < c.NLayer; il++ {
		if err := r.ctx.Err(); err != nil {
			return "", err
		}
		// progress: the streams through this block (the earlier probes, the clean one and this
		// block's new probes), each over the sample's tokens
		tb := time.Now()
		var bt Progress
		bt.Stage, bt.Layer = "sensitivity", il
		bt.TotalTokens = int64(len(probes)+1+newAt[il]) * int64(tokens)
		if newAt[il] > 0 {
			bt.TotalTokens += int64(tokens) // the block's stream
		}
		r.progress(bt)
		step := func() {
			bt.Tokens += int64(tokens)
			bt.Elapsed = time.Since(tb)
			r.progress(bt)
		}
		lw, err := loadLayer(r.src, il, r.threadCount())
		if err != nil {
			return "", err
		}
		cleanIn := make([][]float32, S)
		for i := range clean {
			cleanIn[i] = append([]float32(nil), clean[i]...)
		}
		// the probes started earlier and the clean stream go through the clean block
		if err := r.runner.LoadBlock(il, &metaSource{md: r.md, tensors: lw.tensors}); err != nil {
			return "", fmt.Errorf("calib: %w", err)
		}
		for _, p := range probes {
			if err := r.forwardAll(p.x, seqs); err != nil {
				return "", err
			}
			step()
		}
		if err := r.forwardAll(clean, seqs); err != nil {
			return "", err
		}
		step()
		// this block's probes: each tensor alone round-tripped, for the change it makes to the
		// block's output, then all of them at once: the block's stream
		var blk *sensProbe
		var held []heldProbe
		for _, d := range lw.descs {
			if !r.probed(d) {
				continue
			}
			typ, _ := sensitivityType(d.Shape[0])
			pt, q, rel, fb, err := r.blockProbe(d, func(off, n int) []float32 {
				wbuf = lw.floats(d.Name, off, n, wbuf)
				return wbuf
			}, typ, all, threads, lw.tensors[d.Name].Type, fbuf)
			if err != nil {
				return "", err
			}
			fbuf = fb
			if rounded && pt.Type == gguf.TypeBF16 {
				roundedProbes++
			}
			if err := r.runner.LoadBlock(il, &metaSource{md: r.md, tensors: withTensors(lw.tensors, map[string]*infer.Tensor{d.Name: pt})}); err != nil {
				return "", fmt.Errorf("calib: %w", err)
			}
			if one == nil {
				one = make([][]float32, S)
			}
			for i := range cleanIn {
				one[i] = append(one[i][:0], cleanIn[i]...)
			}
			if err := r.forwardAll(one, seqs); err != nil {
				return "", err
			}
			step()
			r.runner.Release() // the runner held pt: only one tensor's probe weights at a time
			pt = nil
			if blk == nil {
				blk = &sensProbe{name: fmt.Sprintf("blk.%d", il)}
			}
			blk.members = append(blk.members, blockMember{name: d.Name, typ: typ, relErr: rel, local: sqDist(one, clean)})
			held = append(held, heldProbe{name: d.Name, typ: typ, q: q})
		}
		if blk != nil {
			// every stream has been through the clean block: its tensors become their probes
			// in place, and the block's stream starts
			for _, h := range held {
				if wbuf, fbuf, err = applyProbe(lw, h.name, h.typ, h.q, threads, wbuf, fbuf); err != nil {
					return "", err
				}
			}
			if err := r.runner.LoadBlock(il, &metaSource{md: r.md, tensors: lw.tensors}); err != nil {
				return "", fmt.Errorf("calib: %w", err)
			}
			blk.x = make([][]float32, S)
			for i := range cleanIn {
				blk.x[i] = append([]float32(nil), cleanIn[i]...)
			}
			if err := r.forwardAll(blk.x, seqs); err != nil {
				return "", err
			}
			step()
			probes = append(probes, blk)
		}
		held = nil
		r.runner.Release()
		lw = nil
		runtime.GC()
	}
	// the LM head: output.weight's probe uses the clean stream with the round-tripped head
	head, err := loadHead(r.src, hd, topK > 0 && sensitivityHalfHead)
	if err != nil {
		return "", err
	}
	// (with top-k KL the round-tripped head stays in its container: Qwen3.6-35B-A3B's would
	// take 2 GB as float32, 0.29 GB as Q4_K)
	if hasHead && r.probed(hd) || tiedEmbd != nil {
		p := tiedEmbd
		var imp *Stats // the tied head is the embedding's round trip, without importance
		if p == nil {
			typ, _ := sensitivityType(hd.Shape[0])
			p = &sensProbe{name: headName, typ: typ}
			probes = append(probes, p)
			imp = all
		}
		var rel float64
		if topK > 0 {
			rs, err := quant.RowSize(p.typ, E)
			if err != nil {
				return "", fmt.Errorf("calib: %s: %w", headName, err)
			}
			var q []byte
			if q, rel, err = r.roundTripRows(hd, head.floats(), p.typ, imp, threads); err != nil {
				return "", err
			}
			row, orig, typ := make([]float32, E), make([]float32, E), p.typ
			p.headRows = func(k int) []float32 {
				if err := quant.Dequantize(typ, row, q[k*rs:(k+1)*rs]); err != nil {
					panic(err) // sizes are ours
				}
				partWay(row, head.row(k, orig))
				return row
			}
		} else {
			var deq []float32
			if deq, rel, err = r.roundTrip(hd, head.floats(), p.typ, imp, threads, nil); err != nil {
				return "", err
			}
			p.head = &lmHead{e: E, f32: deq}
		}
		if p != tiedEmbd {
			p.relErr = rel
		}
	}
	norm := make([]float32, E)
	if d, ok := r.descs["output_norm.weight"]; ok {
		if err := readTensor(r.src, d, norm); err != nil {
			return "", fmt.Errorf("calib: %w", err)
		}
	}
	eps := float32(c.RMSEps)
	ref := make([]float64, V)
	lp := make([]float64, V)
	logits := make([]float32, V)
	hn := make([]float32, E)
	pn := make([]float32, E)
	idx := make([]int, 0, topK)
	lk := make([]float64, topK)
	var refLogits []float32
	var mask []bool
	var tail []int
	u := make([]float64, sensitivityTail)
	rng := rand.New(rand.NewPCG(1, 2))
	if topK > 0 {
		refLogits, mask = make([]float32, V), make([]bool, V)
	}
	// with a 16-bit head, the rows a position scores are widened once for all its probes
	var cache []float32
	var slot []int32
	if head.half != nil {
		cache = make([]float32, (topK+sensitivityTail)*E)
		slot = make([]int32, V)
		for k := range slot {
			slot[k] = -1
		}
	}
	cleanRow := func(k int) []float32 {
		if head.f32 != nil {
			return head.f32[k*E : (k+1)*E]
		}
		j := int(slot[k])
		return cache[j*E : (j+1)*E]
	}
	for i, s := range seqs {
		if err := r.ctx.Err(); err != nil {
			return "", err
		}
		r.progress(Progress{Stage: "sensitivity", Layer: c.NLayer, Seq: i + 1, NSeq: S, Elapsed: time.Since(t0)})
		for t := 0; t < s.Valid; t++ {
			infer.RMSNorm(hn, clean[i][t*E:(t+1)*E], norm, eps)
			headLogits(logits, head, hn, threads)
			logSoftmax(ref, logits)
			var pin, lseRef float64
			if topK > 0 {
				copy(refLogits, logits)
				lseRef = float64(logits[0]) - ref[0]
				idx = topIndices(idx, ref, topK)
				for _, k := range idx {
					pin += math.Exp(ref[k])
					mask[k] = true
				}
				for j := range u {
					u[j] = rng.Float64()
				}
				tail = tailSample(tail, ref, mask, u)
				for _, k := range idx {
					mask[k] = false
				}
				if head.half != nil {
					n := 0
					for _, list := range [][]int{idx, tail} {
						for _, k := range list {
							if slot[k] < 0 {
								slot[k] = int32(n)
								head.row(k, cache[n*E:(n+1)*E])
								n++
							}
						}
					}
				}
			}
			for _, p := range probes {
				x := clean[i][t*E : (t+1)*E]
				if p.x != nil {
					x = p.x[i][t*E : (t+1)*E]
				}
				w := head
				if p.head != nil {
					w = p.head
				}
				infer.RMSNorm(pn, x, norm, eps)
				var kl float64
				if topK > 0 {
					row := cleanRow
					if p.headRows != nil {
						row = p.headRows
					}
					kl = topKKL(ref, refLogits, lseRef, idx, tail, pin, row, pn, lk)
				} else {
					headLogits(logits, w, pn, threads)
					logSoftmax(lp, logits)
					for v := range ref {
						if ref[v] > -60 {
							kl += math.Exp(ref[v]) * (ref[v] - lp[v])
						}
					}
				}
				p.klSum += max(kl, 0)
			}
			if head.half != nil {
				for _, list := range [][]int{idx, tail} {
					for _, k := range list {
						slot[k] = -1
					}
				}
			}
		}
	}
	out := &Sensitivity{Format: SensitivityFormat, Tokens: tokens, Sequences: S, TopK: topK,
		Metric:     "mean KL(full precision ‖ weights moved half way to the reference container) / 0.25 per scored calibration token, nats; a block's tensors changed together, their KL shared by each one's squared change of the block's output",
		Arithmetic: "float32 products", Seconds: time.Since(t0).Seconds()}
	if roundedProbes > 0 {
		out.Arithmetic = "bf16 matrices (probes rounded to bf16) times activations rounded to bf16, float32 sums"
	}
	for _, p := range probes {
		kl := p.klSum / float64(tokens) / (sensitivityStep * sensitivityStep)
		if p.members == nil {
			out.Tensors = append(out.Tensors, TensorSensitivity{Name: p.name, Type: strings.ToLower(p.typ.String()), KL: kl, RelError: p.relErr})
			continue
		}
		out.Tensors = append(out.Tensors, shareBlockKL(kl, p.members)...)
	}
	sort.Slice(out.Tensors, func(a, b int) bool { return out.Tensors[a].Name < out.Tensors[b].Name })
	path := filepath.Join(o.OutDir, SensitivityFile)
	if err := saveJSON(path, out); err != nil {
		return "", fmt.Errorf("calib: %w", err)
	}
	return path, nil
}

// A block tensor's probe weights are kept in the tensor's own type in the block (BF16, F16 or
// float32), so that every stream multiplies them as the clean stream multiplies the tensor:
// BF16 matrices with activations rounded to bf16 where the forward does that, F16 and BF16 ones
// otherwise widened exactly. Rounding the probe to 16 bits moves it by at most 2⁻⁹ of each
// value (bf16), against the probe's change of several percent.

// probeBytes is the bytes per value of typ (BF16, F16 or F32).
func probeBytes(typ gguf.GGMLType) int64 {
	if typ == gguf.TypeF32 {
		return 4
	}
	return 2
}

// encodeProbe writes v into dst in typ (BF16, F16 or F32): rounded to bf16 (ties to even),
// narrowed to f16, or as float32.
func encodeProbe(typ gguf.GGMLType, dst []byte, v []float32) {
	switch typ {
	case gguf.TypeBF16:
		kernels.RoundBF16Slice(dst, v)
	case gguf.TypeF16:
		kernels.NarrowF16(dst, v)
	default:
		copy(dst, f32Bytes(v))
	}
}

// withTensors is base with the tensors of over in place of its own.
func withTensors(base, over map[string]*infer.Tensor) map[string]*infer.Tensor {
	ts := make(map[string]*infer.Tensor, len(base))
	for k, v := range base {
		ts[k] = v
	}
	for k, v := range over {
		ts[k] = v
	}
	return ts
}

// sqDist is Σ (a−b)² over every value of the streams a and b.
func sqDist(a, b [][]float32) float64 {
	var s float64
	for i := range a {
		for k, v := range a[i] {
			d := float64(v) - float64(b[i][k])
			s += d * d
		}
	}
	return s
}

// shareBlockKL shares a block stream's KL among its tensors in proportion to the squared
// change each alone made to the block's output (equally when none made any).
func shareBlockKL(kl float64, ms []blockMember) []TensorSensitivity {
	var total float64
	for _, m := range ms {
		total += m.local
	}
	out := make([]TensorSensitivity, len(ms))
	for i, m := range ms {
		share := 1 / float64(len(ms))
		if total > 0 {
			share = m.local / total
		}
		out[i] = TensorSensitivity{Name: m.name, Type: strings.ToLower(m.typ.String()), KL: kl * share, RelError: m.relErr,
			BlockKL: kl, Share: share}
	}
	return out
}

// removeStale removes an earlier run's output file (a regular file only) so that nothing reads
// it as this run's.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("calib: removing the earlier run's %s: %w", path, err)
	}
	return nil
}

// embedProbe starts token_embd's probe: the sample's tokens looked up in the round-tripped
// embedding (rows are encoded independently, so only the rows used are encoded).
func (r *run) embedProbe(d modelsrc.TensorDesc, seqs []Sequence, all *Stats, threads int) (*sensProbe, error) {
	E := int(d.Shape[0])
	typ, _ := sensitivityType(d.Shape[0])
	p := &sensProbe{name: d.Name, typ: typ, x: make([][]float32, len(seqs)), embdRows: map[int32][]float32{}}
	var num, den float64
	row := make([]float32, E)
	deq := make([]float32, E)
	rs, err := quant.RowSize(typ, E)
	if err != nil {
		return nil, fmt.Errorf("calib: tensor %s: %w", d.Name, err)
	}
	buf := make([]byte, rs)
	for i, s := range seqs {
		p.x[i] = make([]float32, len(s.Tokens)*E)
		for j, tok := range s.Tokens {
			q, ok := p.embdRows[tok]
			if !ok {
				if err := r.src.ReadRows(d.Name, int64(tok), 1, row); err != nil {
					return nil, fmt.Errorf("calib: %w", err)
				}
				nu, de, err := roundTripMatrix(d.Name, typ, row, deq, nil, 1, E, 1, buf)
				if err != nil {
					return nil, err
				}
				num, den = num+nu, den+de
				q = append([]float32(nil), deq...)
				p.embdRows[tok] = q
			}
			copy(p.x[i][j*E:], q)
		}
	}
	p.relErr = relOf(num, den)
	return p, nil
}

// roundTrip encodes tensor d (floats(off, n) returns its elements [off, off+n) as float32, all
// its matrices) in typ with each matrix's importance and returns the probe's weights (in deq
// when it is long enough: the original moved sensitivityStep of the way to the
// reconstruction, partWay) and the reconstruction's importance-weighted relative squared
// error.
func (r *run) roundTrip(d modelsrc.TensorDesc, floats func(off, n int) []float32, typ gguf.GGMLType, all *Stats, threads int, deq []float32) ([]float32, float64, error) {
	cols := int(d.Shape[0])
	rows := int(d.Shape[1])
	nm := 1
	if len(d.Shape) > 2 {
		nm = int(d.Shape[2])
	}
	if cap(deq) < nm*rows*cols {
		deq = make([]float32, nm*rows*cols)
	}
	deq = deq[:nm*rows*cols]
	rs, err := quant.RowSize(typ, cols)
	if err != nil {
		return nil, 0, fmt.Errorf("calib: tensor %s: %w", d.Name, err)
	}
	buf := make([]byte, rows*rs)
	var num, den float64
	for e := 0; e < nm; e++ {
		imp := matrixImportance(all, d.Name, e, cols)
		n, dd, err := roundTripMatrix(d.Name, typ, floats(e*rows*cols, rows*cols), deq[e*rows*cols:(e+1)*rows*cols], imp, rows, cols, threads, buf)
		if err != nil {
			return nil, 0, err
		}
		num, den = num+n, den+dd
	}
	return deq, relOf(num, den), nil
}

// probeChunkFloats bounds the float32 values blockProbe and applyProbe hold per buffer.
const probeChunkFloats = 1 << 20

// probeChunkRows is the rows of cols values they take at a time: a multiple of probeRowChunk,
// within probeChunkFloats when a row allows.
func probeChunkRows(cols int) int {
	return max(probeRowChunk, probeChunkFloats/cols/probeRowChunk*probeRowChunk)
}

// blockProbe is roundTrip for a block tensor, in chunks of rows (floats as for roundTrip;
// fbuf, grown when short and returned, takes a chunk's probe weights). It returns the encoded
// rows, kept for the block's stream (applyProbe), their weighted relative error, and the
// tensor's probe weights in its type t in the block, for its single-tensor run.
func (r *run) blockProbe(d modelsrc.TensorDesc, floats func(off, n int) []float32, typ gguf.GGMLType, all *Stats, threads int,
	t gguf.GGMLType, fbuf []float32) (*infer.Tensor, []byte, float64, []float32, error) {
	cols, rows, nm := int(d.Shape[0]), int(d.Shape[1]), 1
	if len(d.Shape) > 2 {
		nm = int(d.Shape[2])
	}
	rs, err := quant.RowSize(typ, cols)
	if err != nil {
		return nil, nil, 0, fbuf, fmt.Errorf("calib: tensor %s: %w", d.Name, err)
	}
	cr := probeChunkRows(cols)
	if cap(fbuf) < cr*cols {
		fbuf = make([]float32, cr*cols)
	}
	q := make([]byte, nm*rows*rs)
	pt := &infer.Tensor{Name: d.Name, Type: t, Dims: append([]int64(nil), d.Shape...)}
	bpv := int(probeBytes(t))
	pt.Data = make([]byte, nm*rows*cols*bpv)
	var num, den float64
	for e := 0; e < nm; e++ {
		imp := matrixImportance(all, d.Name, e, cols)
		for r0 := 0; r0 < rows; r0 += cr {
			n := min(cr, rows-r0)
			row := e*rows + r0
			y := fbuf[:n*cols]
			nu, de, err := roundTripMatrix(d.Name, typ, floats(row*cols, n*cols), y, imp, n, cols, threads, q[row*rs:(row+n)*rs])
			if err != nil {
				return nil, nil, 0, fbuf, err
			}
			num, den = num+nu, den+de
			encodeProbe(t, pt.Data[row*cols*bpv:(row+n)*cols*bpv], y)
		}
	}
	return pt, q, relOf(num, den), fbuf, nil
}

// applyProbe turns block tensor name in lw, in place, into its probe weights: the encoded
// rows q (typ) decoded and moved part way from the tensor's values, in chunks of rows through
// the buffers xbuf and ybuf (grown when short and returned). The weights are blockProbe's
// bit for bit. The block's copy of the tensor is gone afterwards.
func applyProbe(lw *layerWeights, name string, typ gguf.GGMLType, q []byte, threads int, xbuf, ybuf []float32) ([]float32, []float32, error) {
	t := lw.tensors[name]
	cols := int(t.Dims[0])
	rows := int(elements(t.Dims)) / cols
	rs := len(q) / rows
	cr := probeChunkRows(cols)
	if cap(ybuf) < cr*cols {
		ybuf = make([]float32, cr*cols)
	}
	bpv := int(probeBytes(t.Type))
	for r0 := 0; r0 < rows; r0 += cr {
		n := min(cr, rows-r0)
		x := lw.floats(name, r0*cols, n*cols, xbuf) // float32 tensors: a view, written below once y is done
		if lw.data[name] == nil {
			xbuf = x
		}
		y := ybuf[:n*cols]
		if _, _, err := probeRows(typ, q[r0*rs:(r0+n)*rs], rs, x, y, nil, n, cols, threads, false); err != nil {
			return xbuf, ybuf, fmt.Errorf("calib: tensor %s: %w", name, err)
		}
		encodeProbe(t.Type, t.Data[r0*cols*bpv:(r0+n)*cols*bpv], y)
	}
	return xbuf, ybuf, nil
}

// roundTripMatrix encodes the matrix x (rows × cols) in typ with importance imp (into buf,
// rows·RowSize bytes), writes the probe's weights into y (partWay) and returns the encoding's
// importance-weighted squared error and signal (probeRows).
func roundTripMatrix(name string, typ gguf.GGMLType, x, y, imp []float32, rows, cols, threads int, buf []byte) (float64, float64, error) {
	opts := &quant.Options{Importance: imp, Mode: sensitivityMode, Threads: threads, TensorName: name}
	if err := quant.Quantize(typ, buf, x, rows, cols, opts); err != nil {
		return 0, 0, err
	}
	rs := len(buf) / rows
	num, den, err := probeRows(typ, buf, rs, x, y, imp, rows, cols, threads, true)
	if err != nil {
		return 0, 0, fmt.Errorf("calib: tensor %s: %w", name, err)
	}
	return num, den, nil
}

// probeRowChunk is the rows probeRows gives a worker at a time; the error sums are added per
// chunk in chunk order, so they do not depend on the number of threads.
const probeRowChunk = 64

// probeRows finishes a matrix's round trip on threads workers: it dequantizes the encoded rows
// q (rs bytes each) of x into y, returns (with sums) the importance-weighted squared error
// Σ w·(x−y)² and signal Σ w·x², and moves y part way (partWay).
func probeRows(typ gguf.GGMLType, q []byte, rs int, x, y, imp []float32, rows, cols, threads int, sums bool) (float64, float64, error) {
	nch := (rows + probeRowChunk - 1) / probeRowChunk
	nums, dens := make([]float64, nch), make([]float64, nch)
	var next atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := 0; w < max(1, min(threads, nch)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := int(next.Add(1) - 1)
				if c >= nch {
					return
				}
				r0, r1 := c*probeRowChunk, min(rows, (c+1)*probeRowChunk)
				xs, ys := x[r0*cols:r1*cols], y[r0*cols:r1*cols]
				if err := quant.Dequantize(typ, ys, q[r0*rs:r1*rs]); err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					return
				}
				for r := 0; sums && r < r1-r0; r++ {
					nu, de := kernels.WeightedSqErr(xs[r*cols:(r+1)*cols], ys[r*cols:(r+1)*cols], imp)
					nums[c], dens[c] = nums[c]+nu, dens[c]+de
				}
				partWay(ys, xs)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, 0, firstErr
	}
	var num, den float64
	for c := range nums {
		num, den = num+nums[c], den+dens[c]
	}
	return num, den, nil
}

// matrixImportance is matrix e's importance in all (nil when unknown or of another width).
func matrixImportance(all *Stats, name string, e, cols int) []float32 {
	if all == nil {
		return nil
	}
	ts := all.Tensors[name]
	if ts == nil {
		return nil
	}
	imp, _ := ts.Importance(e)
	if len(imp) != cols {
		return nil
	}
	return imp
}

func relOf(num, den float64) float64 {
	if den > 0 {
		return num / den
	}
	return 0
}

// roundTripRows is roundTrip for a matrix (rows × cols of d; floats as for roundTrip) that returns the
// encoded rows instead of their reconstruction, encoding chunks of rows (the containers encode
// rows independently, so the bytes and the error are roundTrip's).
func (r *run) roundTripRows(d modelsrc.TensorDesc, floats func(off, n int) []float32, typ gguf.GGMLType, all *Stats, threads int) ([]byte, float64, error) {
	cols, rows := int(d.Shape[0]), int(d.Shape[1])
	rs, err := quant.RowSize(typ, cols)
	if err != nil {
		return nil, 0, fmt.Errorf("calib: tensor %s: %w", d.Name, err)
	}
	imp := matrixImportance(all, d.Name, 0, cols)
	chunk := probeChunkRows(cols)
	out := make([]byte, rows*rs)
	deq := make([]float32, min(chunk, rows)*cols)
	var num, den float64
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		nu, de, err := roundTripMatrix(d.Name, typ, floats(r0*cols, n*cols), deq[:n*cols], imp, n, cols, threads, out[r0*rs:(r0+n)*rs])
		if err != nil {
			return nil, 0, err
		}
		num, den = num+nu, den+de
	}
	return out, relOf(num, den), nil
}

// sliceOf serves roundTrip from a float32 tensor in memory.
func sliceOf(f []float32) func(off, n int) []float32 {
	return func(off, n int) []float32 { return f[off : off+n] }
}

// forwardAll runs the loaded block over every sampled sequence's stream.
func (r *run) forwardAll(xs [][]float32, seqs []Sequence) error {
	for i, s := range seqs {
		if err := r.runner.Forward(xs[i], len(s.Tokens), nil); err != nil {
			return fmt.Errorf("calib: sensitivity: %w", err)
		}
	}
	return nil
}

// spreadIndex orders 0..n-1 so that any prefix is spread over the range (bit-reversal order
// of the next power of two, skipping indices ≥ n).
func spreadIndex(k, n int) int {
	bits := 0
	for 1<<bits < n {
		bits++
	}
	seen := 0
	for i := 0; i < 1<<bits; i++ {
		v := 0
		for b := 0; b < bits; b++ {
			if i&(1<<b) != 0 {
				v |= 1 << (bits - 1 - b)
			}
		}
		if v < n {
			if seen == k {
				return v
			}
			seen++
		}
	}
	return k % max(n, 1)
}

// headLogits computes logits[v] = head[v]·h (head: V rows of len(h)), split over threads.
func headLogits(logits []float32, head *lmHead, h []float32, threads int) {
	V := len(logits)
	threads = max(1, min(threads, V/256))
	var wg sync.WaitGroup
	for w := 0; w < threads; w++ {
		lo, hi := w*V/threads, (w+1)*V/threads
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []float32
			if head.f32 == nil {
				buf = make([]float32, head.e)
			}
			for v := lo; v < hi; v++ {
				logits[v] = kernels.DotF32(head.row(v, buf), h)
			}
		}()
	}
	wg.Wait()
}

// lmHead is the LM head the pass scores with: float32, or (top-k KL, a 16-bit checkpoint)
// its BF16/F16 rows, widened exactly where they are multiplied: the same values at half the
// memory (Qwen3.6-35B-A3B's head: 1.0 GB instead of 2.0 GB).
type lmHead struct {
	e    int
	f32  []float32
	half []byte
	ht   gguf.GGMLType
}

// loadHead reads the LM head d, kept 16-bit when half is set and the checkpoint stores it so.
func loadHead(src WeightSource, d modelsrc.TensorDesc, half bool) (*lmHead, error) {
	E, n := int(d.Shape[0]), elements(d.Shape)
	h := &lmHead{e: E}
	if ht := halfType(d); half && ht != 0 {
		b := make([]byte, 2*n)
		ok, err := readHalf(src, d, ht, b, make([]float32, readChunkBytes/4))
		if err != nil {
			return nil, fmt.Errorf("calib: %w", err)
		}
		if ok {
			h.half, h.ht = b, ht
			return h, nil
		}
	}
	h.f32 = make([]float32, n)
	if err := readTensor(src, d, h.f32); err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	return h, nil
}

// row returns row k as float32: a slice of the float32 head, or widened into buf (len ≥ e).
func (h *lmHead) row(k int, buf []float32) []float32 {
	if h.f32 != nil {
		return h.f32[k*h.e : (k+1)*h.e]
	}
	widen(h.ht, buf[:h.e], h.half[2*k*h.e:2*(k+1)*h.e])
	return buf[:h.e]
}

// floats serves the head's round trip (roundTrip, roundTripRows): elements [off, off+n) as
// float32, widened into a buffer reused between calls when the head is 16-bit.
func (h *lmHead) floats() func(off, n int) []float32 {
	if h.f32 != nil {
		return sliceOf(h.f32)
	}
	var buf []float32
	return func(off, n int) []float32 {
		if cap(buf) < n {
			buf = make([]float32, n)
		}
		widen(h.ht, buf[:n], h.half[2*off:2*(off+n)])
		return buf[:n]
	}
}

// topIndices returns the indices of the k largest values of v (any order), reusing dst.
func topIndices(dst []int, v []float64, k int) []int {
	dst = dst[:0]
	k = min(k, len(v))
	// a min-heap on v of the k largest so far
	less := func(a, b int) bool { return v[dst[a]] < v[dst[b]] }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(dst) {
				return
			}
			m := l
			if r := l + 1; r < len(dst) && less(r, l) {
				m = r
			}
			if !less(m, i) {
				return
			}
			dst[i], dst[m] = dst[m], dst[i]
			i = m
		}
	}
	for i := range v {
		if len(dst) < k {
			dst = append(dst, i)
			for j := len(dst) - 1; j > 0; {
				p := (j - 1) / 2
				if !less(j, p) {
					break
				}
				dst[j], dst[p] = dst[p], dst[j]
				j = p
			}
			continue
		}
		if v[i] > v[dst[0]] {
			dst[0] = i
			down(0)
		}
	}
	return dst
}

// tailSample draws m tokens outside the top set (mask) with probability proportional to the
// reference's, by inverse CDF on stratified uniforms (u: m values in [0,1), one per stratum).
func tailSample(dst []int, ref []float64, mask []bool, u []float64) []int {
	dst = dst[:0]
	var tot float64
	for v, lp := range ref {
		if !mask[v] {
			tot += math.Exp(lp)
		}
	}
	if tot <= 0 {
		return dst
	}
	m := len(u)
	var acc float64
	j := 0
	for v, lp := range ref {
		if mask[v] {
			continue
		}
		acc += math.Exp(lp) / tot
		for j < m && (float64(j)+u[j])/float64(m) < acc {
			dst = append(dst, v)
			j++
		}
	}
	for last := len(ref) - 1; j < m && last >= 0; last-- {
		if !mask[last] { // rounding at the end of the CDF
			for ; j < m; j++ {
				dst = append(dst, last)
			}
		}
	}
	return dst
}

// topKKL estimates KL(ref ‖ probe) from the probe's logits on the reference's top tokens idx
// (holding mass pin) and on tail, tokens drawn from the rest in proportion to the reference
// (tailSample). refLogits are the reference's raw logits, lseRef their log-sum-exp. With
// Δ_v the change of token v's logit, the tail's partition changes by E_tail[e^Δ] and its KL
// term is p_tail·(lse_probe − lse_ref − E_tail[Δ]); both expectations are estimated by the
// sample means. Exact when the probe changes no tail logit or the tail is empty.
func topKKL(ref []float64, refLogits []float32, lseRef float64, idx, tail []int, pin float64, row func(k int) []float32, h []float32, lk []float64) float64 {
	ptail := max(0, 1-pin)
	var zTop float64
	for j, k := range idx {
		lk[j] = float64(kernels.DotF32(row(k), h))
		zTop += math.Exp(lk[j] - lseRef)
	}
	var meanExp, meanD float64
	if len(tail) > 0 && ptail > 0 {
		for _, v := range tail {
			d := float64(kernels.DotF32(row(v), h)) - float64(refLogits[v])
			meanExp += math.Exp(d)
			meanD += d
		}
		meanExp /= float64(len(tail))
		meanD /= float64(len(tail))
	} else {
		meanExp = 1
	}
	dl := math.Log(zTop + ptail*meanExp) // lse_probe − lse_ref
	var kl float64
	for j, k := range idx {
		kl += math.Exp(ref[k]) * (ref[k] - (lk[j] - lseRef - dl))
	}
	return kl + ptail*(dl-meanD)
}

// logSoftmax writes log-probabilities of logits into dst.
func logSoftmax(dst []float64, logits []float32) {
	m := math.Inf(-1)
	for _, v := range logits {
		m = math.Max(m, float64(v))
	}
	var z float64
	for _, v := range logits {
		z += math.Exp(float64(v) - m)
	}
	lz := m + math.Log(z)
	for i, v := range logits {
		dst[i] = float64(v) - lz
	}
}
