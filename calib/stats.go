package calib

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/tq-project/tq/quant/kernels"
)

// TensorStats holds the statistics of the input activations of one linear weight: for every
// matrix (1 for a dense weight, one per expert for a stacked 3-D expert tensor) and every
// input column c, the sum of squares Σx_c² and the maximum |x_c| over the rows fed to that
// matrix, and the number of rows.
type TensorStats struct {
	// Name is the GGUF tensor name of the weight ("blk.3.attn_q.weight").
	Name string
	// Cols is the row length of the weight (ne0), the length of one activation row.
	Cols int
	// NMat is the number of matrices: 1 for dense weights, n_expert for *_exps tensors.
	NMat int
	// Counts[e] is the number of activation rows accumulated for matrix e.
	Counts []int64
	// SumSq[e*Cols+c] is Σ x_c² over the rows of matrix e (float64 accumulation).
	SumSq []float64
	// MaxAbs[e*Cols+c] is max |x_c| over the rows of matrix e (0 when Counts[e] is 0, NaN
	// when unknown, e.g. after importing a llama.cpp imatrix).
	MaxAbs []float32
	// Synthetic[e] marks matrices whose statistics come from the uncovered-expert fallback
	// (the expert was never routed to; see docs/calibration.md) rather than from routed rows.
	Synthetic []bool
}

// NewTensorStats returns empty statistics for a weight of nmat matrices with rows of cols.
func NewTensorStats(name string, cols, nmat int) *TensorStats {
	return &TensorStats{
		Name: name, Cols: cols, NMat: nmat,
		Counts:    make([]int64, nmat),
		SumSq:     make([]float64, nmat*cols),
		MaxAbs:    make([]float32, nmat*cols),
		Synthetic: make([]bool, nmat),
	}
}

// Add accumulates n activation rows (row-major, Cols each) into matrix e.
func (t *TensorStats) Add(e int, x []float32, n int) {
	c := t.Cols
	s := t.SumSq[e*c : (e+1)*c]
	m := t.MaxAbs[e*c : (e+1)*c]
	for r := 0; r < n; r++ {
		// s += float64(x)², m = max(m, |x|) with NaN kept (AVX2 where available, same bits)
		kernels.SumSqMaxAbs(s, m, x[r*c:(r+1)*c])
	}
	t.Counts[e] += int64(n)
}

// AddRow accumulates a single row into matrix e.
func (t *TensorStats) AddRow(e int, row []float32) { t.Add(e, row, 1) }

// Merge adds the statistics of o (same name, shape) into t.
func (t *TensorStats) Merge(o *TensorStats) error {
	if o.Cols != t.Cols || o.NMat != t.NMat {
		return fmt.Errorf("calib: merging statistics of %s: shape %dx%d vs %dx%d", t.Name, o.NMat, o.Cols, t.NMat, t.Cols)
	}
	for e := range t.Counts {
		t.Counts[e] += o.Counts[e]
		t.Synthetic[e] = t.Synthetic[e] || o.Synthetic[e]
	}
	for i, v := range o.SumSq {
		t.SumSq[i] += v
	}
	for i, v := range o.MaxAbs {
		if v > t.MaxAbs[i] || math.IsNaN(float64(v)) {
			t.MaxAbs[i] = v
		}
	}
	return nil
}

// Importance returns the per-column mean of squared activations of matrix e (what llama.cpp's
// quantizer uses as importance weights), or false when the matrix has no rows.
func (t *TensorStats) Importance(e int) ([]float32, bool) {
	if e < 0 || e >= t.NMat || t.Counts[e] <= 0 {
		return nil, false
	}
	out := make([]float32, t.Cols)
	n := float64(t.Counts[e])
	for i, v := range t.SumSq[e*t.Cols : (e+1)*t.Cols] {
		out[i] = float32(v / n)
	}
	return out, true
}

// Total returns the number of rows accumulated over all matrices.
func (t *TensorStats) Total() int64 {
	var n int64
	for _, c := range t.Counts {
		n += c
	}
	return n
}

