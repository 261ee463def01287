package convert

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
)

// RequantizeOptions adds llama-quantize's options to Options for GGUF -> GGUF.
type RequantizeOptions struct {
	Options
	// AllowRequantize permits re-encoding tensors that are already quantized (lossy twice).
	AllowRequantize bool
}

// ggufModel is an opened GGUF input.
type ggufModel struct {
	path string
	m    *gguf.Model
}

// Requantize rewrites the GGUF model in (one file or the first shard of a split model) with
// the preset, imatrix and overrides of opts, like llama-quantize: tensors whose type does not
// change are copied byte for byte, others are decoded to float32 and re-encoded; the output
// order is llama-quantize's (layer, then name). Nothing is left at out on error or cancel.
func Requantize(ctx context.Context, in, out string, opts RequantizeOptions) (*Result, error) {
	start := time.Now()
	g, err := gguf.Open(in)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	p, err := planGGUF(&ggufModel{path: in, m: g}, &opts.Types, opts.AllowRequantize, opts.Version, opts.Report.Warn)
	if err != nil {
		return nil, err
	}
	files, manifest, err := writePlan(ctx, p, out, &opts.Output, opts.Report.Progress)
	if err != nil {
		return nil, err
	}
	return &Result{Plan: p, Files: files, Manifest: manifest, Seconds: time.Since(start).Seconds()}, nil
}

// PlanRequantize computes what Requantize would write (--dry-run).
func PlanRequantize(in string, opts RequantizeOptions) (*Plan, error) {
	g, err := gguf.Open(in)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	return planGGUF(&ggufModel{path: in, m: g}, &opts.Types, opts.AllowRequantize, opts.Version, opts.Report.Warn)
}

func ggufModelInfo(md gguf.Metadata) (policy.Model, error) {
	arch, err := md.GetString("general.architecture")
	if err != nil {
		return policy.Model{}, fmt.Errorf("general.architecture: %w", err)
	}
	geti := func(key string, required bool) (int, error) {
		v, err := md.GetUint(arch + "." + key)
		if err != nil {
			if !required {
				// per-layer arrays: use the first element
				if a, err2 := md.GetArray(arch + "." + key); err2 == nil && a.Len() > 0 {
					if u, ok := a.Index(0).AsUint(); ok {
						return int(u), nil
					}
				}
				return 0, nil
			}
			return 0, fmt.Errorf("%s.%s: %w", arch, key, err)
		}
		if v > 1<<24 {
			return 0, fmt.Errorf("%s.%s = %d is out of range", arch, key, v)
		}
		return int(v), nil
	}
	m := policy.Model{Arch: arch}
	if m.NLayer, err = geti("block_count", true); err != nil {
		return m, err
	}
	if m.NHead, err = geti("attention.head_count", false); err != nil {
		return m, err
	}
	if m.NHeadKV, err = geti("attention.head_count_kv", false); err != nil {
		return m, err
	}
	if m.NHeadKV == 0 {
		m.NHeadKV = m.NHead
	}
	if m.NExpert, err = geti("expert_count", false); err != nil {
		return m, err
	}
	return m, nil
}

