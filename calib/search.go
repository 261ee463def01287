package calib

import (
	"cmp"
	"fmt"
	"math"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/quant"
)

// Parameter search (docs/calibration.md, "Search"): every tensor in layers_to_quantize is
// quantized with one scale per group of group_size weights (and a min per 32 where the
// container has one: int4 asymmetric), the scale and codes chosen to minimise the squared
// error weighted by the column importance Σx²/n (quant.ModeImproved with importance weights:
// a grid of candidate scales refined by weighted least squares, fp16 neighbours tried, the best
// kept per group). The container and group size are exactly those internal/convert writes
// (policy.TurboConfig.WeightContainer), so the recorded errors are those of the final file.

// TensorChoice is the search result of one tensor (recorded in quantize_config.json "tensors").
type TensorChoice struct {
	// Type is the ggml type the tensor is stored as ("q4_0", "q4_k", "q8_0", "f16", ...).
	Type string `json:"type"`
	// GroupSize is the number of consecutive weights sharing a scale (0: the type's block).
	GroupSize int `json:"group_size"`
	// ContainerWeightedRMSE is the importance-weighted RMSE of each candidate container of the
	// same size (int4: Q4_K and IQ4_NL, 4.5 bits per weight); Type is the lowest. Every
	// candidate is first measured on a quarter of the sampled rows (the probe). When all the
	// others are more than 5 % worse than the best there, the choice is made and every figure
	// is the probe's (SampledRows says how many rows); else the best and those within 5 % go
	// on to every sampled row, and a clear loser keeps its probe figure.
	ContainerWeightedRMSE map[string]float64 `json:"container_weighted_rmse,omitempty"`
	// Shape is the tensor's ggml shape.
	Shape []int64 `json:"shape"`
	// Weighted reports whether importance weights were available for every matrix.
	Weighted bool `json:"weighted"`
	// BPW is the storage cost of Type in bits per weight.
	BPW float64 `json:"bpw"`
	// RMSE and WeightedRMSE are the plain and importance-weighted root mean squared weight
	// errors of the chosen quantization; SNRdB is 10·log10(ΣW²/Σ(W−Ŵ)²) (ExactSNR when
	// the reconstruction is exact).
	RMSE         float64 `json:"rmse"`
	WeightedRMSE float64 `json:"weighted_rmse"`
	SNRdB        float64 `json:"snr_db"`
	// OutputNSR is the predicted output noise-to-signal ratio Σ w_c·ΔW²/Σ w_c·W² over all
	// elements (w the importance of the element's column in its matrix).
	OutputNSR float64 `json:"output_nsr"`
	// OutputMSE is the predicted mean squared error added to the layer's outputs per token:
	// Σ_e p_e Σ_r Σ_c w_{e,c}·ΔW²_{e,r,c} / rows (p_e the share of tokens routed to expert e,
	// 1 for dense weights).
	OutputMSE float64 `json:"output_mse"`
	// UnweightedWeightedRMSE is the weighted RMSE an unweighted search reaches on the same
	// container (the gain of importance weighting is UnweightedWeightedRMSE/WeightedRMSE).
	// When the container search used its probe, the unweighted search runs on the probe's
	// rows only: the value is WeightedRMSE times the ratio of the two searches there.
	UnweightedWeightedRMSE float64 `json:"unweighted_search_weighted_rmse,omitempty"`
	// AltType/AltBPW/AltOutputMSE describe the other bit width (int8 when the choice is int4
	// and vice versa), measured for the sensitivity figure (with the probe, on the probe's
	// rows, scaled as UnweightedWeightedRMSE is).
	AltType      string  `json:"alt_type,omitempty"`
	AltBPW       float64 `json:"alt_bpw,omitempty"`
	AltOutputMSE float64 `json:"alt_output_mse,omitempty"`
	// Sensitivity is the predicted output error removed per extra bit of storage:
	// |OutputMSE(4-bit) − OutputMSE(8-bit)| · rows / (elements · (bpw(8-bit) − bpw(4-bit))),
	// i.e. output squared error per token per bit. A size-budget solver spends bits where this
	// is largest.
	Sensitivity float64 `json:"sensitivity"`
	// SampledRows is the number of rows per matrix the chosen container's figures cover (0:
	// all).
	SampledRows int `json:"sampled_rows,omitempty"`
	// Note explains adaptations (fallback types, missing statistics).
	Note string `json:"note,omitempty"`
}

