package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/imatrix"
	"github.com/tq-project/tq/internal/rotate"
	"github.com/tq-project/tq/tokenizer"
	"github.com/tq-project/tq/verify/reflogits"
)

// Sections of a verification; Options.Skip takes these names.
const (
	SectionIntegrity = "integrity"
	SectionPPL       = "ppl"
	SectionKLD       = "kld"
	SectionTemplate  = "template"
	SectionToolCalls = "toolcalls"
)

// Sections lists the section names in run order.
var Sections = []string{SectionIntegrity, SectionTemplate, SectionPPL, SectionKLD, SectionToolCalls}

// Defaults.
const (
	DefaultCtx  = 512
	DefaultTopK = 128
)

// Options configure Run.
type Options struct {
	// Model is the GGUF file (or any shard of a split model) under test. It may be empty only
	// with SaveReference (reference-only run).
	Model string
	// Reference is a Hugging Face model folder or an F16/BF16/F32 GGUF file.
	Reference string
	// ReferenceLogits is a file written by SaveReference (instead of Reference).
	ReferenceLogits string
	// SaveReference writes the reference's top-k log-probabilities (and its template and
	// tool-call results) to this file.
	SaveReference string
	// TopK is the number of tokens per position SaveReference keeps (default 128).
	TopK int

	// TextPath is the evaluation text ("" = the built-in text); Text, when non-nil, is used
	// instead (TextName names it).
	TextPath string
	Text     []byte
	TextName string
	// Ctx is the window length in tokens (default 512); Chunks bounds the windows (0 = all).
	Ctx    int
	Chunks int

	// Full decodes every row of every tensor for the NaN/Inf check (default: SampleRows per
	// tensor).
	Full       bool
	SampleRows int
	// RequireManifest fails the manifest check when no manifest exists (default: warning).
	RequireManifest bool
	// QuantizeConfig is the quantize_config.json a turboquant file was converted from: the
	// file must record its SHA-256 and hold every listed tensor in its recorded container
	// (check "quantize_config"; "" skips it).
	QuantizeConfig string
	// Imatrix is a llama.cpp importance matrix (calibration statistics) used to estimate each
	// layer's sensitivity (with a reference).
	Imatrix string

	// SuitePath is a tool-call suite file ("" = built-in).
	SuitePath string
	// ToolCallMaxTokens caps generated tokens per case (default 384).
	ToolCallMaxTokens int
	// CacheType is the model's KV cache type: f16 (default), f32, bf16, q8_0, q4_0, or "auto"
	// for the turboquant.kv_cache_dtype the file records.
	CacheType string

	// Skip lists sections not to run (see Sections).
	Skip []string
	// Thresholds are the gate's limits; Explicit names the ones the user set (a threshold
	// whose metric cannot be computed is an error when explicit, skipped otherwise).
	Thresholds Thresholds
	Explicit   []string

	Threads   int
	TQVersion string
	// Progress receives progress bars (nil: none); Log receives status lines (nil: none).
	Progress io.Writer
	Log      io.Writer
}

// Error is a verification that could not be carried out (bad options, unreadable reference,
// ...), as opposed to a model that failed the gate.
type Error struct{ Err error }

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func usageErr(format string, a ...any) error { return &Error{fmt.Errorf(format, a...)} }

// runState carries what the sections share.
type runState struct {
	o        Options
	p        progress
	rep      *Report
	model    *gguf.Model
	tok      *tokenizer.Tokenizer
	template string

	ref        LogitsModel
	refClose   func() error
	refTok     *tokenizer.Tokenizer
	refTmpl    string
	refFile    *reflogits.File
	refExtra   *refExtra
	suite      *Suite
	text       []byte
	textName   string
	runnable   bool
	modelLM    LogitsModel
	modelClose func() error

	pendingSave *reflogits.File // reference distributions to write (--save-reference)
	refCalls    []CaseResult    // the live reference's tool-call results
}

// refExtra is what verify stores in a reference-logits file besides the distributions.
type refExtra struct {
	ChatTemplate  string            `json:"chat_template"`
	BOS           string            `json:"bos,omitempty"`
	EOS           string            `json:"eos,omitempty"`
	TokenizerHash string            `json:"tokenizer_hash"`
	TokenHashes   map[string]string `json:"token_hashes,omitempty"` // conversation id -> SHA-256 of ids
	SuiteSHA256   string            `json:"suite_sha256,omitempty"`
	ToolCalls     []CaseResult      `json:"tool_calls,omitempty"`
}

