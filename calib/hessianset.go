package calib

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"sync"

	"gonum.org/v1/gonum/mat"
)

// HessianIndexFormat names the index file's format.
const HessianIndexFormat = "tq-hessians"

// hessianIndex is HessianIndexFile.
type hessianIndex struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Run is the run id (hex) every listed file carries.
	Run             string `json:"run"`
	CalibrationHash string `json:"calibration_hash"`
	// Tokens is the number of calibration tokens accumulated (padding excluded).
	Tokens int64              `json:"tokens"`
	Files  []hessianIndexFile `json:"files"`
	Bytes  int64              `json:"bytes"`
}

type hessianIndexFile struct {
	Name  string `json:"name"`
	Layer int    `json:"layer"`
	Bytes int64  `json:"bytes"`
}

const maxHessianIndexBytes = 16 << 20

var gramFileName = regexp.MustCompile(`^(?:blk\.(0|[1-9][0-9]{0,5})|output)\.gram$`)

// HessianSet reads the input Gram matrices written by Calibrate (OUT/hessians): For returns
// the Hessian proxy H = E[x xᵀ] of a weight's input. Files are opened per call and every
// field is checked, so the set may be used from several goroutines.
type HessianSet struct {
	// Dir is the hessians directory; Run the run id; CalibrationHash and Tokens describe the
	// calibration set; Bytes is the total size of the Gram files.
	Dir             string
	Run             string
	CalibrationHash string
	Tokens          int64
	Bytes           int64

	weights map[string]hessRef
	mu      sync.Mutex
	cache   [3]struct { // the last full matrix, diagonals and expert matrix read
		key  string
		vals []float32
	}
}

type hessRef struct {
	ix *gramIndex
	w  gramWeight
}

// OpenHessians opens the Gram files of dir (a calibration's hessians directory) through its
// index file: every listed file must be a regular file of the listed size carrying the index's
// run id, and its structure is validated (values are read and checked by For).
func OpenHessians(dir string) (*HessianSet, error) {
	ipath := filepath.Join(dir, HessianIndexFile)
	b, err := readHessianIndex(ipath)
	if err != nil {
		return nil, err
	}
	var idx hessianIndex
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&idx); err != nil {
		return nil, fmt.Errorf("calib: %s: %w", ipath, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("calib: %s: %s", ipath, fmt.Sprintf(format, a...))
	}
	if idx.Format != HessianIndexFormat || idx.Version < minGramVersion || idx.Version > GramVersion {
		return nil, bad("format %q version %d, want %q version %d to %d", idx.Format, idx.Version, HessianIndexFormat,
			minGramVersion, GramVersion)
	}
	run, err := hex.DecodeString(idx.Run)
	if err != nil || len(run) != 32 {
		return nil, bad("run id %q is not 64 hex digits", idx.Run)
	}
	if idx.Tokens < 0 || len(idx.Files) == 0 || len(idx.Files) > maxRoutingLayer+1 {
		return nil, bad("%d tokens, %d files", idx.Tokens, len(idx.Files))
	}
	s := &HessianSet{Dir: dir, Run: idx.Run, CalibrationHash: idx.CalibrationHash, Tokens: idx.Tokens, weights: map[string]hessRef{}}
	seen := map[string]bool{}
	for _, fe := range idx.Files {
		m := gramFileName.FindStringSubmatch(fe.Name)
		if m == nil {
			return nil, bad("file name %q is not blk.N.gram or output.gram", fe.Name)
		}
		layer := -1
		if m[1] != "" {
			layer, _ = strconv.Atoi(m[1])
		}
		if seen[fe.Name] || fe.Layer != layer || fe.Bytes <= 0 {
			return nil, bad("file %q: repeated, or layer %d / size %d do not fit", fe.Name, fe.Layer, fe.Bytes)
		}
		seen[fe.Name] = true
		ix, err := openGramIndex(filepath.Join(dir, fe.Name))
		if err != nil {
			return nil, err
		}
		if ix.size != fe.Bytes {
			return nil, fmt.Errorf("calib: Gram file %s: %d bytes, the index lists %d (a different or unfinished calibration?)", ix.path, ix.size, fe.Bytes)
		}
		if !bytes.Equal(ix.run[:], run) {
			return nil, fmt.Errorf("calib: Gram file %s: run id %x, the index's is %s (a file of another calibration)", ix.path, ix.run, idx.Run)
		}
		if ix.layer != layer {
			return nil, fmt.Errorf("calib: Gram file %s: holds layer %d", ix.path, ix.layer)
		}
		for _, w := range ix.weights {
			if _, dup := s.weights[w.name]; dup {
				return nil, fmt.Errorf("calib: Gram file %s: weight %s is also in another file", ix.path, w.name)
			}
			s.weights[w.name] = hessRef{ix: ix, w: w}
		}
		s.Bytes += ix.size
	}
	return s, nil
}

