// Package convert turns a model into a GGUF file that llama.cpp loads unchanged: a Hugging
// Face folder read through internal/modelsrc (Convert), or a GGUF file (Requantize).
//
// It plans and writes. The type of every tensor comes from internal/convert/policy (llama.cpp
// presets, turboquant) and the size budget (budget.go); the output metadata is the source's
// plus the type and provenance keys. The pipeline streams: tensors are read row-chunk by
// row-chunk from the source, encoded by a pool of goroutines and written in order through
// gguf.Writer (atomic, optionally split, SHA256SUMS), so memory stays bounded whatever the
// model size.
package convert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/imatrix"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/internal/rotate"
	"github.com/tq-project/tq/internal/safetensors"
	"github.com/tq-project/tq/quant"
)

// Result describes a finished conversion.
type Result struct {
	Plan     *Plan              `json:"plan"`
	Files    []gguf.WrittenFile `json:"files"`
	Manifest string             `json:"manifest,omitempty"`
	Seconds  float64            `json:"seconds"`
}

// Convert converts the HF model folder dir into the GGUF file out (or shards next to it).
// On any error, or when ctx is cancelled, nothing named like the output is left behind.
func Convert(ctx context.Context, dir, out string, opts Options) (*Result, error) {
	start := time.Now()
	src, err := modelsrc.OpenHF(dir)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	plan, err := planHF(src, &opts.Types, opts.Name, opts.Version, opts.Report.Warn)
	if err != nil {
		return nil, err
	}
	res := &Result{Plan: plan}
	files, manifest, err := writePlan(ctx, plan, out, &opts.Output, opts.Report.Progress)
	if err != nil {
		return nil, err
	}
	res.Files, res.Manifest = files, manifest
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// PlanConvert computes what Convert would write without writing anything (--dry-run).
func PlanConvert(dir string, opts Options) (*Plan, error) {
	src, err := modelsrc.OpenHF(dir)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return planHF(src, &opts.Types, opts.Name, opts.Version, opts.Report.Warn)
}

// ImportanceSource supplies per-column importance weights (the mean squared input activation
// of every input column, as llama.cpp's imatrix holds them) for a GGUF tensor. expert is the
// index of the matrix inside a stacked 3-D tensor (ffn_*_exps), 0 for ordinary 2-D weights.
// The calibration stage implements it; so does imatrix.Means for GGUF imatrix files.
type ImportanceSource interface {
	Importance(ggufTensorName string, expert int) ([]float32, bool)
}

// importanceLookup resolves the importance of a tensor's matrices from the configured sources.
type importanceLookup struct {
	src ImportanceSource
	im  *imatrix.Means
	// rot, when set, rotates the importance of the residual's readers (TypeOptions.Rotate)
	rot *rotate.Source
}

func (l *importanceLookup) enabled() bool { return l != nil && (l.src != nil || l.im != nil) }

// forTensor returns an importance function for the tensor, or nil when no source knows it.
// For a rotated reader of the residual the importance is rotated with it (only its diagonal
// is known: rotate.Rotation.Importance).
func (l *importanceLookup) forTensor(name string, cols int64) (func(int64) ([]float32, error), error) {
	f, err := l.forTensorUnrotated(name, cols)
	if f == nil || err != nil || l.rot == nil {
		return f, err
	}
	kind, norm := l.rot.Plan(name)
	if kind != rotate.Reader {
		return f, nil
	}
	q := l.rot.Rotation()
	if int64(q.Dim()) != cols {
		return nil, fmt.Errorf("importance for %s: rows of %d columns, the rotation is of %d", name, cols, q.Dim())
	}
	return func(m int64) ([]float32, error) {
		v, err := f(m)
		if err != nil {
			return nil, err
		}
		return q.Importance(v, norm), nil
	}, nil
}

func (l *importanceLookup) forTensorUnrotated(name string, cols int64) (func(int64) ([]float32, error), error) {
	if !l.enabled() {
		return nil, nil
	}
	if l.src != nil {
		if v, ok := l.src.Importance(name, 0); ok {
			if int64(len(v)) != cols {
				return nil, fmt.Errorf("importance for %s has %d values, tensor rows have %d", name, len(v), cols)
			}
			src := l.src
			return func(m int64) ([]float32, error) {
				v, ok := src.Importance(name, int(m))
				if !ok || int64(len(v)) != cols {
					return nil, fmt.Errorf("importance for %s matrix %d missing or of wrong length", name, m)
				}
				return v, nil
			}, nil
		}
	}
	if l.im != nil {
		if _, ok, err := l.im.ImportanceFor(name, 0, int(cols)); err != nil {
			return nil, err
		} else if ok {
			im := l.im
			return func(m int64) ([]float32, error) {
				v, _, err := im.ImportanceFor(name, int(m), int(cols))
				return v, err
			}, nil
		}
	}
	return nil, nil
}

func (o *TypeOptions) loadImportance(p *Plan, configImatrix string) (*importanceLookup, error) {
	l := &importanceLookup{src: o.Importance}
	path := o.IMatrixPath
	if path == "" {
		path = configImatrix
	}
	if path != "" {
		im, err := imatrix.LoadMeans(path)
		if err != nil {
			return nil, err
		}
		im.Filter(o.IMatrixInclude, o.IMatrixExclude)
		l.im = im
		p.metadata = append(p.metadata, imatrixProvenance(im)...)
	}
	return l, nil
}

func policyTensors(descs []modelsrc.TensorDesc) []policy.Tensor {
	ts := make([]policy.Tensor, len(descs))
	for i, d := range descs {
		ts[i] = policy.Tensor{Name: d.Name, Shape: d.Shape, Sources: trimWeight(d.Sources)}
		ts[i].Type = policy.ConverterFloatType(ts[i], gguf.TypeF16)
	}
	return ts
}

func trimWeight(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = strings.TrimSuffix(x, ".weight")
	}
	return out
}