func (s *runState) skipped(sec string) bool { return slices.Contains(s.o.Skip, sec) }

// Run verifies a quantized model. The error is non-nil only when the verification could not
// be carried out (it is then an *Error or a context error); a model that fails the gate
// yields a report whose Verdict is "fail".
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if err := o.normalize(); err != nil {
		return nil, err
	}
	s := &runState{o: o, p: progress{o.Progress, o.Log}}
	s.rep = &Report{Model: o.Model, TQVersion: o.TQVersion, Skipped: map[string]string{}}
	defer s.close()
	if o.Reference != "" {
		s.rep.Reference, s.rep.ReferenceKind = o.Reference, "gguf"
		if isDir(o.Reference) {
			s.rep.ReferenceKind = "hf"
		}
	} else if o.ReferenceLogits != "" {
		s.rep.Reference, s.rep.ReferenceKind = o.ReferenceLogits, "logits"
	}
	if err := s.loadInputs(); err != nil {
		return nil, err
	}
	if o.Model == "" {
		if err := s.referenceOnly(ctx); err != nil {
			return nil, err
		}
		s.rep.Seconds = time.Since(start).Seconds()
		return s.rep, nil
	}
	if err := s.integrity(ctx); err != nil {
		return nil, err
	}
	if s.runnable {
		if err := s.evaluations(ctx); err != nil {
			return nil, err
		}
	}
	s.rep.evaluateGates(o.Thresholds, o.Explicit)
	s.rep.Seconds = time.Since(start).Seconds()
	return s.rep, nil
}

func (o *Options) normalize() error {
	if o.Ctx == 0 {
		o.Ctx = DefaultCtx
	}
	if o.TopK == 0 {
		o.TopK = DefaultTopK
	}
	if o.ToolCallMaxTokens == 0 {
		o.ToolCallMaxTokens = DefaultToolCallMaxTokens
	}
	if o.SampleRows == 0 {
		o.SampleRows = DefaultSampleRows
	}
	switch {
	case o.Model == "" && o.SaveReference == "":
		return usageErr("no model given")
	case o.Model == "" && o.Reference == "":
		return usageErr("--save-reference without a model needs --reference")
	case o.Reference != "" && o.ReferenceLogits != "":
		return usageErr("--reference and --reference-logits are mutually exclusive")
	case o.SaveReference != "" && o.Reference == "":
		return usageErr("--save-reference needs --reference (the model whose logits are saved)")
	case o.Ctx < 4 || o.Ctx%2 != 0:
		return usageErr("--ctx %d: must be an even number >= 4", o.Ctx)
	case o.Chunks < 0 || o.SampleRows < 2 || o.ToolCallMaxTokens < 1:
		return usageErr("--chunks, --sample-rows and --toolcall-max-tokens must be positive")
	case o.TopK < 1 || o.TopK > reflogits.MaxTopK:
		return usageErr("--top-k %d: must be in [1, %d]", o.TopK, reflogits.MaxTopK)
	}
	if o.Model != "" {
		if _, err := os.Stat(o.Model); err != nil {
			return &Error{err}
		}
	}
	for _, p := range []string{o.Reference, o.ReferenceLogits} {
		if p != "" {
			if _, err := os.Stat(p); err != nil {
				return &Error{err}
			}
		}
	}
	for _, sec := range o.Skip {
		if !slices.Contains(Sections, sec) {
			return usageErr("--skip %q: unknown section (sections: %s)", sec, strings.Join(Sections, ", "))
		}
	}
	if o.CacheType != "" && o.CacheType != "auto" {
		if _, err := infer.ParseCacheType(o.CacheType); err != nil {
			return usageErr("--cache-type: %v", err)
		}
	}
	// an explicit threshold whose metric cannot be computed is a usage error
	hasRef := o.Reference != "" || o.ReferenceLogits != ""
	for _, name := range o.Explicit {
		for _, sp := range thresholdSpecs {
			if sp.key != strings.ReplaceAll(name, "-", "_") {
				continue
			}
			if sp.needs == "reference" && !hasRef && o.Model != "" {
				return usageErr("--%s needs --reference or --reference-logits", strings.ReplaceAll(sp.key, "_", "-"))
			}
			if slices.Contains(o.Skip, sp.section) {
				return usageErr("--%s is set but its section %q is skipped", strings.ReplaceAll(sp.key, "_", "-"), sp.section)
			}
		}
	}
	return nil
}

