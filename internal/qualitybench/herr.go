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
	"github.com/tq-project/tq/quant"
)

// runHErr is `qualitybench herr`: the layer-wise error that GPTQ minimises, measured on the
// files: for every weight with an input Gram matrix H in the calibration (one per routed
// expert where it has them), Σ_rows ΔW·H·ΔWᵀ / Σ_rows W·H·Wᵀ (ΔW the quantized file's weights
// minus the reference's), summed over the layers per tensor role (the name without
// "blk.N."), and the sum over the roles. It compares encoders of the same types on the
// calibration's own statistics, where the KL divergence of a few thousand held-out positions
// is too noisy to see differences of a few percent.
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
		var num, den float64
		for e, h := range hsAll {
			a, b := hError(w[e*rows*n:(e+1)*rows*n], wq[e*rows*n:(e+1)*rows*n], rows, h)
			num += a
			den += b
		}
		if den > 0 {
			out[blockPrefix.ReplaceAllString(t.Name, "")] += num / den
		}
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
