package quant

import (
	"fmt"
	"math"

	"github.com/tq-project/tq/gguf"
)

// ErrorStats summarises the quantization error of a tensor.
type ErrorStats struct {
	// RMSE is sqrt(mean((x−y)²)).
	RMSE float64
	// WeightedRMSE is sqrt(Σ w_c·(x−y)² / Σ w_c) with w_c the importance of the
	// element's column (equal to RMSE without importance).
	WeightedRMSE float64
	// MaxAbs is max |x−y|.
	MaxAbs float64
	// SNRdB is 10·log10(Σx² / Σ(x−y)²); +Inf when the reconstruction is exact.
	SNRdB float64
	// N is the number of elements measured.
	N int
}

func (e ErrorStats) String() string {
	return fmt.Sprintf("rmse %.4g wrmse %.4g maxabs %.4g snr %.2f dB", e.RMSE, e.WeightedRMSE, e.MaxAbs, e.SNRdB)
}

// Measure compares original values with their reconstruction (row-major, ncols per
// row). importance may be nil or hold one weight per column. Sums run in float64.
// It panics if the lengths disagree (a programming error).
func Measure(orig, deq []float32, ncols int, importance []float32) ErrorStats {
	if len(orig) != len(deq) || ncols <= 0 || len(orig)%ncols != 0 || (importance != nil && len(importance) != ncols) {
		panic(fmt.Sprintf("quant: Measure: lengths %d, %d, ncols %d, importance %d", len(orig), len(deq), ncols, len(importance)))
	}
	var se, sx, swe, sw, maxAbs float64
	for i, x := range orig {
		d := float64(x) - float64(deq[i])
		se += d * d
		sx += float64(x) * float64(x)
		if a := math.Abs(d); a > maxAbs || math.IsNaN(d) {
			maxAbs = a
		}
		if importance != nil {
			w := float64(importance[i%ncols])
			swe += w * d * d
			sw += w
		}
	}
	st := ErrorStats{N: len(orig), MaxAbs: maxAbs}
	if st.N > 0 {
		st.RMSE = math.Sqrt(se / float64(st.N))
	}
	st.WeightedRMSE = st.RMSE
	if importance != nil && sw > 0 {
		st.WeightedRMSE = math.Sqrt(swe / sw)
	}
	switch {
	case se == 0:
		st.SNRdB = math.Inf(1)
	default:
		st.SNRdB = 10 * math.Log10(sx/se)
	}
	return st
}

// RoundTrip quantizes src with Quantize, decodes it again and measures the error
// (weighted by opts.Importance when given). It returns the quantized bytes.
func RoundTrip(t gguf.GGMLType, src []float32, nrows, ncols int, opts *Options) ([]byte, ErrorStats, error) {
	rs, err := rowSize(t, ncols)
	if err != nil {
		return nil, ErrorStats{}, fmt.Errorf("quant: tensor %q: %w", opts.name(), err)
	}
	if nrows < 0 || (nrows > 0 && ncols > math.MaxInt/nrows/max(rs, 4)) {
		return nil, ErrorStats{}, fmt.Errorf("quant: tensor %q: shape %d×%d too large", opts.name(), nrows, ncols)
	}
	q := make([]byte, nrows*rs)
	if err := Quantize(t, q, src, nrows, ncols, opts); err != nil {
		return nil, ErrorStats{}, err
	}
	y := make([]float32, len(src))
	threads := 0
	if opts != nil {
		threads = opts.Threads
	}
	if err := DequantizeParallel(t, y, q, threads); err != nil {
		return nil, ErrorStats{}, err
	}
	var imp []float32
	if opts != nil {
		imp = opts.Importance
	}
	return q, Measure(src, y, ncols, imp), nil
}