func (s *runState) close() {
	if s.modelClose != nil {
		s.modelClose()
	}
	if s.refClose != nil {
		s.refClose()
	}
	if s.model != nil {
		s.model.Close()
	}
}

// loadInputs reads the text, the suite and the reference (tokenizer, template, saved logits).
func (s *runState) loadInputs() error {
	o := s.o
	switch {
	case o.Text != nil:
		s.text, s.textName = o.Text, o.TextName
	case o.TextPath != "":
		b, err := boundedread.ReadFile(o.TextPath, "text file", boundedread.MaxTextFile)
		if err != nil {
			return &Error{fmt.Errorf("--text: %w", err)}
		}
		s.text, s.textName = b, o.TextPath
	default:
		s.text, s.textName = builtinText, "built-in"
	}
	if s.textName == "" {
		s.textName = "text"
	}
	suite, err := LoadSuite(o.SuitePath)
	if err != nil {
		return &Error{fmt.Errorf("--toolcalls: %w", err)}
	}
	s.suite = suite
	switch {
	case o.ReferenceLogits != "":
		f, err := reflogits.ReadFile(o.ReferenceLogits)
		if err != nil {
			return &Error{err}
		}
		s.refFile = f
		if len(f.Header.Extra) > 0 {
			var ex refExtra
			if err := json.Unmarshal(f.Header.Extra, &ex); err != nil {
				return &Error{fmt.Errorf("%s: extra section: %v", o.ReferenceLogits, err)}
			}
			s.refExtra = &ex
		}
	case o.Reference != "":
		if isDir(o.Reference) {
			tok, err := tokenizer.LoadHF(o.Reference)
			if err != nil {
				return &Error{fmt.Errorf("reference tokenizer: %w", err)}
			}
			s.refTok, s.refTmpl = tok, tok.ChatTemplate()
		} else {
			m, err := gguf.Open(o.Reference)
			if err != nil {
				return &Error{fmt.Errorf("reference: %w", err)}
			}
			tok, err := tokenizerFromGGUF(m.Metadata())
			if err != nil {
				m.Close()
				return &Error{fmt.Errorf("reference %s: tokenizer: %w", o.Reference, err)}
			}
			s.refTok = tok
			s.refTmpl, _ = m.Metadata().GetString(tokenizer.KeyChatTemplate)
			m.Close()
		}
	}
	return nil
}

func (s *runState) loadReference() error {
	if s.ref != nil || s.o.Reference == "" {
		return nil
	}
	ro := RunOptions{Threads: s.o.Threads, CtxSize: s.ctxNeeded(s.refTok, s.refTmpl), Reference: true}
	s.p.logf("loading reference %s", s.o.Reference)
	var err error
	if isDir(s.o.Reference) {
		s.ref, s.refClose, err = OpenHFModel(s.o.Reference, ro)
	} else {
		s.ref, s.refClose, err = OpenGGUFModel(s.o.Reference, ro)
	}
	if err != nil {
		return &Error{fmt.Errorf("reference: %w", err)}
	}
	return nil
}

// ctxNeeded is the context a model needs: the perplexity window and the longest tool-call
// prompt plus the generation cap.
func (s *runState) ctxNeeded(tok *tokenizer.Tokenizer, tmpl string) int {
	n := s.o.Ctx
	if tok == nil || tmpl == "" || s.skipped(SectionToolCalls) {
		return n
	}
	r := newToolRunner(nil, tok, tmpl, s.o.ToolCallMaxTokens)
	for _, c := range s.suite.Cases {
		if _, toks, err := r.promptTokens(c.Conversation); err == nil {
			limit := s.o.ToolCallMaxTokens
			if c.MaxTokens > 0 {
				limit = c.MaxTokens
			}
			n = max(n, len(toks)+limit)
		}
	}
	return n
}