// rowsOf returns the number of rows of a ggml shape (a row has shape[0] elements) and the
// rows of one matrix (shape[1]; a stacked 3-D tensor holds shape[2] matrices).
func rowsOf(shape []int64) (rows, perMatrix int64) {
	rows, perMatrix = 1, 1
	for _, d := range shape[min(1, len(shape)):] {
		rows *= d
	}
	if len(shape) >= 2 {
		perMatrix = shape[1]
	}
	return rows, perMatrix
}

// outputMetadata is the source's metadata without the keys the planner sets once the types
// are known (general.file_type, general.quantization_version), with general.name replaced
// when name is set.
func outputMetadata(src gguf.Metadata, name string) gguf.Metadata {
	md := src.Clone()
	md.Delete("general.file_type")
	md.Delete("general.quantization_version")
	if name != "" {
		md.Set("general.name", gguf.String(name))
	}
	return md
}

// planHF plans the conversion of an HF model: types (t), metadata with general.name (name, ""
// for the folder's name) and the provenance of tq version, warnings passed to warn as well.
func planHF(hf *modelsrc.HFSource, t *TypeOptions, name, version string, warn func(string)) (*Plan, error) {
	info := hf.Info()
	var src modelsrc.TensorSource = hf
	var rs *rotate.Source
	if t.Rotate {
		var err error
		seed := cmp.Or(t.RotateSeed, rotate.DefaultSeed)
		if rs, err = rotate.Wrap(hf, seed); err != nil {
			return nil, fmt.Errorf("--rotate: %w", err)
		}
		src = rs
		tc := *t // the calibration's matrices, rotated with the weights
		if tc.Hessians != nil {
			tc.Hessians = rotatedHessians{src: tc.Hessians, rs: rs}
		}
		t = &tc
	}
	descs := src.Tensors()
	p := &Plan{Input: info.Dir, Arch: info.Arch, onWarn: warn, hessPool: newHessianPool()}
	if rs != nil {
		p.Rotation = rs.Rotation().Spec().String()
	}
	p.metadata = outputMetadata(src.Metadata(), name)
	for _, d := range descs {
		if strings.Contains(d.Name, "_shexp") && !info.SharedExperts {
			p.warn("the checkpoint has shared-expert tensors (%s, ...): llama.cpp's %s architecture has no shared experts and will refuse this file", d.Name, info.Arch)
			break
		}
	}
	if info.Skipped > 0 {
		p.warn("skipped %d vision/audio tensor(s) (e.g. %s): the GGUF holds the text model only; llama.cpp's converter writes the multimodal tower to a separate mmproj file, which tq does not produce", info.Skipped, info.SkippedExample)
	}
	ts := policyTensors(descs)
	model := policy.Model{Arch: info.Arch, NLayer: info.Blocks, NHead: info.Heads, NHeadKV: info.HeadsKV, NExpert: info.Experts}

	decisions, ftype, cfgImatrix, err := decide(p, model, ts, t, version, info.SourceDType, info.Dir)
	if err != nil {
		return nil, err
	}
	imp, err := t.loadImportance(p, cfgImatrix)
	if err != nil {
		return nil, err
	}
	imp.rot = rs
	reads := make([]func(r0, n int64, dst []float32) error, len(descs))
	rpm := make([]int64, len(descs))
	for i, d := range descs {
		name := d.Name
		reads[i] = func(r0, n int64, dst []float32) error { return src.ReadRows(name, r0, n, dst) }
		_, rpm[i] = rowsOf(d.Shape)
	}
	if t.TargetBPW > 0 || t.MaxSize > 0 {
		decisions, err = solveBudget(p, model, ts, decisions, reads, rpm, imp, t)
		if err != nil {
			return nil, err
		}
		// The budget replaced the preset's types: the preset's name no longer describes them.
		ftype = mixtureFileType(decisionTypes(ts, decisions))
	}
	p.FileType = ftype.String()
	p.metadata.Set("general.file_type", gguf.Uint32(uint32(ftype)))
	p.metadata.Set("general.quantization_version", gguf.Uint32(2))

	for i, td := range descs {
		d := decisions[i]
		rows, _ := rowsOf(td.Shape)
		j := &job{name: td.Name, shape: td.Shape, rows: rows, cols: ts[i].Cols(), rowsPerMatrix: rpm[i],
			typ: d.Type, read: reads[i]}
		if t.Improved || d.Weighted {
			j.mode = quant.ModeImproved
		}
		if err := attachImportance(p, j, d, imp); err != nil {
			return nil, err
		}
		if d.Quantize {
			attachHessian(j, t.Hessians, p.hessPool)
			if hs, ok := t.Hessians.(HeadHessianSource); ok {
				attachHeads(j, ts[i], ts, hs)
			}
		}
		nb, err := j.nbytes()
		if err != nil {
			return nil, err
		}
		p.Tensors = append(p.Tensors, PlanTensor{Name: td.Name, Type: d.Type.String(), Shape: td.Shape, Bytes: nb,
			Rule: d.Rule, SourceType: td.SourceType, Sources: td.Sources, Importance: j.importance != nil, Hessian: j.hessian != nil})
		if d.Fallback {
			p.Fallbacks++
		}
		p.jobs = append(p.jobs, j)
	}
	p.finish()
	return p, nil
}

