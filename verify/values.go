package verify

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/internal/rotate"
	"github.com/tq-project/tq/quant"
)

// DefaultSampleRows is the number of rows per tensor decoded by the value check unless --full.
const DefaultSampleRows = 64

// TensorStat describes one tensor: its type, the rows decoded, non-finite values found and,
// with a reference, the quantization error of the decoded rows.
type TensorStat struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Layer       int    `json:"layer"` // -1 outside the blocks
	Role        string `json:"role,omitempty"`
	Rows        int64  `json:"rows"`
	RowsChecked int64  `json:"rows_checked"`
	NonFinite   int64  `json:"non_finite"`
	// RelRMSE is sqrt(Σ(w−ŵ)² / Σw²) over the checked rows against the reference weights;
	// SNRdB is −20·log10(RelRMSE). Absent without a reference (or when identical: RelRMSE 0).
	RelRMSE *float64 `json:"rel_rmse,omitempty"`
	SNRdB   *float64 `json:"snr_db,omitempty"`
	// OutErr and OutEnergy estimate Σ_rows E[(Δw·x)²] and Σ_rows E[(w·x)²] over all rows from
	// the imatrix (mean x² per input column, cross terms ignored); their ratio is the relative
	// output error the tensor's quantization causes. Present only with --imatrix and a reference.
	OutErr    *float64 `json:"out_err,omitempty"`
	OutEnergy *float64 `json:"out_energy,omitempty"`
	// Note explains a tensor that could not be checked.
	Note string `json:"note,omitempty"`
}

// weightReader reads reference weights (float32 rows under GGUF names).
type weightReader interface {
	// shape returns the ggml dims of name, or false when the reference lacks it.
	shape(name string) ([]int64, bool)
	readRows(name string, row0, n int64, dst []float32) error
	close() error
}

type hfWeights struct {
	s      modelsrc.TensorSource
	shapes map[string][]int64
}

// openHFWeights opens an HF folder as the reference weights; rotation is the file's
// rotate.MetaKey value ("" for none): the reference is then rotated the same way, so the
// values compare tensor by tensor.
func openHFWeights(dir, rotation string) (*hfWeights, error) {
	hf, err := modelsrc.OpenHF(dir)
	if err != nil {
		return nil, err
	}
	var s modelsrc.TensorSource = hf
	if rotation != "" {
		spec, err := rotate.ParseSpec(rotation)
		if err != nil {
			hf.Close()
			return nil, err
		}
		rs, err := rotate.Wrap(hf, spec.Seed)
		if err != nil {
			hf.Close()
			return nil, err
		}
		if rs.Rotation().Spec() != spec {
			hf.Close()
			return nil, fmt.Errorf("the file's rotation %q does not fit %s (hidden size %d)", rotation, dir, rs.Rotation().Dim())
		}
		s = rs
	}
	w := &hfWeights{s: s, shapes: map[string][]int64{}}
	for _, d := range s.Tensors() {
		w.shapes[d.Name] = d.Shape
	}
	return w, nil
}

func (w *hfWeights) shape(name string) ([]int64, bool) { s, ok := w.shapes[name]; return s, ok }
func (w *hfWeights) readRows(name string, row0, n int64, dst []float32) error {
	return w.s.ReadRows(name, row0, n, dst)
}
func (w *hfWeights) close() error { return w.s.Close() }

type ggufWeights struct{ m *gguf.Model }

func (w ggufWeights) shape(name string) ([]int64, bool) {
	t, ok := w.m.Tensor(name)
	if !ok || !quant.Supported(t.Type) {
		return nil, false
	}
	out := make([]int64, len(t.Dims))
	for i, d := range t.Dims {
		out[i] = int64(d)
	}
	return out, true
}

func (w ggufWeights) readRows(name string, row0, n int64, dst []float32) error {
	t, _ := w.m.Tensor(name)
	data, err := w.m.TensorData(name)
	if err != nil {
		return err
	}
	rb, err := t.Type.RowBytes(int64(t.Dims[0]))
	if err != nil {
		return err
	}
	cols := int64(t.Dims[0])
	return quant.Dequantize(t.Type, dst[:n*cols], data[row0*rb:(row0+n)*rb])
}

func (w ggufWeights) close() error { return w.m.Close() }

// importanceSource is the part of an imatrix the value check uses (imatrix.Means).
type importanceSource interface {
	ImportanceFor(name string, expert, cols int) ([]float32, bool, error)
}

// valueOptions configure checkValues.
type valueOptions struct {
	Full       bool
	SampleRows int
	Ref        weightReader     // nil: no error statistics
	Importance importanceSource // nil: no output-error estimate
	Progress   func(done, total int)
}

// sampleRows picks n rows of nrows, evenly spaced and including the first and last.
func sampleRows(nrows int64, n int) []int64 {
	if int64(n) >= nrows {
		out := make([]int64, nrows)
		for i := range out {
			out[i] = int64(i)
		}
		return out
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i) * (nrows - 1) / int64(n-1)
	}
	return out
}