// integrity runs the integrity checks and opens the model.
func (s *runState) integrity(ctx context.Context) error {
	ir := &IntegrityReport{Files: shardPaths(s.o.Model), Full: s.o.Full}
	s.rep.Integrity = ir
	skip := s.skipped(SectionIntegrity)
	if skip {
		s.rep.Skipped[SectionIntegrity] = "--skip integrity"
	} else {
		s.p.logf("checking integrity of %s", s.o.Model)
		ir.Checks = append(ir.Checks, checkManifest(s.o.Model, ir.Files, s.o.RequireManifest))
		st := checkStructure(s.o.Model)
		ir.Checks = append(ir.Checks, st)
		if st.Status == StatusFail {
			s.skipRest("the model failed the structure check")
			return nil
		}
	}
	m, err := openModelChecked(s.o.Model)
	if err != nil {
		if skip {
			return &Error{err}
		}
		c := Check{Name: CheckStructure}
		c.fail("%v", err)
		ir.Checks = append(ir.Checks, c)
		s.skipRest("the model cannot be opened")
		return nil
	}
	s.model = m
	md := m.Metadata()
	s.template, _ = md.GetString(tokenizer.KeyChatTemplate)
	arch, _ := md.GetString("general.architecture")
	if skip {
		tok, err := tokenizerFromGGUF(md)
		if err != nil {
			return &Error{fmt.Errorf("%s: tokenizer: %w", s.o.Model, err)}
		}
		s.tok = tok
		s.runnable = slices.Contains(infer.SupportedArchitectures(), arch)
		return nil
	}
	ir.Checks = append(ir.Checks, checkTypes(m))
	mc, tok := checkMetadata(m)
	ir.Checks = append(ir.Checks, mc)
	ir.Checks = append(ir.Checks, checkTurboQuant(m))
	if s.o.QuantizeConfig != "" {
		ir.Checks = append(ir.Checks, checkQuantizeConfig(m, s.o.QuantizeConfig))
	}
	s.tok = tok
	vo := valueOptions{Full: s.o.Full, SampleRows: s.o.SampleRows, Progress: s.p.bar("decoding tensors")}
	if s.o.Reference != "" {
		var wr weightReader
		rotation, _ := m.Metadata().GetString(rotate.MetaKey)
		if isDir(s.o.Reference) {
			w, err := openHFWeights(s.o.Reference, rotation)
			if err != nil {
				return &Error{fmt.Errorf("reference: %w", err)}
			}
			wr = w
		} else {
			rm, err := gguf.Open(s.o.Reference)
			if err != nil {
				return &Error{fmt.Errorf("reference: %w", err)}
			}
			if rr, _ := rm.Metadata().GetString(rotate.MetaKey); rr != rotation {
				rm.Close()
				return &Error{fmt.Errorf("reference %s: rotation %q, the file's is %q: their tensors cannot be compared (give the Hugging Face folder)", s.o.Reference, rr, rotation)}
			}
			wr = ggufWeights{rm}
		}
		defer wr.close()
		vo.Ref = wr
		if s.o.Imatrix != "" {
			im, err := imatrix.LoadMeans(s.o.Imatrix)
			if err != nil {
				return &Error{fmt.Errorf("--imatrix: %w", err)}
			}
			vo.Importance = im
		}
	} else if s.o.Imatrix != "" {
		s.rep.Warnings = append(s.rep.Warnings, "--imatrix needs --reference (weights to compare); layer sensitivity not computed")
	}
	vc, stats, err := checkValues(ctx, m, vo)
	if err != nil {
		return err
	}
	ir.Checks = append(ir.Checks, vc)
	ir.Tensors = stats
	s.rep.Layers = layerStats(stats)
	switch {
	case mc.Status == StatusFail || tok == nil:
		s.skipRest("the model failed the metadata check")
	case !slices.Contains(infer.SupportedArchitectures(), arch):
		s.skipRest(fmt.Sprintf("tq cannot run architecture %q", arch))
	case vc.Status == StatusFail:
		s.skipRest("the model has NaN/Inf weights")
	default:
		s.runnable = true
	}
	return nil
}

func (s *runState) skipRest(reason string) {
	for _, sec := range []string{SectionTemplate, SectionPPL, SectionKLD, SectionToolCalls} {
		if _, ok := s.rep.Skipped[sec]; !ok {
			s.rep.Skipped[sec] = reason
		}
	}
}