// SearchOptions configure SearchTensor.
type SearchOptions struct {
	// Config is the turboquant policy (weight_dtype, group_size, symmetric).
	Config *policy.TurboConfig
	// Threads bounds the quantizer's goroutines (0: all CPUs).
	Threads int
	// NoBaseline skips the unweighted comparison run.
	NoBaseline bool
	// NoSensitivity skips the other-bit-width run (Sensitivity stays 0).
	NoSensitivity bool
	// ChunkRows bounds the rows quantized at once (memory); 0 means 256.
	ChunkRows int
	// SampleRows > 0 measures only about that many rows per tensor, evenly spread over each
	// matrix (SampleRows/nmat per matrix, at least 16): the figures are then estimates; convert
	// quantizes every row with the same search. <= 0 measures all rows.
	SampleRows int
	// noProbe measures every candidate container on every sampled row; probeMargin, when > 0,
	// replaces defaultProbeMargin (tests).
	noProbe     bool
	probeMargin float64
}

const minSampleRows = 16

// ExactSNR is the SNRdB recorded for an exact reconstruction (JSON has no infinity).
const ExactSNR = 999.0

// MatrixReader reads rows [r0, r0+n) of matrix e of a tensor into dst (n·cols values).
type MatrixReader func(e, r0, n int, dst []float32) error

type errAcc struct {
	sq, wsq, sig, wsig, w float64 // Σd², Σw·d², Σx², Σw·x², Σw (per element)
	n                     int64
	final                 bool // the figures the record keeps for this candidate
}

func (a *errAcc) merge(b errAcc) {
	a.sq += b.sq
	a.wsq += b.wsq
	a.sig += b.sig
	a.wsig += b.wsig
	a.w += b.w
	a.n += b.n
}

// The container search's probe (SearchTensor): every probeStride-th sampled row of each
// matrix, used when a tensor has at least probeMinRows sampled rows in all; a candidate whose probe error exceeds the
// best one's by more than defaultProbeMargin (relative) is not measured further, and when
// every other candidate is such a loser the probe's best is chosen on the probe's figures.
const (
	probeStride        = 4
	probeMinRows       = 64
	defaultProbeMargin = 0.05
)

// The report figures (the unweighted baseline and the other width, SearchTensor), which no
// decision depends on, are measured on every reportStride-th sampled row when a tensor has at
// least reportMinRows of those, else on the rows the search measured each candidate on, and
// scaled by the chosen container's ratio of the rows its figures cover to those rows.
const (
	reportStride  = 4 * probeStride // a subset of the probe's rows
	reportMinRows = minSampleRows
)

// rows of the sample a measurement covers
const (
	partAll    = iota // every sampled row
	partProbe         // the probe's rows
	partRest          // the others
	partReport        // the report figures' rows
)

// quantizeRows quantizes rows with container t in mode and writes the reconstruction into deq.
func quantizeRows(t gguf.GGMLType, mode quant.Mode, x []float32, rows, cols int, imp []float32, threads int, name string, buf []byte, deq []float32) ([]byte, error) {
	rs, err := quant.RowSize(t, cols)
	if err != nil {
		return buf, fmt.Errorf("calib: tensor %s: %w", name, err)
	}
	if cap(buf) < rows*rs {
		buf = make([]byte, rows*rs)
	}
	buf = buf[:rows*rs]
	opts := &quant.Options{Importance: imp, Mode: mode, Threads: threads, TensorName: name}
	if err := quant.Quantize(t, buf, x, rows, cols, opts); err != nil {
		return buf, err
	}
	if err := quant.Dequantize(t, deq[:rows*cols], buf); err != nil {
		return buf, fmt.Errorf("calib: tensor %s: %w", name, err)
	}
	return buf, nil
}