// readHessianIndex reads the index file (a regular file of at most 16 MiB).
func readHessianIndex(path string) ([]byte, error) {
	f, size, err := openHessianFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size > maxHessianIndexBytes {
		return nil, fmt.Errorf("calib: %s: %d bytes is too large for a Gram index", path, size)
	}
	b, err := io.ReadAll(io.LimitReader(f, size))
	if err != nil {
		return nil, fmt.Errorf("calib: %s: %w", path, err)
	}
	return b, nil
}

// openGramIndex parses the structure of one Gram file.
func openGramIndex(path string) (*gramIndex, error) {
	f, size, err := openHessianFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseGram(f, size, path)
}

// Names lists the weights that have an entry, sorted.
func (s *HessianSet) Names() []string {
	out := make([]string, 0, len(s.weights))
	for k := range s.weights {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// InputKey names the matrix For(tensorName, expert) returns: weights with equal keys get the
// same H (the q/k/v projections of a block read one input, and so do gate and up, per expert
// for routed experts), so a consumer may share one factorisation between them. "" when the
// weight has no entry or the call would fail.
func (s *HessianSet) InputKey(tensorName string, expert int) string {
	ref, found := s.weights[tensorName]
	if !found {
		return ""
	}
	ix, w := ref.ix, ref.w
	key := ix.path
	if w.input >= 0 {
		key += "|" + ix.inputs[w.input].id
	}
	switch {
	case expert < 0 && w.experts < 0 && w.input >= 0:
		return key
	case expert >= 0 && w.experts >= 0:
		return fmt.Sprintf("%s|%s|%d", key, ix.inputs[w.experts].id, expert)
	}
	return ""
}

// For returns H = G/n, the mean of x xᵀ over the n calibration rows fed to the input of weight
// tensorName (GGUF name), as a symmetric matrix of its input's columns (both triangles set).
// expert is -1 for non-expert weights, the expert index for a stacked expert tensor
// (*_exps): its H is the expert's own Gram matrix shrunk toward a prior when the calibration
// stored one per expert, else it is reconstructed from the layer's all-token Gram matrix and
// the expert's own diagonal (see docs/calibration.md, "MoE experts"). ok is false, with a nil
// error, when the weight has no entry, only a diagonal was stored (inputs over the column
// limit or the memory budget, routed experts' down projections without per-expert matrices)
// or no row reached it.
func (s *HessianSet) For(tensorName string, expert int) (*mat.SymDense, bool, error) {
	ref, found := s.weights[tensorName]
	if !found {
		return nil, false, nil
	}
	ix, w := ref.ix, ref.w
	if expert < 0 {
		if w.input < 0 {
			return nil, false, fmt.Errorf("calib: hessians: %s is an expert tensor: pass an expert index", tensorName)
		}
		if w.experts >= 0 {
			return nil, false, fmt.Errorf("calib: hessians: %s is an expert tensor: pass an expert index", tensorName)
		}
		in := ix.inputs[w.input]
		if in.kind != GramFull || in.counts[0] == 0 {
			return nil, false, nil
		}
		g, err := s.values(ix, w.input, 0)
		if err != nil {
			return nil, false, err
		}
		n := in.cols
		return mat.NewSymDense(n, unpackSym(n, g, 1/float64(in.counts[0]))), true, nil
	}
	if w.experts < 0 {
		return nil, false, fmt.Errorf("calib: hessians: %s is not an expert tensor (expert %d)", tensorName, expert)
	}
	ex := ix.inputs[w.experts]
	if expert >= len(ex.counts) {
		return nil, false, fmt.Errorf("calib: hessians: %s: expert %d of %d", tensorName, expert, len(ex.counts))
	}
	if ex.counts[expert] == 0 {
		return nil, false, nil
	}
	shared := w.input >= 0 && ix.inputs[w.input].kind == GramFull && ix.inputs[w.input].counts[0] > 0
	if ex.kind == GramFull {
		return s.ownExpertHessian(ix, w, expert, shared)
	}
	if !shared {
		return nil, false, nil
	}
	g, err := s.values(ix, w.input, 0)
	if err != nil {
		return nil, false, err
	}
	n := ex.cols
	dall, err := s.values(ix, w.experts, 0)
	if err != nil {
		return nil, false, err
	}
	ne := float64(ex.counts[expert])
	d := make([]float64, n)
	for c := range d {
		d[c] = float64(dall[expert*n+c]) / ne
	}
	return expertHessian(g, n, d, ne), true, nil
}

// ownExpertHessian is For of an expert whose own Gram matrix G_e (n_e rows) was stored:
//
//	H_e = w · G_e/n_e + (1 − w) · P_e,   w = n_e / (n_e + cols)
//
// where the prior P_e is the reconstruction from the all-token correlation (expertHessian with
// λ = 1) when the layer's shared input has a full matrix (gate/up), else diag(G_e/n_e) (down).
// Both terms have the diagonal d_e = diag(G_e)/n_e, so H_e does too: the prior only shrinks the
// expert's own off-diagonal estimates, by as many pseudo-rows as it has columns.
func (s *HessianSet) ownExpertHessian(ix *gramIndex, w gramWeight, expert int, shared bool) (*mat.SymDense, bool, error) {
	ex := ix.inputs[w.experts]
	ge, err := s.values(ix, w.experts, expert)
	if err != nil {
		return nil, false, err
	}
	n := ex.cols
	ne := float64(ex.counts[expert])
	d := make([]float64, n)
	for i := range d {
		d[i] = float64(ge[packedRow(n, i)]) / ne
	}
	var g []float32 // the layer's all-token matrix: the prior's correlation (gate/up)
	if shared {
		if g, err = s.values(ix, w.input, 0); err != nil {
			return nil, false, err
		}
	}
	wt := ExpertOwnWeight(ne, n)
	return blendHessian(n, d, ge, wt/ne, g, 1-wt), true, nil
}

// ExpertOwnWeight is w of ownExpertHessian: n_e/(n_e+cols).
func ExpertOwnWeight(ne float64, cols int) float64 { return ne / (ne + float64(cols)) }

// ExpertShrinkage is λ of the MoE reconstruction for an expert with ne rows and cols columns:
// 1 from cols rows on, ne/(ne+cols) below.
func ExpertShrinkage(ne float64, cols int) float64 {
	if ne >= float64(cols) {
		return 1
	}
	return ne / (ne + float64(cols))
}

// expertHessian builds H_e = λ·D^½ C D^½ + (1−λ)·D from the all-token Gram matrix g (packed
// upper triangle), the expert's mean squares d and its row count ne: C is g's correlation
// matrix (C_ij = G_ij/√(G_ii G_jj); a column that is zero for every token correlates with
// nothing).
func expertHessian(g []float32, n int, d []float64, ne float64) *mat.SymDense {
	return blendHessian(n, d, nil, 0, g, ExpertShrinkage(ne, n))
}

// blendHessian returns the symmetric matrix with diagonal d and off-diagonal entries
// a·own_ij + b·√(d_i d_j)·C_ij, where own (packed upper triangle, nil for none) is an expert's
// own Gram matrix and C the correlation matrix of the packed all-token matrix g (nil: no
// correlation term; a column that is zero for every token correlates with nothing).
func blendHessian(n int, d []float64, own []float32, a float64, g []float32, b float64) *mat.SymDense {
	var sc []float64 // √d_i / √G_ii, 0 for a dead column
	if g != nil {
		sc = make([]float64, n)
		for i := range sc {
			if gi := float64(g[packedRow(n, i)]); gi > 0 {
				sc[i] = math.Sqrt(d[i]) / math.Sqrt(gi)
			}
		}
	}
	data := make([]float64, n*n)
	for i := 0; i < n; i++ {
		data[i*n+i] = d[i]
		p := packedRow(n, i)
		for j := i + 1; j < n; j++ {
			var h float64
			if own != nil {
				h = a * float64(own[p+j-i])
			}
			if g != nil {
				h += b * sc[i] * sc[j] * float64(g[p+j-i])
			}
			data[i*n+j] = h
			data[j*n+i] = h
		}
	}
	return mat.NewSymDense(n, data)
}

// values returns the checked values of matrix m of input i of a file (all diagonals of a
// diagonal input, m ignored). The last full matrix and the last diagonals read are cached: q,
// k and v, or the experts of one layer, share theirs.
func (s *HessianSet) values(ix *gramIndex, i, m int) ([]float32, error) {
	in := ix.inputs[i]
	if in.kind != GramFull {
		m = 0
	}
	key := fmt.Sprintf("%s\x00%d\x00%d", ix.path, i, m)
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := in.kind
	if in.kind == GramFull && len(in.counts) > 1 {
		slot = 2
	}
	c := &s.cache[slot]
	if c.key == key {
		return c.vals, nil
	}
	f, size, err := openHessianFile(ix.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if size != ix.size {
		return nil, fmt.Errorf("calib: Gram file %s changed since it was opened (%d bytes, was %d)", ix.path, size, ix.size)
	}
	var run [32]byte
	if n, _ := f.ReadAt(run[:], 16); n != 32 || run != ix.run {
		return nil, fmt.Errorf("calib: Gram file %s changed since it was opened (run id)", ix.path)
	}
	vals := make([]float32, in.matValues())
	if err := readGramValues(f, ix, in, m, vals); err != nil {
		return nil, err
	}
	c.key, c.vals = key, vals
	return vals, nil
}