// evaluations runs fidelity, perplexity/KLD and tool calls.
func (s *runState) evaluations(ctx context.Context) error {
	o := s.o
	hasRef := o.Reference != "" || o.ReferenceLogits != ""
	// template and tokenizer fidelity
	switch {
	case s.skipped(SectionTemplate):
		s.rep.Skipped[SectionTemplate] = "--skip template"
	case !hasRef:
		s.rep.Skipped[SectionTemplate] = "no reference"
	case s.template == "":
		s.rep.Fidelity = &FidelityReport{Mismatches: []Mismatch{{"", "template", "the model has no tokenizer.chat_template"}}}
	default:
		side, ok := s.referenceSide()
		if !ok {
			s.rep.Skipped[SectionTemplate] = "the saved reference has no chat template"
		} else if side.template == "" {
			s.rep.Fidelity = &FidelityReport{Mismatches: []Mismatch{{"", "template", "the reference has no chat template"}}}
		} else {
			s.p.logf("comparing chat template and tokenizer with the reference")
			s.rep.Fidelity = checkFidelity(s.template, s.tok, side, s.suite.AllConversations(), string(s.text))
		}
	}
	// the model
	cache := o.CacheType
	if cache == "auto" {
		cache, _ = s.model.Metadata().GetString("turboquant.kv_cache_dtype")
	}
	if cache == "" {
		cache = "f16"
	}
	needPPL := !s.skipped(SectionPPL) || (!s.skipped(SectionKLD) && hasRef)
	needTools := !s.skipped(SectionToolCalls) && s.template != "" && len(s.suite.Cases) > 0
	if needPPL || needTools {
		s.p.logf("loading %s (KV cache %s)", o.Model, cache)
		lm, closeFn, err := OpenGGUFModel(o.Model, RunOptions{Threads: o.Threads, CtxSize: s.ctxNeeded(s.tok, s.template), CacheType: cache})
		if err != nil {
			return &Error{err}
		}
		s.modelLM, s.modelClose = lm, closeFn
	}
	if needPPL {
		if err := s.perplexity(ctx); err != nil {
			return err
		}
	} else {
		s.rep.Skipped[SectionPPL] = "--skip ppl"
	}
	if _, ok := s.rep.Skipped[SectionKLD]; !ok && s.rep.KLD == nil {
		switch {
		case s.skipped(SectionKLD):
			s.rep.Skipped[SectionKLD] = "--skip kld"
		case !hasRef:
			s.rep.Skipped[SectionKLD] = "no reference"
		}
	}
	switch {
	case s.skipped(SectionToolCalls):
		s.rep.Skipped[SectionToolCalls] = "--skip toolcalls"
	case s.template == "":
		s.rep.Skipped[SectionToolCalls] = "the model has no chat template"
	case len(s.suite.Cases) == 0:
		s.rep.Skipped[SectionToolCalls] = "the suite has no tool-call cases"
	default:
		if err := s.toolCalls(ctx, cache); err != nil {
			return err
		}
	}
	return s.saveReference()
}

// referenceSide returns the reference's template and tokenizer for the fidelity check.
func (s *runState) referenceSide() (refSide, bool) {
	if s.refTok != nil {
		return refSide{template: s.refTmpl, tok: s.refTok, tokHash: s.refTok.Hash(),
			bos: specialText(s.refTok, s.refTok.BOS()), eos: specialText(s.refTok, s.refTok.EOS())}, true
	}
	if s.refExtra == nil {
		return refSide{}, false
	}
	hashes := s.refExtra.TokenHashes
	if s.refFile != nil && s.refFile.Header.TextSHA256 != sha256Hex(string(s.text)) {
		hashes = maps1(hashes, textKey) // a different text: its tokens cannot be compared
	}
	return refSide{template: s.refExtra.ChatTemplate, tokenHashes: hashes, tokHash: s.refExtra.TokenizerHash,
		bos: s.refExtra.BOS, eos: s.refExtra.EOS}, true
}

