package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"text/tabwriter"

	"github.com/tq-project/tq/calib"
	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/quant"
)

// runHErr is `qualitybench herr`: the layer-wise error that GPTQ minimises, measured on the
// files: for every weight with an input Gram matrix H in the calibration (one per routed
// expert where it has them), Σ_rows ΔW·H·ΔWᵀ / Σ_rows W·H·Wᵀ (ΔW the quantized file's weights
// minus the reference's), summed over the layers per tensor role (the name without
// "blk.N."), and the sum over the roles. A Gated DeltaNet projection whose calibration has
// per-head matrices is measured as tq convert encodes it (headHErr): its value-head rows
// under those, reported apart from attn_qkv's query and key rows. It compares encoders of the
// same types on the calibration's own statistics, where the KL divergence of a few thousand
// held-out positions is too noisy to see differences of a few percent; given the Gram
// matrices of other text (a calibration on it), it gives the error that text meets.
func runHErr(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("herr", flag.ContinueOnError)
	ref := fs.String("f16", "", "reference GGUF (the model's F16 conversion; required)")
	dir := fs.String("calibration", "", "tq calibrate's output directory (its hessians/ is read; required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ref == "" || *dir == "" || fs.NArg() == 0 {
		return errors.New("herr: --f16, --calibration and at least one quantized file are required")
	}
	hs, err := calib.OpenHessians(filepath.Join(*dir, "hessians"))
	if err != nil {
		return err
	}
	rm, err := gguf.Open(*ref)
	if err != nil {
		return err
	}
	defer rm.Close()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range fs.Args() {
		roles, err := fileHErr(rm, hs, p)
		if err != nil {
			return err
		}
		names := make([]string, 0, len(roles))
		for r := range roles {
			names = append(names, r)
		}
		sort.Strings(names)
		fmt.Fprintf(tw, "%s\t\n", p)
		var sum float64
		for _, r := range names {
			fmt.Fprintf(tw, "  %s\t%.5g\n", r, roles[r])
			sum += roles[r]
		}
		fmt.Fprintf(tw, "  sum\t%.5g\n", sum)
	}
	return tw.Flush()
}

var blockPrefix = regexp.MustCompile(`^blk\.\d+\.`)

// fileHErr returns, per tensor role, the summed relative H-weighted error of the file at
// path against the reference model.
func fileHErr(rm *gguf.Model, hs *calib.HessianSet, path string) (map[string]float64, error) {
	m, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	out := map[string]float64{}
	for _, t := range rm.Tensors() {
		if len(t.Dims) < 2 || len(t.Dims) > 3 {
			continue
		}
		qt, ok := m.Tensor(t.Name)
		if !ok {
			return nil, fmt.Errorf("%s: no tensor %q", path, t.Name)
		}
		if fmt.Sprint(qt.Dims) != fmt.Sprint(t.Dims) {
			return nil, fmt.Errorf("%s: tensor %q has shape %v, the reference %v", path, t.Name, qt.Dims, t.Dims)
		}
		n, rows, ne := int(t.Dims[0]), int(t.Dims[1]), 1
		if len(t.Dims) == 3 {
			ne = int(t.Dims[2])
		}
		var hsAll []*calibH
		for e := 0; e < ne; e++ {
			ex := -1
			if ne > 1 {
				ex = e
			}
			h, _, err := hs.For(t.Name, ex)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t.Name, err)
			}
			if h == nil {
				break
			}
			if h.SymmetricDim() != n {
				return nil, fmt.Errorf("%s: Gram matrix has %d columns, the tensor %d", t.Name, h.SymmetricDim(), n)
			}
			raw := h.RawSymmetric()
			hsAll = append(hsAll, &calibH{n: n, data: raw.Data, stride: raw.Stride})
		}
		if len(hsAll) != ne {
			continue // no (or not every expert's) Gram matrix: not quantized by GPTQ
		}
		w, err := dequantized(rm, t.Name, t.Type, n*rows*ne)
		if err != nil {
			return nil, err
		}
		wq, err := dequantized(m, t.Name, qt.Type, n*rows*ne)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		role := blockPrefix.ReplaceAllString(t.Name, "")
		if parts, err := headHErr(rm, hs, t.Name, w, wq, rows, hsAll); err != nil {
			return nil, err
		} else if parts != nil {
			for r, v := range parts {
				out[r] += v
			}
			continue
		}
		var num, den float64
		for e, h := range hsAll {
			a, b := hError(w[e*rows*n:(e+1)*rows*n], wq[e*rows*n:(e+1)*rows*n], rows, h)
			num += a
			den += b
		}
		if den > 0 {
			out[role] += num / den
		}
	}
	return out, nil
}

