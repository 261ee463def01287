package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tq-project/tq/calib"
	"github.com/tq-project/tq/internal/convert"
)

// calibrationInputs applies --calibration DIR (what tq calibrate wrote) to the convert
// options: its quantize_config.json for --use-turboquant (unless --config is given), its
// imatrix.gguf as importance (unless --imatrix is given), its sensitivity.json for budgets,
// and its hessians/ for the error-compensating search. It returns the files it uses, for the output-is-input check.
func calibrationInputs(dir string, opts *convert.Options, warn func(string)) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("--calibration: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("--calibration %s: not a directory (give the folder tq calibrate wrote)", dir)
	}
	var used []string
	if opts.Types.TurboQuant && opts.Types.ConfigPath == "" {
		opts.Types.ConfigPath = filepath.Join(dir, calib.ConfigFile)
		used = append(used, opts.Types.ConfigPath)
	}
	if opts.Types.IMatrixPath == "" {
		p := filepath.Join(dir, calib.IMatrixFile)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("--calibration %s: no %s (run tq calibrate with -o %s): %w", dir, calib.IMatrixFile, dir, err)
		}
		opts.Types.IMatrixPath = p
		used = append(used, p)
	}
	sp := filepath.Join(dir, calib.SensitivityFile)
	if _, err := os.Stat(sp); err == nil {
		sens, err := calib.LoadSensitivity(sp)
		if err != nil {
			return nil, fmt.Errorf("--calibration: %w", err)
		}
		opts.Types.Sensitivity = sens
		used = append(used, sp)
	}
	// (without it a budget warns: convert's solveBudget)
	hdir := filepath.Join(dir, calib.HessianDir)
	if _, err := os.Stat(filepath.Join(hdir, calib.HessianIndexFile)); err != nil {
		if warn != nil {
			warn(fmt.Sprintf("--calibration %s has no %s/ (calibrated with --no-hessians?): importance-weighted search only", dir, calib.HessianDir))
		}
		return used, nil
	}
	hs, err := calib.OpenHessians(hdir)
	if err != nil {
		return nil, fmt.Errorf("--calibration: %w", err)
	}
	opts.Types.Hessians = calibHessians{hs}
	return append(used, hdir), nil
}

// calibHessians serves convert.HessianSource from a calibration's hessians/.
type calibHessians struct{ s *calib.HessianSet }

func (c calibHessians) Gram(tensor string, m int) ([]float64, int, bool, error) {
	expert := -1
	if strings.Contains(tensor, "_exps.") {
		expert = m
	}
	h, ok, err := c.s.For(tensor, expert)
	if err != nil || !ok {
		return nil, 0, false, err
	}
	// The matrix is new and ours: hand its storage on instead of copying it (a wide input's
	// n² float64 values held once), with the lower triangle made equal to the upper one that
	// At reads.
	raw := h.RawSymmetric()
	n := raw.N
	g := raw.Data
	if raw.Stride != n || len(g) < n*n {
		return nil, 0, false, fmt.Errorf("tensor %s: Gram matrix storage %d×%d with stride %d", tensor, n, n, raw.Stride)
	}
	g = g[:n*n]
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			g[j*n+i] = g[i*n+j]
		}
	}
	return g, n, true, nil
}

// GramKey implements convert.GramKeyer: tensors reading one input share its factorisation.
func (c calibHessians) GramKey(tensor string, m int) string {
	expert := -1
	if strings.Contains(tensor, "_exps.") {
		expert = m
	}
	return c.s.InputKey(tensor, expert)
}

// HeadGroups and HeadGram implement convert.HeadHessianSource.
func (c calibHessians) HeadGroups(layer int, entry string) int { return c.s.HeadGroups(layer, entry) }

func (c calibHessians) HeadGram(layer int, entry, _ string, group int) ([]float64, int, bool, error) {
	return c.s.HeadHessian(layer, entry, group)
}