// checkValues decodes rows of every tensor, fails on NaN/Inf and, with a reference, measures
// the quantization error.
func checkValues(ctx context.Context, m *gguf.Model, o valueOptions) (Check, []TensorStat, error) {
	c := Check{Name: CheckValues, Status: StatusPass}
	if o.SampleRows <= 1 {
		o.SampleRows = DefaultSampleRows
	}
	var stats []TensorStat
	var checked, rowsChecked int64
	ts := m.Tensors()
	for i, t := range ts {
		if err := ctx.Err(); err != nil {
			return c, nil, err
		}
		st := TensorStat{Name: t.Name, Type: t.Type.String(), Layer: policy.LayerOf(t.Name), Role: policy.Role(t.Name)}
		if err := checkTensorValues(m, t, o, &st); err != nil {
			return c, nil, err
		}
		if st.NonFinite > 0 {
			c.fail("tensor %q (%s): %d NaN/Inf value(s) in %d decoded row(s)", t.Name, t.Type, st.NonFinite, st.RowsChecked)
		}
		if st.Note != "" {
			c.warn("tensor %q: %s", t.Name, st.Note)
		} else {
			checked++
		}
		rowsChecked += st.RowsChecked
		stats = append(stats, st)
		if o.Progress != nil {
			o.Progress(i+1, len(ts))
		}
	}
	mode := fmt.Sprintf("up to %d sampled rows per tensor", o.SampleRows)
	if o.Full {
		mode = "every row"
	}
	if c.Status != StatusFail {
		c.Detail = fmt.Sprintf("%d tensors, %d rows decoded (%s), no NaN/Inf", checked, rowsChecked, mode)
	}
	return c, stats, nil
}

func checkTensorValues(m *gguf.Model, t gguf.ModelTensor, o valueOptions, st *TensorStat) error {
	if len(t.Dims) == 0 || t.Dims[0] == 0 {
		st.Note = "empty tensor"
		return nil
	}
	cols := int64(t.Dims[0])
	nrows := int64(t.NumElements()) / cols
	st.Rows = nrows
	if !quant.Supported(t.Type) {
		st.Note = fmt.Sprintf("type %s is not decodable by tq; values not checked", t.Type)
		return nil
	}
	data, err := m.TensorData(t.Name)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	rb, err := t.Type.RowBytes(cols)
	if err != nil {
		return fmt.Errorf("tensor %q: %w", t.Name, err)
	}
	rows := sampleRows(nrows, o.SampleRows)
	if o.Full {
		rows = sampleRows(nrows, int(min(nrows, math.MaxInt32)))
	}
	var ref []float32
	refOK := false
	if o.Ref != nil {
		if shp, ok := o.Ref.shape(t.Name); ok && sameDims(shp, t.Dims) {
			refOK = true
			ref = make([]float32, cols)
		}
	}
	row := make([]float32, cols)
	var se, sx, we, wx float64
	var imp []float32
	impExpert := -1
	rowsPerExpert := int64(1)
	if len(t.Dims) >= 2 {
		rowsPerExpert = int64(t.Dims[1])
	}
	for _, r := range rows {
		if err := quant.Dequantize(t.Type, row, data[r*rb:(r+1)*rb]); err != nil {
			return fmt.Errorf("tensor %q row %d: %w", t.Name, r, err)
		}
		st.RowsChecked++
		for _, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				st.NonFinite++
			}
		}
		if !refOK {
			continue
		}
		if err := o.Ref.readRows(t.Name, r, 1, ref); err != nil {
			return fmt.Errorf("reference tensor %q row %d: %w", t.Name, r, err)
		}
		if o.Importance != nil {
			if e := int(r / rowsPerExpert); e != impExpert {
				impExpert = e
				var err error
				if imp, _, err = o.Importance.ImportanceFor(t.Name, e, int(cols)); err != nil {
					return err
				}
			}
		}
		for j, v := range row {
			d := float64(ref[j]) - float64(v)
			se += d * d
			sx += float64(ref[j]) * float64(ref[j])
			if imp != nil {
				we += float64(imp[j]) * d * d
				wx += float64(imp[j]) * float64(ref[j]) * float64(ref[j])
			}
		}
	}
	if refOK && st.NonFinite == 0 && sx > 0 {
		rel := math.Sqrt(se / sx)
		st.RelRMSE = &rel
		if rel > 0 {
			snr := -20 * math.Log10(rel)
			st.SNRdB = &snr
		}
		if wx > 0 {
			scale := float64(nrows) / float64(st.RowsChecked)
			oe, ox := we*scale, wx*scale
			st.OutErr, st.OutEnergy = &oe, &ox
		}
	}
	return nil
}

func sameDims(a []int64, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if uint64(a[i]) != b[i] {
			return false
		}
	}
	return true
}

// LayerStat aggregates the tensors of one layer.
type LayerStat struct {
	Layer int `json:"layer"`
	// MeanRelRMSE is the mean of the layer's tensors' RelRMSE.
	MeanRelRMSE float64 `json:"mean_rel_rmse"`
	// Sensitivity is Σ OutErr / Σ OutEnergy over the layer's tensors: the relative output
	// error its quantization causes, weighted by the calibration statistics. 0 without them.
	Sensitivity float64 `json:"sensitivity,omitempty"`
}

// layerStats aggregates per-layer error statistics (layers with no measured tensor are left
// out).
func layerStats(ts []TensorStat) []LayerStat {
	type agg struct {
		sum          float64
		n            int
		oe, ox       float64
		hasImportant bool
	}
	m := map[int]*agg{}
	maxL := -1
	for _, t := range ts {
		if t.RelRMSE == nil {
			continue
		}
		a := m[t.Layer]
		if a == nil {
			a = &agg{}
			m[t.Layer] = a
		}
		a.sum += *t.RelRMSE
		a.n++
		if t.OutErr != nil {
			a.oe += *t.OutErr
			a.ox += *t.OutEnergy
			a.hasImportant = true
		}
		maxL = max(maxL, t.Layer)
	}
	var out []LayerStat
	for l := -1; l <= maxL; l++ {
		a := m[l]
		if a == nil {
			continue
		}
		ls := LayerStat{Layer: l, MeanRelRMSE: a.sum / float64(a.n)}
		if a.hasImportant && a.ox > 0 {
			ls.Sensitivity = a.oe / a.ox
		}
		out = append(out, ls)
	}
	return out
}

func layerLabel(l int) string {
	if l < 0 {
		return "other"
	}
	return strconv.Itoa(l)
}