// maps1 returns m without key.
func maps1(m map[string]string, key string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// windows tokenizes the text like llama-perplexity (add_special, no special parsing) with the
// reference's tokenizer when there is one, else the model's.
func (s *runState) windows() (*Windows, int, string, error) {
	if f := s.refFile; f != nil {
		if f.Header.TextSHA256 != "" && f.Header.TextSHA256 != sha256Hex(string(s.text)) {
			if s.o.TextPath != "" || s.o.Text != nil {
				return nil, 0, "", usageErr("--reference-logits %s was computed on a different text than %s", s.o.ReferenceLogits, s.textName)
			}
			s.rep.Warnings = append(s.rep.Warnings, "the saved reference was computed on another text; its stored windows are used")
		}
		if s.o.Ctx != f.Header.NCtx && s.o.Ctx != DefaultCtx {
			return nil, 0, "", usageErr("--ctx %d differs from the saved reference's %d", s.o.Ctx, f.Header.NCtx)
		}
		w := &Windows{NCtx: f.Header.NCtx, AddBOS: f.Header.AddBOS, BOS: f.Header.BOS, Tokens: f.Tokens}
		return w, len(f.Tokens), "reference", nil
	}
	tok, who := s.tok, "model"
	if s.refTok != nil {
		tok, who = s.refTok, "reference"
	}
	toks := tok.Encode(string(s.text), tokenizer.EncodeOptions{AddSpecial: true})
	w, err := CutWindows(toks, s.o.Ctx, s.o.Chunks, tok.AddBOS(), tok.BOS())
	if err != nil {
		return nil, 0, "", &Error{fmt.Errorf("%s: %w", s.textName, err)}
	}
	return w, len(toks), who, nil
}

func (s *runState) perplexity(ctx context.Context) error {
	w, ntext, who, err := s.windows()
	if err != nil {
		return err
	}
	in := evalInput{Model: s.modelLM, Windows: w, RefFile: s.refFile}
	if !s.skipped(SectionKLD) || s.o.SaveReference != "" {
		if err := s.loadReference(); err != nil {
			return err
		}
		in.Ref = s.ref
	}
	if s.o.SaveReference != "" {
		in.SaveTopK = s.o.TopK
	}
	if s.skipped(SectionKLD) && s.o.SaveReference == "" {
		in.RefFile = nil
	}
	s.p.logf("perplexity: %d windows of %d tokens (%s tokenizer)", w.N(), w.NCtx, who)
	in.Progress = s.p.bar("perplexity")
	out, err := evaluate(ctx, in)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return &Error{err}
	}
	out.ppl.Text, out.ppl.TextSHA256, out.ppl.TextTokens, out.ppl.Tokenizer = s.textName, sha256Hex(string(s.text)), ntext, who
	if s.skipped(SectionPPL) {
		s.rep.Skipped[SectionPPL] = "--skip ppl"
	} else {
		s.rep.Perplexity = out.ppl
	}
	if s.skipped(SectionKLD) {
		s.rep.Skipped[SectionKLD] = "--skip kld"
	} else {
		s.rep.KLD = out.kld
	}
	if out.saved != nil {
		s.pendingSave = out.saved
		s.pendingSave.Header.TextSHA256 = sha256Hex(string(s.text))
	}
	return nil
}

func (s *runState) toolCalls(ctx context.Context, cache string) error {
	r := newToolRunner(s.modelLM, s.tok, s.template, s.o.ToolCallMaxTokens)
	rep := &ToolCallReport{Suite: s.suite.Name, CacheType: cache, MaxTokens: s.o.ToolCallMaxTokens}
	bar := s.p.bar("tool calls")
	s.p.logf("tool calls: %d cases", len(s.suite.Cases))
	for i, c := range s.suite.Cases {
		res, err := r.runCase(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &Error{err}
		}
		rep.Results = append(rep.Results, res)
		if bar != nil {
			bar(i+1, len(s.suite.Cases))
		}
	}
	// the reference's calls
	var refResults []CaseResult
	switch {
	case s.o.Reference != "":
		if s.refTmpl == "" {
			s.rep.Warnings = append(s.rep.Warnings, "the reference has no chat template: tool-call exact match not computed")
			break
		}
		if err := s.loadReference(); err != nil {
			return err
		}
		rr := newToolRunner(s.ref, s.refTok, s.refTmpl, s.o.ToolCallMaxTokens)
		rbar := s.p.bar("reference tool calls")
		for i, c := range s.suite.Cases {
			res, err := rr.runCase(ctx, c)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return &Error{fmt.Errorf("reference: %w", err)}
			}
			refResults = append(refResults, res)
			if rbar != nil {
				rbar(i+1, len(s.suite.Cases))
			}
		}
		s.refCalls = refResults
	case s.refExtra != nil && len(s.refExtra.ToolCalls) > 0:
		if s.refExtra.SuiteSHA256 != s.suite.SHA256 {
			s.rep.Warnings = append(s.rep.Warnings, "the saved reference used another tool-call suite: exact match not computed")
			break
		}
		refResults = s.refExtra.ToolCalls
		for i := range refResults {
			refResults[i].Calls = refCallsFromJSON(refResults[i].Calls)
		}
	}
	if refResults != nil {
		byID := map[string]CaseResult{}
		for _, r := range refResults {
			byID[r.ID] = r
		}
		for i := range rep.Results {
			ref, ok := byID[rep.Results[i].ID]
			if !ok {
				continue
			}
			m := callsEqual(rep.Results[i].Calls, ref.Calls)
			rep.Results[i].Match = &m
			rep.Results[i].RefCalls = ref.Calls
		}
		rep.Reference = summaryOf(refResults)
	}
	rep.summarize()
	s.rep.ToolCalls = rep
	return nil
}