func attachImportance(p *Plan, j *job, d policy.Decision, imp *importanceLookup) error {
	tr, _ := d.Type.Traits()
	if !tr.Quantized || !imp.enabled() || !d.Quantize {
		return nil
	}
	f, err := imp.forTensor(j.name, j.cols)
	if err != nil {
		if policy.CategoryOf(j.name) == policy.CatTokenEmbd {
			p.warn("%v; quantizing %s without importance", err, j.name)
			return nil
		}
		return err
	}
	j.importance = f
	return nil
}

// decide runs the selected policy. It returns the decisions (in ts order), the file type and
// the config's imatrix path (turboquant). A preset's file type is the preset, whatever tensors
// --tensor-type and the mixture rules change, as llama-quantize writes the requested ftype
// (llama_model_quantize_impl in src/llama-quant.cpp); turboquant's is mixtureFileType's.
// version is the tq version turboquant's provenance keys record.
func decide(p *Plan, model policy.Model, ts []policy.Tensor, opts *TypeOptions, version string, srcDType safetensors.DType, dir string) ([]policy.Decision, policy.FileType, string, error) {
	if opts.TurboQuant {
		p.Policy = "turboquant"
		cfgPath := opts.ConfigPath
		if cfgPath == "" && dir != "" {
			if _, err := os.Stat(filepath.Join(dir, "quantize_config.json")); err == nil {
				cfgPath = filepath.Join(dir, "quantize_config.json")
			}
		}
		var cfg *policy.TurboConfig
		if cfgPath == "" {
			cfg = policy.DefaultTurboConfig()
			p.warn("no quantize_config.json (run `tq calibrate` first): using the default turboquant policy without importance weights")
		} else {
			var err error
			cfg, err = policy.LoadTurboConfig(cfgPath)
			if err != nil {
				return nil, 0, "", err
			}
			for _, k := range cfg.Unknown {
				p.warn("%s: unknown key %q ignored", cfgPath, k)
			}
		}
		tp := &policy.TurboPolicy{Config: cfg, Force: opts.Force}
		if opts.EmbeddingType != "" {
			t, err := gguf.ParseType(opts.EmbeddingType)
			if err != nil {
				return nil, 0, "", fmt.Errorf("--embedding-type: %w", err)
			}
			tp.EmbeddingType = &t
		}
		ds, err := tp.Assign(ts)
		if err != nil {
			if cfgPath != "" {
				return nil, 0, "", fmt.Errorf("quantize config %s: %w", cfgPath, err)
			}
			return nil, 0, "", fmt.Errorf("quantize config: %w", err)
		}
		for _, w := range tp.Warnings {
			p.warn("%s: %s", cmp.Or(cfgPath, "default turboquant policy"), w)
		}
		if opts.Force {
			if err := cfg.CheckSkipsLMHead(false); err != nil {
				p.warn("--force: quantizing lm_head although turboquant keeps it in F16")
			}
		}
		addTurboProvenance(&p.metadata, cfg, cfgPath, version)
		imPath, err := configImatrixPath(cfgPath, cfg.Imatrix)
		if err != nil {
			return nil, 0, "", err
		}
		return ds, mixtureFileType(decisionTypes(ts, ds)), imPath, nil
	}
	p.Policy = "preset"
	name := opts.OutType
	if name == "" || strings.EqualFold(name, "auto") {
		name = "f16"
		if srcDType == safetensors.BF16 {
			name = "bf16"
		}
	}
	ft, err := policy.ParseFileType(name)
	if err != nil {
		return nil, 0, "", err
	}
	if ft.IsFloat() {
		ds := make([]policy.Decision, len(ts))
		for i, t := range ts {
			ds[i] = policy.Decision{Name: t.Name, Type: policy.ConverterFloatType(t, ft.DefaultType()), Quantize: true, Rule: "outtype " + strings.ToLower(ft.String())}
		}
		if len(opts.Overrides) > 0 || opts.OutputTensorType != "" || opts.TokenEmbeddingType != "" {
			// --tensor-type and friends quantize chosen tensors of a float file (e.g. one
			// layer class in Q4_K, the rest F16, to measure what that class costs).
			mix, err := opts.mixture(ft)
			if err != nil {
				return nil, 0, "", err
			}
			mix.HasImatrix = opts.IMatrixPath != "" || opts.Importance != nil
			fds, err := mix.Assign(model, ts)
			if err != nil {
				return nil, 0, "", err
			}
			for i := range ds {
				if fds[i].Fixed {
					ds[i] = fds[i]
				}
			}
		}
		return ds, ft, "", nil
	}
	mix, err := opts.mixture(ft)
	if err != nil {
		return nil, 0, "", err
	}
	mix.HasImatrix = opts.IMatrixPath != "" || opts.Importance != nil
	ds, err := mix.Assign(model, ts)
	if err != nil {
		return nil, 0, "", err
	}
	return ds, ft, "", nil
}

