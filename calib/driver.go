package calib

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/quant/kernels"
	"github.com/tq-project/tq/tokenizer/tokfile"
)

// Sequence is one calibration sequence: token ids (padding included) of which the first Valid
// are real; statistics skip the padding.
type Sequence struct {
	Tokens []int32
	Valid  int
}

// File names written into the output directory.
const (
	ConfigFile  = "quantize_config.json"
	StatsFile   = "calibration.tqstats.zst"
	IMatrixFile = "imatrix.gguf"
	RoutingFile = "routing.json"
)

// DefaultUncoveredSample is the number of tokens per MoE layer run through never-routed
// experts.
const DefaultUncoveredSample = 512

// DefaultSearchRows is the number of rows per matrix measured by the search (evenly spread).
const DefaultSearchRows = 256

// Options configure Calibrate.
type Options struct {
	// OutDir receives quantize_config.json, the statistics, the imatrix and (MoE) the routing
	// histogram; "" means the model folder (where `tq convert --use-turboquant` looks).
	OutDir string
	// Sequences are the calibration token sequences (see BuildSequences).
	Sequences []Sequence
	// Datasets name the calibration sources (recorded).
	Datasets []string
	// PadMultiple is the padding multiple the sequences were padded to (recorded).
	PadMultiple int
	// TokenHeader is the token-file header of the sequences (vocabulary hash, pad id, pad
	// multiple, max length), used for calibration_hash; nil derives one (pad id from the first
	// padding token, PadMultiple, no vocabulary hash).
	TokenHeader *tokfile.Header

	// WeightDType is "int4" (default) or "int8"; GroupSize 32, 64 or 128 (default 128).
	// Groups are symmetric unless Asymmetric is set (asymmetric int4 stores a scale and a min
	// per 32 weights, in Q4_K or Q4_1, and ignores GroupSize; int8 is always symmetric).
	WeightDType string
	GroupSize   int
	Asymmetric  bool
	// KVCacheDType is recorded for the runtime (default f16).
	KVCacheDType string
	// Method is the calibration method: "mse" (default). "kl" is refused (see ErrKLMethod).
	Method string
	// LayersToQuantize and SkipLayers default to DefaultLayersToQuantize / DefaultSkipLayers.
	LayersToQuantize []string
	SkipLayers       []string

	// MemoryBudget bounds the process's memory in bytes (0: no bound): one block's weights and
	// the buffers are accounted, hidden states beyond the rest are spilled to disk, and the Go
	// runtime's soft memory limit is set to it for the duration of the run.
	MemoryBudget int64
	// Threads is the number of worker goroutines (0: all CPUs).
	Threads int
	// Restart discards any checkpoint in the output directory and starts over (by default an
	// unfinished run with the same inputs is resumed, one with other inputs is an error).
	Restart bool
	// KeepCheckpoint keeps the checkpoint directory after success.
	KeepCheckpoint bool
	// UncoveredSample is the number of tokens per MoE layer run through experts the routing
	// never selected (0: DefaultUncoveredSample; < 0: disabled, such experts keep no statistics).
	UncoveredSample int
	// IMatrixChunkSize is imatrix.chunk_size of the exported imatrix (0: the longest sequence).
	IMatrixChunkSize int
	// NoBaseline skips measuring the unweighted search for comparison.
	NoBaseline bool
	// NoSensitivity skips measuring the other bit width (TensorChoice.Sensitivity stays 0).
	NoSensitivity bool
	// ExactForward keeps every product of the forward exact: by default, on a CPU with AMX
	// or AVX512-BF16, bf16 weights multiply activations rounded to the nearest bf16
	// (infer.Options.BF16Products; ggml's own rounding for bf16 weights, twice the speed) and
	// the Gram matrices are taken from rows rounded the same way (gramAcc).
	ExactForward bool
	// NoHessians skips the input Gram matrices (HessianDir). By default every linear input
	// of at most HessianMaxCols columns gets its full Gram matrix, as far as MemoryBudget allows.
	NoHessians bool
	// HessianMaxCols is the most columns of an input with a full Gram matrix (0:
	// DefaultHessianMaxCols; at most MaxGramCols); wider inputs keep only their diagonal.
	HessianMaxCols int
	// ExpertHessianBytes bounds the per-expert Gram matrices of routed experts (float32 bytes
	// of the whole model's, before compression; 0: DefaultExpertHessianBytes; < 0: none): a
	// model whose matrices would take more keeps the reconstruction from the shared matrix and
	// per-expert diagonals (docs/calibration.md, "MoE experts").
	ExpertHessianBytes int64
	// SearchRows is the number of rows per matrix whose quantization is measured for the
	// recorded figures (0: DefaultSearchRows; < 0: every row).
	SearchRows int
	// SensitivityTokens is the calibration tokens the measured-sensitivity pass scores (0:
	// DefaultSensitivityTokens, fewer when the pass would cost more than a quarter of the
	// statistics pass's block work, but at least MinSensitivityTokens; < 0: no pass, no
	// sensitivity.json). See sensitivity.go.
	SensitivityTokens int
	// SensitivityMACs bounds the pass's LM-head multiply-adds (0: the larger of
	// DefaultSensitivityMACs and a quarter of the pass's block work; see sensitivitySample).
	SensitivityMACs float64
	// Version is the tq version recorded.
	Version string
	// Import, when set, skips the forward pass: the search uses these statistics (a llama.cpp
	// imatrix read with LoadIMatrix, or a tq statistics file) instead. ImportHash is recorded
	// as calibration_hash (e.g. "sha256:" and the hex SHA-256 of the imported file).
	Import     *Stats
	ImportHash string
	// Progress receives progress events (from the calling goroutine).
	Progress func(Progress)
	// Warn receives warnings as they arise (they are also in Result.Warnings).
	Warn func(string)
}