func (a *errAcc) add(x, y, w []float32, cols int) {
	for i, v := range x {
		d := float64(v) - float64(y[i])
		wc := 1.0
		if w != nil {
			wc = float64(w[i%cols])
		}
		a.sq += d * d
		a.wsq += wc * d * d
		a.sig += float64(v) * float64(v)
		a.wsig += wc * float64(v) * float64(v)
		a.w += wc
	}
	a.n += int64(len(x))
}

func bpw(t gguf.GGMLType) float64 {
	tr, ok := t.Traits()
	if !ok || tr.BlockSize == 0 {
		return 0
	}
	return 8 * float64(tr.TypeSize) / float64(tr.BlockSize)
}

// SearchTensor runs the parameter search for one tensor of nmat matrices of rows×cols (ggml
// shape {cols, rows[, nmat]}) and measures the result. imp(e) returns the importance of matrix
// e (nil when unknown: that matrix is searched unweighted); share(e) its share of the tokens
// (1 for dense weights).
func SearchTensor(name string, shape []int64, read MatrixReader, imp func(e int) []float32, share func(e int) float64, o *SearchOptions) (*TensorChoice, error) {
	if len(shape) < 2 || shape[0] <= 0 || shape[1] <= 0 {
		return nil, fmt.Errorf("calib: tensor %s: shape %v is not a matrix", name, shape)
	}
	cols, rows, nmat := int(shape[0]), int(shape[1]), 1
	if len(shape) > 2 {
		nmat = int(shape[2])
	}
	cfg := o.Config
	cands := cfg.WeightCandidates(int64(cols))
	t := cands[0]
	ch := &TensorChoice{Type: t.String(), Shape: append([]int64(nil), shape...), BPW: bpw(t), Weighted: true}
	tr, _ := t.Traits()
	if !tr.Quantized {
		return ch, nil
	}
	alt := *cfg
	if cfg.WeightDType == "int8" {
		alt.WeightDType = "int4"
	} else {
		alt.WeightDType = "int8"
	}
	at := alt.WeightCandidates(int64(cols))[0]
	if o.NoSensitivity {
		at = 0
	}
	chunkRows := o.ChunkRows
	if chunkRows <= 0 {
		chunkRows = 256
	}
	sel := make([]int, 0, rows)
	per := 0
	if o.SampleRows > 0 {
		per = max(minSampleRows, (o.SampleRows+nmat-1)/nmat)
	}
	if per > 0 && rows > per {
		for i := 0; i < per; i++ {
			sel = append(sel, int(int64(i)*int64(rows)/int64(per)))
		}
		ch.SampledRows = per
	} else {
		for i := 0; i < rows; i++ {
			sel = append(sel, i)
		}
	}
	chunkRows = min(chunkRows, len(sel))
	x := make([]float32, chunkRows*cols)
	deq := make([]float32, chunkRows*cols)
	var qbuf []byte
	for e := 0; e < nmat; e++ {
		if w := imp(e); w == nil {
			ch.Weighted = false
		} else if len(w) != cols {
			return nil, fmt.Errorf("calib: tensor %s: importance has %d values, rows have %d", name, len(w), cols)
		}
	}
	// measure quantizes the sampled rows of every matrix with type qt (importance-weighted
	// when weighted is set; the same call convert makes) and accumulates the errors, weighted
	// by the importance where it is known; it returns the accumulator and Σ_e p_e·(weighted
	// squared error of matrix e), over all the rows it measured and over those of them that
	// are report rows (k%reportStride == 0). part selects the sampled rows by their position
	// k in sel: partAll every one, partProbe those with k%probeStride == 0, partRest the
	// others, partReport those with k%reportStride == 0.
	idx := make([]int, 0, chunkRows)
	isRep := make([]bool, 0, chunkRows)
	inPart := func(k, part int) bool {
		switch part {
		case partProbe:
			return k%probeStride == 0
		case partRest:
			return k%probeStride != 0
		case partReport:
			return k%reportStride == 0
		}
		return true
	}
	// count is the number of sampled rows per matrix in part
	count := func(part int) int {
		n := 0
		for k := range sel {
			if inPart(k, part) {
				n++
			}
		}
		return n
	}
	measure := func(qt gguf.GGMLType, weighted bool, part int) (errAcc, float64, errAcc, float64, error) {
		var acc, rep errAcc
		var out, repOut float64
		for e := 0; e < nmat; e++ {
			w := imp(e)
			qw := w
			if !weighted {
				qw = nil
			}
			p := share(e)
			for k := 0; k < len(sel); {
				idx, isRep = idx[:0], isRep[:0]
				for ; k < len(sel) && len(idx) < chunkRows; k++ {
					if inPart(k, part) {
						idx = append(idx, sel[k])
						isRep = append(isRep, k%reportStride == 0)
					}
				}
				n := len(idx)
				if n == 0 {
					continue
				}
				xs := x[:n*cols]
				for i := 0; i < n; {
					j := i + 1
					for j < n && idx[j] == idx[j-1]+1 {
						j++
					}
					if err := read(e, idx[i], j-i, xs[i*cols:j*cols]); err != nil {
						return acc, 0, rep, 0, err
					}
					i = j
				}
				var err error
				if qbuf, err = quantizeRows(qt, quant.ModeImproved, xs, n, cols, qw, o.Threads, name, qbuf, deq); err != nil {
					return acc, 0, rep, 0, err
				}
				before := acc.wsq
				acc.add(xs, deq[:n*cols], w, cols)
				out += p * (acc.wsq - before)
				before = rep.wsq
				for i, r := range isRep {
					if r {
						rep.add(xs[i*cols:(i+1)*cols], deq[i*cols:(i+1)*cols], w, cols)
					}
				}
				repOut += p * (rep.wsq - before)
			}
		}
		return acc, out, rep, repOut, nil
	}
	// the container: the candidate with the lowest importance-weighted error. With several
	// candidates and enough rows, every candidate is first measured on a quarter of the
	// sampled rows (the probe). A clear winner (every other candidate more than
	// defaultProbeMargin worse) is chosen there, and its figures are the probe's rows', at a
	// quarter of the rows per candidate. Otherwise the rest of the rows are measured for the
	// probe's best and the candidates within the margin, and the figures cover every sampled
	// row.
	var main errAcc
	var outMSE float64
	probe := len(cands) > 1 && len(sel)*nmat >= probeMinRows && !o.noProbe
	type meas struct {
		acc errAcc
		out float64
	}
	ms := make([]meas, len(cands))
	probeAcc := make([]errAcc, len(cands)) // each candidate's figures on the probe's rows
	probeOut := make([]float64, len(cands))
	repAcc := make([]errAcc, len(cands)) // and on the report rows among them
	repOut := make([]float64, len(cands))
	part := partAll
	if probe {
		part = partProbe
	}
	best := 0
	for k, ct := range cands {
		acc, out, racc, rout, err := measure(ct, true, part)
		if err != nil {
			return nil, err
		}
		acc.final = !probe
		ms[k], probeAcc[k], probeOut[k] = meas{acc, out}, acc, out
		repAcc[k], repOut[k] = racc, rout
		if acc.wsq < ms[best].acc.wsq {
			best = k
		}
	}
	mainPart := part // the rows the chosen container's figures cover
	if probe {
		limit := ms[best].acc.wsq * (1 + cmp.Or(o.probeMargin, defaultProbeMargin))
		near := false
		for k := range cands {
			near = near || (k != best && ms[k].acc.wsq <= limit)
		}
		if !near {
			// a clear winner: the choice is made, and its figures are the probe's
			ms[best].acc.final = true
		} else {
			// the best and the candidates within the margin go on to the other rows
			mainPart = partAll
			for k, ct := range cands {
				if k != best && ms[k].acc.wsq > limit {
					continue // a clear loser: its error stays the probe's estimate
				}
				acc, out, _, _, err := measure(ct, true, partRest)
				if err != nil {
					return nil, err
				}
				ms[k].acc.merge(acc)
				ms[k].out += out
				ms[k].acc.final = true
			}
		}
	}
	first, chosen := true, 0
	for k, ct := range cands {
		acc := ms[k].acc
		if len(cands) > 1 {
			if ch.ContainerWeightedRMSE == nil {
				ch.ContainerWeightedRMSE = map[string]float64{}
			}
			ch.ContainerWeightedRMSE[ct.String()] = math.Sqrt(acc.wsq / acc.w)
		}
		if acc.final && (first || acc.wsq < main.wsq) {
			t, main, outMSE, first, chosen = ct, acc, ms[k].out, false, k
		}
	}
	ch.Type, ch.BPW = t.String(), bpw(t)
	// the report figures' rows, and the chosen container's figures on them
	rpart, racc, rout := part, probeAcc[chosen], probeOut[chosen]
	if nmat*((len(sel)+reportStride-1)/reportStride) >= reportMinRows {
		rpart, racc, rout = partReport, repAcc[chosen], repOut[chosen]
	}
	var base errAcc
	var altMSE float64
	if ch.Weighted && !o.NoBaseline {
		// the unweighted search runs on the report rows and is compared with the chosen
		// container's weighted search on the same rows
		var err error
		if base, _, _, _, err = measure(t, false, rpart); err != nil {
			return nil, err
		}
		if rpart != mainPart && racc.wsq > 0 {
			base.wsq *= main.wsq / racc.wsq
			base.w = main.w
		}
	}
	if at != 0 {
		// the other width is measured on the report rows too and scaled by the chosen
		// container's ratio of all rows to those (a figure for reports only: budgets use the
		// measured sensitivities)
		var err error
		if _, altMSE, _, _, err = measure(at, true, rpart); err != nil {
			return nil, err
		}
		if rpart != mainPart {
			if rout > 0 {
				altMSE *= ms[chosen].out / rout
			} else {
				altMSE *= float64(count(mainPart)) / float64(count(rpart))
			}
		}
	}
	// the sums cover the measured rows: scale the per-token output error to all rows
	if measured := count(mainPart); measured < rows {
		ch.SampledRows = measured
	}
	scale := float64(rows) / float64(count(mainPart))
	outMSE *= scale
	altMSE *= scale
	n := float64(main.n)
	ch.RMSE = math.Sqrt(main.sq / n)
	ch.WeightedRMSE = math.Sqrt(main.wsq / main.w)
	if main.sq > 0 {
		ch.SNRdB = 10 * math.Log10(main.sig/main.sq)
	} else {
		ch.SNRdB = ExactSNR
	}
	if main.wsig > 0 {
		ch.OutputNSR = main.wsq / main.wsig
	}
	ch.OutputMSE = outMSE / float64(rows)
	if base.n > 0 {
		ch.UnweightedWeightedRMSE = math.Sqrt(base.wsq / base.w)
	}
	if at != 0 {
		ch.AltType, ch.AltBPW = at.String(), bpw(at)
		ch.AltOutputMSE = altMSE / float64(rows)
		if db := math.Abs(ch.AltBPW - ch.BPW); db > 0 {
			ch.Sensitivity = math.Abs(ch.OutputMSE-ch.AltOutputMSE) / (float64(cols) * float64(nmat) * db)
		}
	}
	if !ch.Weighted {
		if ch.Note != "" {
			ch.Note += "; "
		}
		ch.Note += "no activation statistics for some matrices: searched unweighted there"
	}
	return ch, nil
}