// planGGUF plans the requantization of a GGUF model: types (o; allowRequantize permits
// re-encoding quantized tensors), the tq version for turboquant's provenance, warnings passed
// to warn as well.
func planGGUF(g *ggufModel, o *TypeOptions, allowRequantize bool, version string, warn func(string)) (*Plan, error) {
	md := g.m.Metadata().Clone()
	model, err := ggufModelInfo(md)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", g.path, err)
	}
	p := &Plan{Input: g.path, Arch: model.Arch, onWarn: warn}
	tensors := g.m.Tensors()
	ts := make([]policy.Tensor, len(tensors))
	for i, t := range tensors {
		shape := make([]int64, len(t.Dims))
		for k, d := range t.Dims {
			if d > math.MaxInt64/2 {
				return nil, fmt.Errorf("%s: tensor %s has an absurd dimension %d", g.path, t.Name, d)
			}
			shape[k] = int64(d)
		}
		ts[i] = policy.Tensor{Name: t.Name, Shape: shape, Type: t.Type}
	}
	policy.SortTensors(ts)
	for _, k := range []string{gguf.KeySplitNo, gguf.KeySplitCount, gguf.KeySplitTensorsCount, "general.quantization_version", "general.file_type"} {
		md.Delete(k)
	}
	p.metadata = md
	if !o.TurboQuant && (o.OutType == "" || strings.EqualFold(o.OutType, "auto")) {
		return nil, fmt.Errorf("requantize needs a target type (e.g. q4_k_m)")
	}
	ds, ftype, cfgImatrix, err := decide(p, model, ts, o, version, 0, "")
	if err != nil {
		return nil, err
	}
	imp, err := o.loadImportance(p, cfgImatrix)
	if err != nil {
		return nil, err
	}
	reads := make([]func(r0, n int64, dst []float32) error, len(ts))
	rpm := make([]int64, len(ts))
	mts := make([]gguf.ModelTensor, len(ts))
	for i, t := range ts {
		mt, _ := g.m.Tensor(t.Name)
		mts[i] = mt
		reads[i] = ggufReader(g.m, mt)
		rpm[i] = 1
		if len(t.Shape) >= 2 {
			rpm[i] = t.Shape[1]
		}
	}
	if o.TargetBPW > 0 || o.MaxSize > 0 {
		if ds, err = solveBudget(p, model, ts, ds, reads, rpm, imp, o); err != nil {
			return nil, err
		}
		ftype = mixtureFileType(decisionTypes(ts, ds))
	}
	p.FileType = ftype.String()
	p.metadata.Set("general.quantization_version", gguf.Uint32(2))
	p.metadata.Set("general.file_type", gguf.Uint32(uint32(ftype)))

	for i, t := range ts {
		d := ds[i]
		mt := mts[i]
		cols := t.Cols()
		j := &job{name: t.Name, shape: t.Shape, rows: t.Elements() / max(1, cols), cols: cols, rowsPerMatrix: rpm[i],
			typ: d.Type, read: reads[i]}
		if o.Improved || d.Weighted {
			j.mode = quant.ModeImproved
		}
		srcTr, ok := mt.Type.Traits()
		if !ok {
			return nil, fmt.Errorf("%s: tensor %s has unknown type %d", g.path, t.Name, mt.Type)
		}
		if d.Type == mt.Type {
			j.raw = ggufRaw(g.m, mt)
			d.Rule += " (copied)"
		} else {
			if srcTr.Quantized && !allowRequantize {
				return nil, fmt.Errorf("tensor %s is already %s; re-encoding it as %s loses precision twice (pass --allow-requantize)", t.Name, mt.Type, d.Type)
			}
			if !quant.Supported(mt.Type) && mt.Type != gguf.TypeF32 && mt.Type != gguf.TypeF16 && mt.Type != gguf.TypeBF16 {
				return nil, fmt.Errorf("tensor %s: cannot decode source type %s", t.Name, mt.Type)
			}
			if err := attachImportance(p, j, d, imp); err != nil {
				return nil, err
			}
		}
		nb, err := j.nbytes()
		if err != nil {
			return nil, err
		}
		p.Tensors = append(p.Tensors, PlanTensor{Name: t.Name, Type: d.Type.String(), Shape: t.Shape, Bytes: nb,
			Rule: d.Rule, SourceType: mt.Type.String(), Importance: j.importance != nil})
		if d.Fallback {
			p.Fallbacks++
		}
		p.jobs = append(p.jobs, j)
	}
	p.finish()
	return p, nil
}

// ggufReader decodes rows of a GGUF tensor to float32 through pread.
func ggufReader(m *gguf.Model, mt gguf.ModelTensor) func(r0, n int64, dst []float32) error {
	return func(r0, n int64, dst []float32) error {
		cols := int64(mt.Dims[0])
		rb, err := mt.Type.RowBytes(cols)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", mt.Name, err)
		}
		sec, err := m.TensorReader(mt.Name)
		if err != nil {
			return err
		}
		buf := make([]byte, rb*n)
		if _, err := sec.ReadAt(buf, r0*rb); err != nil && err != io.EOF {
			return fmt.Errorf("reading tensor %s: %w", mt.Name, err)
		}
		dst = dst[:n*cols]
		switch mt.Type {
		case gguf.TypeF32:
			for i := range dst {
				dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			}
		case gguf.TypeF16:
			kernels.WidenF16(dst, buf)
		case gguf.TypeBF16:
			kernels.WidenBF16(dst, buf)
		default:
			if err := quant.Dequantize(mt.Type, dst, buf); err != nil {
				return fmt.Errorf("tensor %s: %w", mt.Name, err)
			}
		}
		if i := kernels.FirstNonFinite(dst); i >= 0 {
			return &modelsrc.BadValueError{Tensor: mt.Name, Row: r0 + int64(i)/cols, Col: int64(i) % cols, Value: dst[i]}
		}
		return nil
	}
}

// ggufRaw returns the bytes of a tensor copied through unchanged (read with pread).
func ggufRaw(m *gguf.Model, mt gguf.ModelTensor) func(r0, n int64) ([]byte, error) {
	return func(r0, n int64) ([]byte, error) {
		rb, err := mt.Type.RowBytes(int64(mt.Dims[0]))
		if err != nil {
			return nil, err
		}
		sec, err := m.TensorReader(mt.Name)
		if err != nil {
			return nil, err
		}
		b := make([]byte, rb*n)
		if _, err := sec.ReadAt(b, r0*rb); err != nil && err != io.EOF {
			return nil, fmt.Errorf("reading tensor %s: %w", mt.Name, err)
		}
		return b, nil
	}
}