func (o *TypeOptions) mixture(ft policy.FileType) (*policy.Mixture, error) {
	mix := policy.NewMixture(ft)
	mix.Pure = o.Pure
	mix.LeaveOutput = o.LeaveOutput
	for _, s := range o.Overrides {
		ov, err := policy.ParseOverride(s)
		if err != nil {
			return nil, err
		}
		mix.Overrides = append(mix.Overrides, ov)
	}
	if o.OutputTensorType != "" {
		t, err := gguf.ParseType(o.OutputTensorType)
		if err != nil {
			return nil, fmt.Errorf("--output-tensor-type: %w", err)
		}
		mix.OutputType = t
	}
	if o.TokenEmbeddingType != "" {
		t, err := gguf.ParseType(o.TokenEmbeddingType)
		if err != nil {
			return nil, fmt.Errorf("--token-embedding-type: %w", err)
		}
		mix.TokenEmbeddingType = t
	}
	return mix, nil
}

// writePlan writes the plan's tensors to out, passing bytes written and the total to progress
// (nil: no reports).
func writePlan(ctx context.Context, p *Plan, out string, opts *OutputOptions, progressTo func(done, total int64)) (files []gguf.WrittenFile, manifest string, err error) {
	if p.jobs == nil && len(p.Tensors) > 0 {
		return nil, "", errors.New("plan has no tensor sources")
	}
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	w, err := gguf.Create(out, gguf.WriterOptions{MaxShardBytes: uint64(max(0, opts.SplitMaxSize)),
		MaxShardTensors: opts.SplitMaxTensors, NoManifest: opts.NoManifest, BufferSize: 4 << 20})
	if err != nil {
		return nil, "", fmt.Errorf("output %s: %w", out, err)
	}
	defer func() {
		if err != nil {
			w.Abort()
		}
	}()
	w.Metadata = p.metadata.Clone()
	for _, j := range p.jobs {
		dims := make([]uint64, len(j.shape))
		for i, d := range j.shape {
			dims[i] = uint64(d)
		}
		if err := w.AddTensor(j.name, dims, j.typ); err != nil {
			return nil, "", fmt.Errorf("output %s: %w", out, err)
		}
	}
	var progress func(int64)
	if progressTo != nil {
		total := p.Bytes
		progress = func(done int64) { progressTo(done, total) }
	}
	for _, j := range p.jobs {
		if j.hessians != nil {
			// a few matrices per encoding goroutine stay factorised (hessian.go)
			j.hessians.keep = max(2, opts.Threads+2)
		}
	}

	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	if err := runEngine(ctx, w, p.jobs, engineOptions{threads: threads, progress: progress}); err != nil {
		return nil, "", err
	}
	if err := w.Close(); err != nil {
		return nil, "", fmt.Errorf("output %s: %w", out, err)
	}
	return w.Files(), w.ManifestPath(), nil
}