// referenceOnly evaluates the reference alone and saves it (no model, no gates).
func (s *runState) referenceOnly(ctx context.Context) error {
	if err := s.loadReference(); err != nil {
		return err
	}
	tok := s.refTok
	toks := tok.Encode(string(s.text), tokenizer.EncodeOptions{AddSpecial: true})
	w, err := CutWindows(toks, s.o.Ctx, s.o.Chunks, tok.AddBOS(), tok.BOS())
	if err != nil {
		return &Error{fmt.Errorf("%s: %w", s.textName, err)}
	}
	s.p.logf("reference: %d windows of %d tokens", w.N(), w.NCtx)
	out, err := evaluate(ctx, evalInput{Ref: s.ref, Windows: w, SaveTopK: s.o.TopK, Progress: s.p.bar("reference")})
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		return &Error{err}
	}
	s.pendingSave = out.saved
	s.pendingSave.Header.TextSHA256 = sha256Hex(string(s.text))
	if !s.skipped(SectionToolCalls) && s.refTmpl != "" && len(s.suite.Cases) > 0 {
		rr := newToolRunner(s.ref, s.refTok, s.refTmpl, s.o.ToolCallMaxTokens)
		for _, c := range s.suite.Cases {
			res, err := rr.runCase(ctx, c)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return &Error{fmt.Errorf("reference: %w", err)}
			}
			s.refCalls = append(s.refCalls, res)
		}
	}
	s.rep.Verdict = VerdictSaved
	return s.saveReference()
}

// saveReference writes the pending reference file with the reference's template, token
// hashes and tool-call results.
func (s *runState) saveReference() error {
	if s.o.SaveReference == "" {
		return nil
	}
	f := s.pendingSave
	if f == nil {
		return usageErr("--save-reference: perplexity was skipped, nothing to save")
	}
	ex := refExtra{ChatTemplate: s.refTmpl, TokenizerHash: s.refTok.Hash(), SuiteSHA256: s.suite.SHA256,
		BOS: specialText(s.refTok, s.refTok.BOS()), EOS: specialText(s.refTok, s.refTok.EOS()),
		TokenHashes: map[string]string{}, ToolCalls: s.refCalls}
	for _, c := range s.suite.AllConversations() {
		if s.refTmpl == "" {
			break
		}
		if text, err := render(s.refTmpl, c, ex.BOS, ex.EOS); err == nil {
			ex.TokenHashes[c.ID] = tokensHash(s.refTok.Encode(text, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true}))
		}
	}
	ex.TokenHashes[textKey] = tokensHash(s.refTok.Encode(string(s.text), tokenizer.EncodeOptions{AddSpecial: true}))
	b, err := json.Marshal(ex)
	if err != nil {
		return &Error{err}
	}
	f.Header.Extra = b
	f.Header.TokenizerHash = ex.TokenizerHash
	f.Header.Reference = filepath.Base(filepath.Clean(s.o.Reference))
	f.Header.TQVersion = s.o.TQVersion
	if err := reflogits.WriteFile(s.o.SaveReference, f); err != nil {
		return &Error{fmt.Errorf("--save-reference: %w", err)}
	}
	s.rep.SavedReference = s.o.SaveReference
	s.p.logf("saved reference logits (top %d) to %s", f.Header.TopK, s.o.SaveReference)
	return nil
}