// Progress reports calibration progress.
type Progress struct {
	// Stage is "embed", "layer", "search", "head", "sensitivity" or "done".
	Stage string
	// Layer is the block being run (0-based) and NLayer the model's depth.
	Layer, NLayer int
	// Seq sequences of NSeq are done in this stage; Tokens of TotalTokens padded tokens.
	Seq, NSeq           int
	Tokens, TotalTokens int64
	// Elapsed is the time spent in this stage so far.
	Elapsed time.Duration
	// Resumed is true for the first event after resuming from a checkpoint.
	Resumed bool
}

// Result describes a finished calibration.
type Result struct {
	Config      *QuantizeConfig `json:"config"`
	ConfigPath  string          `json:"config_path"`
	StatsPath   string          `json:"stats_path"`
	IMatrixPath string          `json:"imatrix_path"`
	RoutingPath string          `json:"routing_path,omitempty"`
	Coverage    []Coverage      `json:"coverage,omitempty"`
	// ResumedAt is the step calibration resumed from (0: fresh run).
	ResumedAt int `json:"resumed_at"`
	// HiddenInRAM is the number of sequences whose hidden states were kept in RAM.
	HiddenInRAM int `json:"hidden_in_ram"`
	// SensitivityPath is the measured sensitivities ("" when the pass did not run).
	SensitivityPath string `json:"sensitivity_path,omitempty"`
	// HessianDir is the directory of the input Gram matrices ("" when not collected).
	HessianDir string `json:"hessian_dir,omitempty"`
	// EstimatedBytes is the memory accounted besides hidden states.
	EstimatedBytes int64 `json:"estimated_bytes"`
	// PackedWeightBytes is the memory the forward keeps a block's 16-bit matrices in, packed
	// for the GEMM across the sequences (0: not kept, when the memory budget has no room).
	PackedWeightBytes int64    `json:"packed_weight_bytes,omitempty"`
	Warnings          []string `json:"warnings,omitempty"`
	Stats             *Stats   `json:"-"`
}

// ErrKLMethod explains why only MSE calibration is offered.
var ErrKLMethod = errors.New(`calibration method "kl" is not supported: KL-divergence calibration picks ` +
	`activation clipping ranges for int8 activation quantization (TensorRT style), but tq quantizes only ` +
	`weights and llama.cpp computes with full-precision activations; for weights the error that reaches ` +
	`the output is Σ_c E[x_c²]·(W−Ŵ)², which the importance-weighted MSE search minimises directly. Use --calibration-method mse`)