// headRoles are the Gated DeltaNet tensors whose value-head rows tq convert encodes with the
// calibration's per-head matrices (calib.HessianSet.HeadHessian), with their entries.
var headRoles = map[string]string{"attn_qkv.weight": calib.VHeadsEntry, "attn_gate.weight": calib.GateHeadsEntry}

// headSource is the part of calib.HessianSet that serves per-head matrices.
type headSource interface {
	HeadGroups(il int, entry string) int
	HeadHessian(il int, entry string, h int) (g []float64, n int, ok bool, err error)
}

// headHErr measures a Gated DeltaNet projection the way tq convert encodes it, when the
// calibration holds per-head matrices for it (headParts, with ValueDim the row count of the
// block's attn_gate); it returns nil for every other tensor.
func headHErr(rm *gguf.Model, hs headSource, name string, w, wq []float32, rows int, h []*calibH) (map[string]float64, error) {
	role := blockPrefix.ReplaceAllString(name, "")
	entry, ok := headRoles[role]
	il := policy.LayerOf(name)
	if !ok || il < 0 || len(h) != 1 || hs.HeadGroups(il, entry) <= 0 {
		return nil, nil
	}
	gate, found := rm.Tensor(fmt.Sprintf("blk.%d.attn_gate.weight", il))
	if !found || len(gate.Dims) != 2 {
		return nil, nil
	}
	return headParts(hs, il, entry, role, w, wq, rows, int(gate.Dims[1]), h[0])
}

// headParts returns the errors of the rows of each group of value heads (the last vd rows)
// under that group's matrix, summed over the groups, as role "(v heads)", and of the rows
// before them (attn_qkv's query and key rows) under the plain matrix h, as role "(q, k rows)".
func headParts(hs headSource, il int, entry, role string, w, wq []float32, rows, vd int, h *calibH) (map[string]float64, error) {
	groups, n := hs.HeadGroups(il, entry), h.n
	if len(w) < rows*n || len(wq) < rows*n {
		return nil, fmt.Errorf("%s: %d rows of %d columns, %d and %d values", role, rows, n, len(w), len(wq))
	}
	if groups <= 0 || vd <= 0 || vd > rows || vd%groups != 0 {
		return nil, fmt.Errorf("%s: %d value rows in %d head groups do not fit its %d rows", role, vd, groups, rows)
	}
	first, ds := rows-vd, vd/groups
	out := map[string]float64{}
	if first > 0 {
		if num, den := hError(w[:first*n], wq[:first*n], first, h); den > 0 {
			out[role+" (q, k rows)"] = num / den
		}
	}
	var num, den float64
	for g := 0; g < groups; g++ {
		m, cols, ok, err := hs.HeadHessian(il, entry, g)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", role, err)
		}
		if !ok {
			continue
		}
		if cols != n || len(m) != n*n {
			return nil, fmt.Errorf("%s: head group %d's matrix has %d columns, the tensor %d", role, g, cols, n)
		}
		r0 := first + g*ds
		a, b := hError(w[r0*n:(r0+ds)*n], wq[r0*n:(r0+ds)*n], ds, &calibH{n: n, stride: n, data: m})
		num += a
		den += b
	}
	if den > 0 {
		out[role+" (v heads)"] = num / den
	}
	return out, nil
}

func dequantized(m *gguf.Model, name string, typ gguf.GGMLType, n int) ([]float32, error) {
	b, err := m.TensorData(name)
	if err != nil {
		return nil, err
	}
	y := make([]float32, n)
	if err := quant.Dequantize(typ, y, b); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return y, nil
}

// calibH is an n×n symmetric matrix whose upper triangle is data[i·stride+j], j >= i.
type calibH struct {
	n, stride int
	data      []float64
}

func (h *calibH) at(i, j int) float64 {
	if j < i {
		i, j = j, i
	}
	return h.data[i*h.stride+j]
}

// hError returns Σ_r (w_r − q_r)·H·(w_r − q_r)ᵀ and Σ_r w_r·H·w_rᵀ over the rows of the
// row-major rows×n matrices w and q, in float64.
func hError(w, q []float32, rows int, h *calibH) (num, den float64) {
	n := h.n
	hd := make([]float64, n*n)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			hd[i*n+j] = h.at(i, j)
		}
	}
	d := make([]float64, n)
	x := make([]float64, n)
	for r := 0; r < rows; r++ {
		for i := 0; i < n; i++ {
			x[i] = float64(w[r*n+i])
			d[i] = x[i] - float64(q[r*n+i])
		}
		for i := 0; i < n; i++ {
			var sd, sx float64
			for j, v := range hd[i*n : (i+1)*n] {
				sd += v * d[j]
				sx += v * x[j]
			}
			num += d[i] * sd
			den += x[i] * sx
		}
	}
	return num, den
}