// check validates internal consistency (used after decoding files).
func (t *TensorStats) check() error {
	if t.Name == "" {
		return errors.New("empty tensor name")
	}
	if t.Cols <= 0 || t.NMat <= 0 {
		return fmt.Errorf("tensor %s: bad shape %d matrices of %d columns", t.Name, t.NMat, t.Cols)
	}
	if len(t.Counts) != t.NMat || len(t.Synthetic) != t.NMat || len(t.SumSq) != t.NMat*t.Cols || len(t.MaxAbs) != t.NMat*t.Cols {
		return fmt.Errorf("tensor %s: array lengths do not match %d matrices of %d columns", t.Name, t.NMat, t.Cols)
	}
	for e, c := range t.Counts {
		if c < 0 {
			return fmt.Errorf("tensor %s: matrix %d has a negative count %d", t.Name, e, c)
		}
	}
	for i, v := range t.SumSq {
		if !(v >= 0) || math.IsInf(v, 1) {
			return fmt.Errorf("tensor %s: sum of squares %d is %v (want finite, >= 0)", t.Name, i, v)
		}
	}
	for i, v := range t.MaxAbs {
		if v < 0 || math.IsInf(float64(v), 1) {
			return fmt.Errorf("tensor %s: max |x| %d is %v", t.Name, i, v)
		}
	}
	return nil
}

// Meta describes how statistics were collected.
type Meta struct {
	// Model is the model folder (as given) and Arch its GGUF architecture.
	Model string `json:"model,omitempty"`
	Arch  string `json:"arch,omitempty"`
	// NLayer is the model's number of blocks.
	NLayer int `json:"n_layer,omitempty"`
	// Prompts is the number of calibration sequences, Tokens the number of tokens whose
	// activations were accumulated (padding excluded), PaddedTokens the number evaluated.
	Prompts      int   `json:"prompts"`
	Tokens       int64 `json:"tokens"`
	PaddedTokens int64 `json:"padded_tokens,omitempty"`
	// TokenHash is the calibration_hash of the token sequences (see CalibrationHash).
	TokenHash string `json:"token_hash,omitempty"`
	// Datasets names the calibration sources.
	Datasets []string `json:"datasets,omitempty"`
	// TQVersion is the version of tq that collected the statistics.
	TQVersion string `json:"tq_version,omitempty"`
	// LayersDone is the number of blocks whose statistics are complete (NLayer when finished).
	LayersDone int `json:"layers_done"`
	// Imported is the imatrix file the statistics were imported from, if any.
	Imported string `json:"imported,omitempty"`
	// UncoveredSample is the number of tokens per layer run through never-routed experts.
	UncoveredSample int `json:"uncovered_sample,omitempty"`
}

// Stats is the complete calibration statistics of a model: per weight activation statistics
// and, for mixture-of-experts models, the routing histogram. It implements the importance
// interface of internal/convert (Importance(name, expert)).
type Stats struct {
	Meta    Meta
	Tensors map[string]*TensorStats
	// Routing holds one entry per MoE layer, ordered by layer.
	Routing []*LayerRouting
}

// NewStats returns empty statistics.
func NewStats() *Stats { return &Stats{Tensors: map[string]*TensorStats{}} }

// Names lists the tensors with statistics, sorted.
func (s *Stats) Names() []string {
	out := make([]string, 0, len(s.Tensors))
	for k := range s.Tensors {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Importance implements internal/convert's ImportanceSource: the per-column mean squared
// activation of matrix expert (0 for dense weights) of the GGUF tensor name. A matrix without
// rows gets uniform weights (all 1), as llama-quantize gives it when loading a GGUF imatrix.
func (s *Stats) Importance(name string, expert int) ([]float32, bool) {
	t := s.Tensors[name]
	if t == nil || expert < 0 || expert >= t.NMat {
		return nil, false
	}
	if v, ok := t.Importance(expert); ok {
		return v, true
	}
	ones := make([]float32, t.Cols)
	for i := range ones {
		ones[i] = 1
	}
	return ones, true
}

// Merge adds every tensor and routing entry of o into s.
func (s *Stats) Merge(o *Stats) error {
	for _, name := range o.Names() {
		ot := o.Tensors[name]
		if t := s.Tensors[name]; t != nil {
			if err := t.Merge(ot); err != nil {
				return err
			}
			continue
		}
		s.Tensors[name] = ot
	}
	for _, r := range o.Routing {
		if err := s.mergeRouting(r); err != nil {
			return err
		}
	}
	return nil
}

func (s *Stats) mergeRouting(r *LayerRouting) error {
	for _, x := range s.Routing {
		if x.Layer == r.Layer {
			return x.Merge(r)
		}
	}
	s.Routing = append(s.Routing, r)
	sort.Slice(s.Routing, func(i, j int) bool { return s.Routing[i].Layer < s.Routing[j].Layer })
	return nil
}

// Layer returns the block index of a GGUF tensor name ("blk.12.ffn_up.weight" -> 12), or -1.
func Layer(name string) int {
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return -1
	}
	i := strings.IndexByte(rest, '.')
	if i <= 0 {
		return -1
	}
	n := 0
	for _, c := range rest[:i] {
		if c < '0' || c > '9' || n > 1<<20 {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}