func (o *Options) fill() error {
	if o.WeightDType == "" {
		o.WeightDType = DefaultWeightDType
	}
	switch o.WeightDType {
	case "int4", "int8":
	default:
		return fmt.Errorf("calib: weight dtype %q: want int4 or int8", o.WeightDType)
	}
	if o.GroupSize == 0 {
		o.GroupSize = DefaultGroupSize
	}
	switch o.GroupSize {
	case 32, 64, 128:
	default:
		return fmt.Errorf("calib: group size %d: want 32, 64 or 128", o.GroupSize)
	}
	switch strings.ToLower(o.Method) {
	case "", MethodMSE:
		o.Method = MethodMSE
	case "kl", "kld", "kl_divergence", "entropy":
		return ErrKLMethod
	default:
		return fmt.Errorf("calib: calibration method %q: want mse", o.Method)
	}
	if o.LayersToQuantize == nil {
		o.LayersToQuantize = append([]string(nil), DefaultLayersToQuantize...)
	}
	if o.SkipLayers == nil {
		o.SkipLayers = append([]string(nil), DefaultSkipLayers...)
	}
	if o.SearchRows == 0 {
		o.SearchRows = DefaultSearchRows
	}
	if o.UncoveredSample == 0 {
		o.UncoveredSample = DefaultUncoveredSample
	}
	if o.HessianMaxCols == 0 {
		o.HessianMaxCols = DefaultHessianMaxCols
	}
	if o.ExpertHessianBytes == 0 {
		o.ExpertHessianBytes = DefaultExpertHessianBytes
	}
	if o.HessianMaxCols < 0 || o.HessianMaxCols > MaxGramCols {
		return fmt.Errorf("calib: hessian column limit %d: want 1 to %d", o.HessianMaxCols, MaxGramCols)
	}
	if o.Import != nil {
		if len(o.Sequences) > 0 {
			return errors.New("calib: calibration sequences and imported statistics are exclusive")
		}
		return nil
	}
	if len(o.Sequences) == 0 {
		return errors.New("calib: no calibration sequences")
	}
	for i, s := range o.Sequences {
		if len(s.Tokens) == 0 || s.Valid < 0 || s.Valid > len(s.Tokens) {
			return fmt.Errorf("calib: calibration sequence %d: %d tokens, %d valid", i, len(s.Tokens), s.Valid)
		}
	}
	if o.MemoryBudget < 0 {
		return errors.New("calib: negative memory budget")
	}
	return nil
}

// run is the state of one Calibrate call.
type run struct {
	opts     *Options
	ctx      context.Context
	modelDir string
	src      *modelsrc.HFSource
	md       gguf.Metadata
	cfg      *infer.Config
	runner   *infer.LayerRunner
	hidden   *hiddenStore
	ckpt     string
	st       *checkpointState
	decide   map[string]policy.Decision
	descs    map[string]modelsrc.TensorDesc
	turbo    *policy.TurboConfig
	maxLen   int
	scratch  []float32
	warnings []string
	fwdTime  time.Duration
	hash     string
	hess     *hessPlan // nil: no Gram matrices
}

func (r *run) warn(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	r.warnings = append(r.warnings, msg)
	if r.opts.Warn != nil {
		r.opts.Warn(msg)
	}
}

func (r *run) progress(p Progress) {
	if r.opts.Progress != nil {
		p.NLayer = r.cfg.NLayer
		r.opts.Progress(p)
	}
}

// Calibrate runs the calibration of the Hugging Face model in modelDir: every calibration
// sequence goes through the model in full precision, block by block (one block's weights in
// memory at a time), while the inputs of every linear layer are accumulated; then, per block,
// the quantization of every tensor in layers_to_quantize is searched with the importance
// weights, and quantize_config.json, the statistics, a llama.cpp imatrix and (MoE) the routing
// histogram are written into the output directory. An interrupted run resumes from its last
// finished block.
func Calibrate(ctx context.Context, modelDir string, opts Options) (*Result, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	kv, kvWarn, err := NormalizeKVCacheDType(opts.KVCacheDType)
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	opts.KVCacheDType = kv
	r := &run{opts: &opts, ctx: ctx, modelDir: modelDir}
	hdr := opts.TokenHeader
	if opts.Import != nil {
		r.hash = opts.ImportHash
	} else if hdr == nil {
		hdr = &tokfile.Header{PadMultiple: uint32(max(opts.PadMultiple, 0))}
		for _, s := range opts.Sequences {
			if s.Valid < len(s.Tokens) {
				hdr.PadID = s.Tokens[s.Valid]
				break
			}
		}
	}
	if opts.Import == nil {
		if r.hash, err = CalibrationHash(*hdr, opts.Sequences); err != nil {
			return nil, err
		}
	}
	if kvWarn != "" {
		r.warn("%s", kvWarn)
	}
	if opts.OutDir == "" {
		opts.OutDir = modelDir
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	start := time.Now()
	src, err := modelsrc.OpenHF(modelDir)
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	defer src.Close()
	r.src = src
	r.md = src.Metadata()
	if err := r.plan(); err != nil {
		return nil, err
	}
	if opts.Import != nil {
		return r.searchImported(start)
	}
	for _, s := range opts.Sequences {
		r.maxLen = max(r.maxLen, len(s.Tokens))
	}
	glob := &metaSource{md: r.md, tensors: map[string]*infer.Tensor{}}
	if d, ok := r.descs["rope_freqs.weight"]; ok {
		buf := make([]float32, elements(d.Shape))
		if err := readTensor(src, d, buf); err != nil {
			return nil, fmt.Errorf("calib: %w", err)
		}
		glob.tensors[d.Name] = &infer.Tensor{Name: d.Name, Type: gguf.TypeF32, Dims: d.Shape, Data: f32Bytes(buf)}
	}
	ro := forwardOptions(opts.ExactForward)
	ro.Threads, ro.CtxSize = opts.Threads, r.maxLen
	r.runner, err = infer.NewLayerRunner(glob, ro)
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	defer r.runner.Close()
	r.cfg = r.runner.Config()
	vocab := int64(-1)
	if d, ok := r.descs["token_embd.weight"]; ok && len(d.Shape) == 2 {
		vocab = d.Shape[1]
	}
	for i, s := range opts.Sequences {
		for j, t := range s.Tokens {
			if t < 0 || int64(t) >= vocab {
				return nil, fmt.Errorf("calib: calibration sequence %d, position %d: token %d outside the vocabulary (%d)", i, j, t, vocab)
			}
		}
	}

	est := r.estimate()
	ram := int64(math.MaxInt64)
	if opts.MemoryBudget > 0 {
		if est > opts.MemoryBudget {
			return nil, fmt.Errorf("calib: memory budget of %s is below what one block needs (%s: its weights, activation buffers and runtime)",
				fmtBytes(opts.MemoryBudget), fmtBytes(est))
		}
	}
	if err := r.planHessians(est); err != nil {
		return nil, err
	}
	if r.hess != nil {
		est += r.hess.bytes
	}
	// The forward keeps a block's 16-bit matrices packed for the GEMM across the sequences
	// (infer's PackWeights) only with memory to spare: with a budget, room for it beside
	// everything above and all hidden states; without one, when no Gram accumulators (which
	// already make a step's peak) are collected and it takes at most packMaxUnbudgeted (a
	// large MoE block would take gigabytes). It is reported apart from EstimatedBytes.
	var packed int64
	if pb := r.packBytes(); pb > 0 {
		var hidden int64
		for _, s := range opts.Sequences {
			hidden += 4 * int64(len(s.Tokens)) * int64(r.cfg.NEmbd)
		}
		spare := (r.hess == nil || r.hess.bytes == 0) && pb <= packMaxUnbudgeted
		if opts.MemoryBudget > 0 {
			spare = est+pb+hidden <= opts.MemoryBudget
		}
		if spare {
			r.runner.SetPackWeights(true)
			packed = pb
		}
	}
	if opts.MemoryBudget > 0 {
		ram = opts.MemoryBudget - est - packed
		// The Go runtime's soft limit covers the memory it manages; leave room for what it does
		// not (the binary's mapped text and data, C allocations).
		prev := debug.SetMemoryLimit(opts.MemoryBudget - min(32<<20, opts.MemoryBudget/8))
		defer debug.SetMemoryLimit(prev)
	}

	res := &Result{EstimatedBytes: est, PackedWeightBytes: packed}
	if err := r.openCheckpoint(ram); err != nil {
		return nil, err
	}
	res.ResumedAt = r.st.StepsDone
	res.HiddenInRAM = r.hidden.inRAM()
	if r.st.StepsDone > 0 {
		r.progress(Progress{Stage: "layer", Layer: r.st.StepsDone - 1, Resumed: true})
	}
	nsteps := r.cfg.NLayer + 2
	for step := r.st.StepsDone; step < nsteps; step++ {
		if err := ctx.Err(); err != nil {
			r.hidden.close()
			return nil, err
		}
		var sr *stepResult
		var ss *Stats
		switch {
		case step == 0:
			sr, ss, err = r.embed()
		case step <= r.cfg.NLayer:
			sr, ss, err = r.layer(step - 1)
		default:
			sr, ss, err = r.head()
		}
		if err != nil {
			r.hidden.close()
			return nil, err
		}
		if err := SaveStats(stepStatsPath(r.ckpt, step), ss); err != nil {
			r.hidden.close()
			return nil, err
		}
		if err := saveJSON(stepResultPath(r.ckpt, step), sr); err != nil {
			r.hidden.close()
			return nil, fmt.Errorf("calib: checkpoint: %w", err)
		}
		if step < nsteps-1 {
			if err := r.hidden.commit(); err != nil {
				r.hidden.close()
				return nil, err
			}
		}
		r.st.StepsDone, r.st.Cur = step+1, r.hidden.cur
		if err := saveJSON(statePath(r.ckpt), r.st); err != nil {
			r.hidden.close()
			return nil, fmt.Errorf("calib: checkpoint: %w", err)
		}
	}
	r.hidden.releaseRAM()
	runtime.GC()
	if err := r.finish(res, start); err != nil {
		r.hidden.close()
		return nil, err
	}
	r.hidden.close()
	if !opts.KeepCheckpoint {
		r.hidden.remove()
		os.RemoveAll(r.ckpt)
	}
	res.Warnings = r.warnings
	r.progress(Progress{Stage: "done", Elapsed: time.Since(start)})
	return res, nil
}

// plan runs the turboquant policy over the model's tensors (exactly as convert will) to learn
// which tensors are searched, in which container.
func (r *run) plan() error {
	o := r.opts
	sym := !o.Asymmetric
	r.turbo = &policy.TurboConfig{QuantMethod: policy.TurboQuantMethod, WeightDType: o.WeightDType, KVCacheDType: o.KVCacheDType,
		GroupSize: o.GroupSize, Symmetric: &sym, CalibrationMethod: o.Method, LayersToQuantize: o.LayersToQuantize, SkipLayers: o.SkipLayers}
	r.descs = map[string]modelsrc.TensorDesc{}
	var ts []policy.Tensor
	for _, d := range r.src.Tensors() {
		r.descs[d.Name] = d
		srcs := make([]string, len(d.Sources))
		for i, s := range d.Sources {
			srcs[i] = strings.TrimSuffix(s, ".weight")
		}
		t := policy.Tensor{Name: d.Name, Shape: d.Shape, Sources: srcs}
		t.Type = policy.ConverterFloatType(t, gguf.TypeF16)
		ts = append(ts, t)
	}
	tp := &policy.TurboPolicy{Config: r.turbo}
	ds, err := tp.Assign(ts)
	if err != nil {
		return fmt.Errorf("calib: quantize config: %w", err)
	}
	for _, w := range tp.Warnings {
		r.warn("%s", w)
	}
	r.decide = map[string]policy.Decision{}
	for _, d := range ds {
		r.decide[d.Name] = d
	}
	return nil
}

// searched reports whether tensor name gets the weighted search.
func (r *run) searched(name string) bool {
	d, ok := r.decide[name]
	if !ok || !d.Weighted || !d.Quantize {
		return false
	}
	tr, _ := d.Type.Traits()
	return tr.Quantized
}

// fingerprint identifies what a checkpoint depends on.
func (r *run) fingerprint(modelDir string) string {
	h := sha256.New()
	fmt.Fprintf(h, "tq-calibrate-checkpoint %d\n", checkpointVersion)
	if b, err := boundedread.ReadFile(filepath.Join(modelDir, "config.json"), "config", boundedread.MaxJSONConfig); err == nil {
		h.Write(b)
	}
	for _, d := range r.src.Tensors() {
		fmt.Fprintf(h, "%s %v %s\n", d.Name, d.Shape, d.SourceType)
	}
	o := r.opts
	fmt.Fprintf(h, "%s\n%s %d %v %s %q %q %d\n", r.hash, o.WeightDType, o.GroupSize, !o.Asymmetric,
		o.Method, o.LayersToQuantize, o.SkipLayers, o.UncoveredSample)
	fmt.Fprintf(h, "hessians %v %d %d\n", !o.NoHessians, o.HessianMaxCols, max(o.ExpertHessianBytes, -1))
	if bf16Rounded(o.ExactForward) {
		// the rounded bf16 products change the hidden states: a run is resumed only with the
		// arithmetic it started with (exact runs keep the fingerprint they always had)
		fmt.Fprintf(h, "bf16 products rounded\n")
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (r *run) openCheckpoint(ram int64) error {
	r.ckpt = filepath.Join(r.opts.OutDir, CheckpointDir)
	fp := r.fingerprint(r.modelDir)
	lens := make([]int, len(r.opts.Sequences))
	for i, s := range r.opts.Sequences {
		lens[i] = len(s.Tokens)
	}
	nsteps := r.cfg.NLayer + 2
	st, ok, err := loadState(r.ckpt)
	if err != nil && !r.opts.Restart {
		return err
	}
	if ok && st.Fingerprint != fp {
		if !r.opts.Restart {
			return fmt.Errorf("calib: %s holds an unfinished calibration of a different model, calibration set or options: "+
				"rerun with the same inputs to resume it, or pass --restart to discard it", r.ckpt)
		}
		ok = false
	}
	if ok && st.NSteps != nsteps && !r.opts.Restart {
		return fmt.Errorf("calib: checkpoint %s has %d steps, this model needs %d: pass --restart to discard it", r.ckpt, st.NSteps, nsteps)
	}
	if r.opts.Restart {
		ok = false
	}
	if !ok {
		os.RemoveAll(r.ckpt)
		if err := os.MkdirAll(r.ckpt, 0o755); err != nil {
			return fmt.Errorf("calib: %w", err)
		}
		st = &checkpointState{Version: checkpointVersion, Fingerprint: fp, NSteps: nsteps}
		if err := saveJSON(statePath(r.ckpt), st); err != nil {
			return fmt.Errorf("calib: checkpoint: %w", err)
		}
	}
	r.st = st
	resume := st.StepsDone > 0
	r.hidden, err = newHiddenStore(r.ckpt, r.cfg.NEmbd, lens, ram, resume, st.Cur)
	if err != nil {
		return err
	}
	r.scratch = make([]float32, r.maxLen*r.cfg.NEmbd)
	return nil
}

// finish merges the step files and writes the outputs.
func (r *run) finish(res *Result, start time.Time) error {
	o := r.opts
	all := NewStats()
	choices := map[string]*TensorChoice{}
	uncovered := 0
	for step := 0; step < r.st.NSteps; step++ {
		ss, err := LoadStats(stepStatsPath(r.ckpt, step))
		if err != nil {
			return err
		}
		if err := all.Merge(ss); err != nil {
			return err
		}
		var sr stepResult
		if err := loadJSON(stepResultPath(r.ckpt, step), &sr, 256<<20); err != nil {
			return fmt.Errorf("calib: checkpoint: %w", err)
		}
		for k, v := range sr.Choices {
			choices[k] = v
		}
		if sr.Coverage != nil {
			res.Coverage = append(res.Coverage, *sr.Coverage)
		}
		uncovered += sr.Uncovered
		for _, w := range sr.Warnings {
			r.warn("%s", w)
		}
	}
	var tokens, padded int64
	for _, s := range o.Sequences {
		tokens += int64(s.Valid)
		padded += int64(len(s.Tokens))
	}
	all.Meta = Meta{Arch: r.cfg.Arch, NLayer: r.cfg.NLayer, Prompts: len(o.Sequences),
		Tokens: tokens, PaddedTokens: padded, TokenHash: r.hash, Datasets: o.Datasets, TQVersion: o.Version,
		LayersDone: r.cfg.NLayer, UncoveredSample: max(o.UncoveredSample, 0)}
	tps := 0.0
	if r.fwdTime > 0 {
		// throughput of the blocks run in this process (a resumed run counts only its blocks)
		layersRun := r.cfg.NLayer - max(0, res.ResumedAt-1)
		if layersRun > 0 {
			tps = float64(padded) * float64(layersRun) / float64(r.cfg.NLayer) / r.fwdTime.Seconds()
		}
	}
	chunk := o.IMatrixChunkSize
	if chunk <= 0 {
		chunk = r.maxLen
	}
	rec := &CalibrationRecord{Prompts: len(o.Sequences), Tokens: tokens, PaddedTokens: padded, PadMultiple: o.PadMultiple,
		UncoveredExperts: uncovered, TokensPerSecond: tps, Threads: r.runner.Threads(),
		Precision: forwardPrecision(o.ExactForward)}
	if r.hess != nil {
		var err error
		if rec.Hessians, err = r.finishHessians(tokens); err != nil {
			return err
		}
		res.HessianDir = r.hess.dir
	}
	sp, err := r.sensitivity(all)
	if err != nil {
		return err
	}
	if sp != "" {
		res.SensitivityPath = sp
		rec.Sensitivity = SensitivityFile
	} else if err := removeStale(filepath.Join(o.OutDir, SensitivityFile)); err != nil {
		return err
	}
	return r.writeOutputs(res, all, choices, rec, chunk, start)
}

// writeOutputs writes the statistics, the imatrix, the routing histogram (MoE) and
// quantize_config.json.
func (r *run) writeOutputs(res *Result, all *Stats, choices map[string]*TensorChoice, rec *CalibrationRecord, chunk int, start time.Time) error {
	o := r.opts
	all.Meta.Model = filepath.Base(filepath.Clean(r.modelDir))
	if a, err := r.md.GetString("general.name"); err == nil && a != "" {
		all.Meta.Model = a
	}
	statsPath := filepath.Join(o.OutDir, StatsFile)
	if err := SaveStats(statsPath, all); err != nil {
		return err
	}
	imPath := filepath.Join(o.OutDir, IMatrixFile)
	if err := SaveIMatrix(imPath, all, &IMatrixOptions{ChunkSize: chunk}); err != nil {
		return err
	}
	routingPath := ""
	if len(all.Routing) > 0 {
		routingPath = filepath.Join(o.OutDir, RoutingFile)
		doc := struct {
			Tokens   int64           `json:"tokens"`
			Layers   []*LayerRouting `json:"layers"`
			Coverage []Coverage      `json:"coverage"`
		}{all.Meta.Tokens, all.Routing, res.Coverage}
		if err := saveJSON(routingPath, doc); err != nil {
			return fmt.Errorf("calib: %w", err)
		}
		rec.Routing = RoutingFile
	}
	rec.Model, rec.Arch, rec.Datasets, rec.TokenHash = all.Meta.Model, r.cfg.Arch, all.Meta.Datasets, r.hash
	rec.Stats, rec.IMatrix, rec.Seconds = StatsFile, IMatrixFile, time.Since(start).Seconds()
	cfg := &QuantizeConfig{
		QuantMethod: policy.TurboQuantMethod, WeightDType: o.WeightDType, KVCacheDType: o.KVCacheDType, GroupSize: o.GroupSize,
		Symmetric: !o.Asymmetric, CalibrationMethod: o.Method, LayersToQuantize: o.LayersToQuantize, SkipLayers: o.SkipLayers,
		NumPrompts: rec.Prompts, CalibrationHash: r.hash, TQVersion: o.Version, Imatrix: IMatrixFile,
		Calibration: rec, Tensors: choices,
	}
	cfgPath := filepath.Join(o.OutDir, ConfigFile)
	if err := SaveConfig(cfgPath, cfg); err != nil {
		return err
	}
	res.Config, res.ConfigPath, res.StatsPath, res.IMatrixPath, res.RoutingPath, res.Stats = cfg, cfgPath, statsPath, imPath, routingPath, all
	return nil
}

// searchImported runs the search with imported statistics (no forward pass).
func (r *run) searchImported(start time.Time) (*Result, error) {
	o := r.opts
	var err error
	if r.cfg, err = infer.ReadConfig(&metaSource{md: r.md}); err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	im := o.Import
	choices := map[string]*TensorChoice{}
	res := &Result{}
	var missing []string
	t0 := time.Now()
	for _, d := range r.src.Tensors() {
		if err := r.ctx.Err(); err != nil {
			return nil, err
		}
		if !r.searched(d.Name) {
			continue
		}
		if ts := im.Tensors[d.Name]; ts != nil {
			nmat := 1
			if len(d.Shape) > 2 {
				nmat = int(d.Shape[2])
			}
			if int64(ts.Cols) != d.Shape[0] || ts.NMat != nmat {
				if ts.NMat == 1 && int64(ts.Cols) == d.Shape[0]*int64(nmat) {
					split := *ts // a legacy .dat entry of a stacked tensor: split per expert
					split.Cols, split.NMat = int(d.Shape[0]), nmat
					split.Counts = slices.Repeat(ts.Counts, nmat)
					split.Synthetic = make([]bool, nmat)
					im.Tensors[d.Name] = &split
				} else {
					return nil, fmt.Errorf("calib: imported statistics for %s have %d matrices of %d columns, the tensor %d of %d",
						d.Name, ts.NMat, ts.Cols, nmat, d.Shape[0])
				}
			}
		} else {
			missing = append(missing, d.Name)
		}
		r.progress(Progress{Stage: "search", Layer: Layer(d.Name), Elapsed: time.Since(t0)})
		read := func(e, r0, n int, dst []float32) error { return readMatrixRows(r.src, d, e, r0, n, dst) }
		ch, err := r.search(d, read, im)
		if err != nil {
			return nil, err
		}
		choices[d.Name] = ch
	}
	if len(missing) > 0 {
		r.warn("the imported statistics have no entry for %d searched tensors (searched unweighted): %s", len(missing), strings.Join(missing[:min(4, len(missing))], ", "))
	}
	for _, h := range im.Routing {
		res.Coverage = append(res.Coverage, h.Coverage())
	}
	chunk := o.IMatrixChunkSize
	if chunk <= 0 {
		chunk = 512
	}
	meta := im.Meta
	meta.Arch, meta.NLayer, meta.TQVersion = r.cfg.Arch, r.cfg.NLayer, o.Version
	if meta.TokenHash == "" {
		meta.TokenHash = r.hash
	}
	im.Meta = meta
	rec := &CalibrationRecord{Prompts: meta.Prompts, Tokens: meta.Tokens, PaddedTokens: meta.PaddedTokens,
		Threads: r.threadCount(), Precision: "imported statistics (" + meta.Imported + ")"}
	// no forward pass, so no sensitivity: an earlier run's file must not pass for this one's
	if err := removeStale(filepath.Join(o.OutDir, SensitivityFile)); err != nil {
		return nil, err
	}
	if err := r.writeOutputs(res, im, choices, rec, chunk, start); err != nil {
		return nil, err
	}
	res.Warnings = r.warnings
	r.progress(Progress{Stage: "done", Elapsed: time.Since(start)})
	return res, nil
}

func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// forwardPrecision describes the calibration forward's arithmetic for the record: 16-bit
// matrices widened exactly inside the GEMM (others upcast to f32), f32 activations and KV
// cache, and whether bf16 products run with rounded activations (bf16Rounded, on AMX tiles or
// with AVX512-BF16) or on AMX tiles exactly, with the kernel set in use.
func forwardPrecision(exact bool) string {
	p := "f32 arithmetic (16-bit weights widened exactly in the GEMM, others upcast), f32 activations, f32 KV cache"
	switch {
	case bf16Rounded(exact):
		unit := "with AVX512-BF16"
		if kernels.UsingAMX() {
			unit = "on AMX tiles"
		}
		p += "; bf16 weights multiply activations rounded to bf16 (ties to even) " + unit + ", float32 sums; Gram matrices from the same rounded rows"
	case kernels.UsingAMX():
		p += "; bf16 products on AMX tiles (activations split into three exact bf16 pieces, float32 sums)"
	}
	return p + "; kernels: " + kernels.Implementation()
}

// bf16Rounded reports whether the forward's bf16 products take the rounded path (AMX tiles or
// AVX512-BF16): infer's own decision for the options Calibrate gives the runner. The Gram
// matrices are then taken from rows rounded the same way (gramAcc).
func bf16Rounded(exact bool) bool { return forwardOptions(exact).BF16Rounded() }

// forwardOptions are the arithmetic options of the calibration forward's runner.
func forwardOptions(exact bool) infer.Options {
	return infer.Options{CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true, BF16Products: !exact}
}
