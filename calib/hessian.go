package calib

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tq-project/tq/infer"
)

// HessianDir is the directory, inside the output directory, that receives the input Gram
// matrices: one file per block (blk.N.gram), output.gram for the LM head's input, and
// HessianIndexFile listing them.
const HessianDir = "hessians"

// HessianIndexFile lists the Gram files of one calibration; it is written last.
const HessianIndexFile = "index.json"

// DefaultHessianMaxCols is the most columns an input may have to get a full Gram matrix.
const DefaultHessianMaxCols = 16384

// DefaultExpertHessianBytes is the default bound of Options.ExpertHessianBytes: 4 GiB of
// per-expert matrices (float32, before compression) for the whole model. A 30B-A3B-sized MoE
// (48 layers of 128 experts of 2048 inputs) would need about 120 GB and is left out unless the
// user raises the bound.
const DefaultExpertHessianBytes = 4 << 30

// gramRole says which input a linear weight reads, by the role part of its GGUF name
// ("blk.N.<role>.weight"): input is the input whose full Gram matrix serves the weight ("" for
// none), experts the per-expert input of a stacked expert tensor ("" for none): one Gram
// matrix per expert where the plan allows, else per-expert diagonals.
type gramRole struct{ input, experts string }

// gramRoles are the linear weights infer feeds through the observer, grouped by the
// activation they multiply (infer/arch*.go): q/k/v (and the Gated DeltaNet projections) read
// the attention-norm output, the router, dense/shared gate/up and the routed experts' gate/up
// the FFN-norm output; the other projections read their own intermediate.
var gramRoles = map[string]gramRole{
	"attn_q":         {"attn_in", ""},
	"attn_k":         {"attn_in", ""},
	"attn_v":         {"attn_in", ""},
	"attn_qkv":       {"attn_in", ""},
	"attn_gate":      {"attn_in", ""},
	"ssm_beta":       {"attn_in", ""},
	"ssm_alpha":      {"attn_in", ""},
	"attn_output":    {"attn_output_in", ""},
	"ssm_out":        {"ssm_out_in", ""},
	"ffn_gate_inp":   {"ffn_in", ""},
	"ffn_gate":       {"ffn_in", ""},
	"ffn_up":         {"ffn_in", ""},
	"ffn_gate_shexp": {"ffn_in", ""},
	"ffn_up_shexp":   {"ffn_in", ""},
	"ffn_gate_exps":  {"ffn_in", "ffn_in.experts"},
	"ffn_up_exps":    {"ffn_in", "ffn_in.experts"},
	"ffn_down":       {"ffn_down_in", ""},
	"ffn_down_shexp": {"ffn_down_shexp_in", ""},
	"ffn_down_exps":  {"", "ffn_down_exps_in.experts"},
}

// headInput is the input id of the LM head (output.weight, or token_embd.weight when tied).
const headInput = "output_in"

// gramInputOf returns the input ids of a block weight ("blk.3.attn_k.weight" ->
// "blk.3.attn_in", ""), or ok=false for weights the observer does not feed.
func gramInputOf(name string) (input, experts string, ok bool) {
	il := Layer(name)
	if il < 0 {
		return "", "", false
	}
	p := layerPrefix(il)
	role, found := strings.CutSuffix(strings.TrimPrefix(name, p), ".weight")
	if !found {
		return "", "", false
	}
	r, ok := gramRoles[role]
	if !ok {
		return "", "", false
	}
	if r.input != "" {
		input = p + r.input
	}
	if r.experts != "" {
		experts = p + r.experts
	}
	return input, experts, true
}

// hessStep is the plan of one step's full inputs.
type hessStep struct {
	file   string         // file name in HessianDir
	layer  int            // -1 for the head
	cols   map[string]int // full-input candidates: id -> columns
	nmat   map[string]int // per-expert candidates: id -> experts (absent: one matrix)
	reason map[string]int // inputs kept diagonal: id -> GramReason*
	users  map[string]int // id -> number of weights reading it
	// dn describes a Gated DeltaNet block whose value and gate rows get per-head matrices
	// (hessian_deltanet.go), collected with the attn_qkv input's full matrix (zero: none).
	dn dnPlan
}

// dnPlan is the per-head collection of one Gated DeltaNet block.
type dnPlan struct {
	in            string // the attn_qkv / attn_gate input's id ("" when not collected)
	heads, dstate int
}

// hessPlan decides, before the forward pass, which inputs get a full Gram matrix.
type hessPlan struct {
	dir   string
	run   [32]byte
	steps map[int]*hessStep // by step (1..n_layer: blocks, n_layer+1: head)
	bytes int64             // the largest step's accumulator memory
	// spent is the time this process spent accumulating and writing Gram matrices.
	spent time.Duration
}

func (p *hessPlan) full(step int, id string) bool {
	s := p.steps[step]
	if s == nil {
		return false
	}
	_, ok := s.cols[id]
	return ok && s.reason[id] == GramReasonNone
}

// planHessians lists every step's inputs and keeps full those with at most HessianMaxCols
// columns whose accumulators fit the memory budget besides base (the rest of the estimate):
// in a step that does not fit, the routed experts' per-expert matrices are dropped first
// (their H then comes from the shared matrix and their diagonals), largest first, then the
// largest other inputs, and of equal widths those read by fewer weights (attn_output before
// the q/k/v input). The inputs dropped are reported in one warning.
func (r *run) planHessians(base int64) error {
	o := r.opts
	if o.NoHessians {
		return nil
	}
	maxCols := o.HessianMaxCols // set and checked by fill
	fp, err := hex.DecodeString(r.fingerprint(r.modelDir))
	if err != nil || len(fp) != 32 {
		return fmt.Errorf("calib: run id: %v", err)
	}
	p := &hessPlan{dir: filepath.Join(o.OutDir, HessianDir), run: [32]byte(fp), steps: map[int]*hessStep{}}
	threads := r.threadCount()
	allow := int64(-1)
	if o.MemoryBudget > 0 {
		allow = max(0, o.MemoryBudget-base-gramWriteBytes(threads))
	}
	dropped := map[string][]int{} // role -> layers
	// the whole model's per-expert matrices: all of them, or none when over the limit
	var expertBytes int64
	for il := 0; il < r.cfg.NLayer; il++ {
		seen := map[string]bool{}
		for _, d := range layerDescs(r.src, il) {
			if _, ex, ok := gramInputOf(d.Name); ok && ex != "" && len(d.Shape) == 3 && !seen[ex] {
				seen[ex] = true
				expertBytes += 4 * d.Shape[2] * int64(packedLen(int(d.Shape[0])))
			}
		}
	}
	noExperts := expertBytes > max(o.ExpertHessianBytes, 0)
	if noExperts && expertBytes > 0 {
		r.warn("per-expert Gram matrices left out: they would take %s (limit %s; raise it with --expert-hessian-limit): "+
			"routed experts' H comes from the shared matrix and their diagonals", fmtBytes(expertBytes), fmtBytes(max(o.ExpertHessianBytes, 0)))
	}
	for step := 1; step <= r.cfg.NLayer+1; step++ {
		s := &hessStep{layer: step - 1, cols: map[string]int{}, nmat: map[string]int{}, reason: map[string]int{}, users: map[string]int{}}
		if step <= r.cfg.NLayer {
			s.file = fmt.Sprintf("blk.%d.gram", step-1)
			for _, d := range layerDescs(r.src, step-1) {
				in, ex, ok := gramInputOf(d.Name)
				if ok && in != "" && len(d.Shape) >= 2 {
					s.cols[in] = int(d.Shape[0])
					s.users[in]++
				}
				if ok && ex != "" && len(d.Shape) == 3 && d.Shape[2] > 0 {
					s.cols[ex] = int(d.Shape[0])
					s.nmat[ex] = int(d.Shape[2])
					s.users[ex]++
					if noExperts {
						s.reason[ex] = GramReasonDisk
					}
				}
			}
			s.dn = planDeltaNet(layerDescs(r.src, step-1), step-1, s.cols)
		} else {
			s.file, s.layer = "output.gram", -1
			s.cols[headInput] = r.cfg.NEmbd
		}
		ids := make([]string, 0, len(s.cols))
		for id, c := range s.cols {
			if s.reason[id] == GramReasonDisk {
				continue
			}
			if c > maxCols {
				s.reason[id] = GramReasonCols
				k := fmt.Sprintf("more than %d columns: %s", maxCols, roleOf(id))
				dropped[k] = append(dropped[k], s.layer)
				continue
			}
			ids = append(ids, id)
		}
		// the order of dropping: largest first (the fewest inputs go), then the input serving
		// the fewest weights
		sort.Slice(ids, func(i, j int) bool {
			a, b := ids[i], ids[j]
			if (s.nmat[a] > 0) != (s.nmat[b] > 0) {
				return s.nmat[a] > 0
			}
			if s.cols[a] != s.cols[b] {
				return s.cols[a] > s.cols[b]
			}
			if s.users[a] != s.users[b] {
				return s.users[a] < s.users[b]
			}
			return a < b
		})
		var need int64
		for _, id := range ids {
			need += s.accBytes(id)
		}
		if s.dn.in != "" && s.reason[s.dn.in] == GramReasonNone {
			b := deltaNetAccBytes(s.cols[s.dn.in], s.dn.dstate, s.dn.heads)
			if allow >= 0 && need+b > allow {
				s.dn = dnPlan{} // the per-head matrices go first; the plain ones remain
				k := "memory budget: Gated DeltaNet per-head matrices"
				dropped[k] = append(dropped[k], s.layer)
			} else {
				need += b
			}
		}
		for _, id := range ids {
			if allow < 0 || need <= allow {
				break
			}
			need -= s.accBytes(id)
			s.reason[id] = GramReasonBudget
			k := "memory budget: " + roleOf(id)
			dropped[k] = append(dropped[k], s.layer)
		}
		p.bytes = max(p.bytes, need)
		p.steps[step] = s
	}
	if p.bytes > 0 {
		p.bytes += gramWriteBytes(threads)
	}
	if len(dropped) > 0 {
		var parts []string
		for k, ls := range dropped {
			parts = append(parts, fmt.Sprintf("%s (%s)", k, layerList(ls)))
		}
		sort.Strings(parts)
		r.warn("input Gram matrices kept diagonal-only: %s", strings.Join(parts, "; "))
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return fmt.Errorf("calib: %w", err)
	}
	r.hess = p
	return nil
}

// accBytes is the accumulator memory of input id.
func (s *hessStep) accBytes(id string) int64 {
	return gramAccsBytes(s.cols[id], max(1, s.nmat[id]))
}

// roleOf strips the block prefix of an input id.
func roleOf(id string) string {
	if il := Layer(id); il >= 0 {
		return strings.TrimPrefix(id, layerPrefix(il))
	}
	return id
}

// layerList names the blocks of ls (ascending; -1 is the head) with ranges: "blocks 0-3,7".
func layerList(ls []int) string {
	var parts []string
	head := false
	for i := 0; i < len(ls); {
		if ls[i] < 0 {
			head = true
			i++
			continue
		}
		j := i
		for j+1 < len(ls) && ls[j+1] == ls[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(ls[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ls[i], ls[j]))
		}
		i = j + 1
	}
	var out []string
	if len(parts) > 0 {
		w := "blocks "
		if len(ls) == 1 || (len(ls) == 2 && head) {
			w = "block "
		}
		out = append(out, w+strings.Join(parts, ","))
	}
	if head {
		out = append(out, "output head")
	}
	return strings.Join(out, ", ")
}

// gramCollector accumulates the full Gram matrices of one step's inputs from the observer's
// calls: each input is accumulated once, from the calls of the first weight seen reading it
// (q, k and v see the same rows; so do the router, gate and up).
type gramCollector struct {
	plan    *hessPlan
	step    int
	threads int
	acc     map[string]*gramAcc
	experts map[string][]*gramAcc // per-expert inputs: one accumulator per expert (nil: no rows)
	owner   map[string]string     // input id -> the weight whose calls are accumulated
	cols    map[string]int        // input id -> columns seen
	dn      *deltaNetAcc          // the Gated DeltaNet per-head matrices (nil: none yet)
	rounded bool                  // the matrices from rows rounded to bf16, as the forward's products (gramAcc)
}

func (r *run) newGramCollector(step int) *gramCollector {
	if r.hess == nil {
		return nil
	}
	return &gramCollector{plan: r.hess, step: step, threads: r.threadCount(), acc: map[string]*gramAcc{},
		experts: map[string][]*gramAcc{}, owner: map[string]string{}, cols: map[string]int{},
		rounded: bf16Rounded(r.opts.ExactForward)}
}

// claim records that weight name feeds input id rows of cols columns and reports whether its
// rows are the ones accumulated (the first weight seen reading id); a second width for the
// same input is an error.
func (g *gramCollector) claim(name, id string, cols int) (bool, error) {
	if c, seen := g.cols[id]; seen && c != cols {
		return false, fmt.Errorf("calib: %s: input %s of %d columns, %s fed it %d", name, id, cols, g.owner[id], c)
	}
	g.cols[id] = cols
	if o, seen := g.owner[id]; seen && o != name {
		return false, nil
	}
	g.owner[id] = name
	return true, nil
}

// linear accumulates the n valid rows x of a non-expert weight's input.
func (g *gramCollector) linear(name string, x []float32, n, cols int) error {
	id, _, ok := gramInputOf(name)
	if g.plan.steps[g.step].layer < 0 { // the head step
		id, ok = headInput, true
	}
	if !ok || id == "" {
		return nil
	}
	if mine, err := g.claim(name, id, cols); !mine || err != nil {
		return err
	}
	if !g.plan.full(g.step, id) {
		return nil
	}
	a := g.acc[id]
	if a == nil {
		a = newGramAcc(cols, g.threads, g.rounded)
		g.acc[id] = a
	}
	t0 := time.Now()
	err := a.add(x, n)
	g.plan.spent += time.Since(t0)
	return err
}

// expert accumulates the n valid rows x that expert e of a stacked expert weight received
// (gate and up see the same rows: the first of them seen is accumulated).
func (g *gramCollector) expert(name string, e int, x []float32, n, cols int) error {
	_, id, ok := gramInputOf(name)
	if !ok || id == "" {
		return nil
	}
	if mine, err := g.claim(name, id, cols); !mine || err != nil {
		return err
	}
	s := g.plan.steps[g.step]
	if !g.plan.full(g.step, id) || s.cols[id] != cols {
		return nil
	}
	accs := g.experts[id]
	if accs == nil {
		accs = make([]*gramAcc, s.nmat[id])
		g.experts[id] = accs
	}
	if e < 0 || e >= len(accs) {
		return fmt.Errorf("calib: %s: expert %d of %d", name, e, len(accs))
	}
	if accs[e] == nil {
		var buf *gramBuf
		for _, a := range accs {
			if a != nil {
				buf = a.buf
				break
			}
		}
		if buf == nil {
			buf = newGramBuf(cols, g.rounded)
		}
		accs[e] = newSharedGramAcc(cols, g.threads, buf)
	}
	t0 := time.Now()
	err := accs[e].add(x, n)
	g.plan.spent += time.Since(t0)
	return err
}

// deltaNet accumulates a Gated DeltaNet trace (valid: the real tokens of the sequence).
func (g *gramCollector) deltaNet(tr *infer.DeltaNetTrace, valid int) error {
	st := g.plan.steps[g.step]
	if st.layer < 0 || st.dn.in == "" || !g.plan.full(g.step, st.dn.in) {
		return nil
	}
	if g.dn == nil {
		if tr.NEmbd != st.cols[st.dn.in] || tr.NVHeads != st.dn.heads || tr.DState != st.dn.dstate {
			return fmt.Errorf("calib: block %d: Gated DeltaNet of %d columns, %d value heads of %d, the weights say %d, %d, %d",
				st.layer, tr.NEmbd, tr.NVHeads, tr.DState, st.cols[st.dn.in], st.dn.heads, st.dn.dstate)
		}
		g.dn = newDeltaNetAcc(tr, g.threads, g.rounded)
	}
	t0 := time.Now()
	err := g.dn.add(tr, valid)
	g.plan.spent += time.Since(t0)
	return err
}

// gramFile assembles the step's Gram file from the accumulators and the step's statistics
// (the diagonals of inputs kept diagonal-only and of routed experts).
func (g *gramCollector) gramFile(names []string, ss *Stats) *gramFileData {
	s := g.plan.steps[g.step]
	f := &gramFileData{layer: s.layer, run: g.plan.run}
	index := map[string]int{}
	addInput := func(in *gramInput) int {
		index[in.id] = len(f.inputs)
		f.inputs = append(f.inputs, in)
		return len(f.inputs) - 1
	}
	// the diagonal of a weight's input from its statistics (matrix-major Σx²)
	diagOf := func(id string, ts *TensorStats, reason int) *gramInput {
		sum := ts.SumSq
		return &gramInput{id: id, kind: GramDiagonal, reason: reason, cols: ts.Cols, counts: slices.Clone(ts.Counts),
			nvals: len(sum), values: func(i0, i1 int, dst []float32) {
				for i := i0; i < i1; i++ {
					dst[i-i0] = float32(sum[i])
				}
			}}
	}
	ref := func(id, name string, experts bool) int {
		if id == "" {
			return -1
		}
		if i, ok := index[id]; ok {
			return i
		}
		if experts {
			if accs := g.experts[id]; accs != nil {
				return addInput(expertsInput(id, s.cols[id], accs))
			}
			ts := ss.Tensors[name]
			if ts == nil || ts.NMat < 1 {
				return -1
			}
			reason := s.reason[id]
			if reason == GramReasonNone {
				reason = GramReasonExperts
			}
			return addInput(diagOf(id, ts, reason))
		}
		if a := g.acc[id]; a != nil && a.rows > 0 {
			return addInput(&gramInput{id: id, kind: GramFull, cols: a.cols, counts: []int64{a.rows},
				nvals: packedLen(a.cols), values: a.packedValues})
		}
		reason, planned := s.reason[id]
		if !planned || reason == GramReasonNone {
			return -1 // never fed
		}
		// diagonal only: the statistics of the weight whose calls were accumulated
		owner := g.owner[id]
		if owner == "" {
			owner = name
		}
		ts := ss.Tensors[owner]
		if ts == nil || ts.NMat != 1 {
			return -1
		}
		return addInput(diagOf(id, ts, reason))
	}
	sorted := slices.Clone(names)
	sort.Strings(sorted)
	for _, name := range sorted {
		in, ex, ok := gramInputOf(name)
		if s.layer < 0 {
			in, ex, ok = headInput, "", true
		}
		if !ok {
			continue
		}
		w := gramWeight{name: name, input: ref(in, name, false), experts: ref(ex, name, true)}
		if w.input >= 0 || w.experts >= 0 {
			f.weights = append(f.weights, w)
		}
		if g.dn != nil && in == s.dn.in && name == layerPrefix(s.layer)+"attn_qkv.weight" && w.input >= 0 &&
			f.inputs[w.input].kind == GramFull {
			for _, e := range g.dn.entries(in, layerPrefix(s.layer)) {
				f.weights = append(f.weights, gramWeight{name: e.weight, input: -1, experts: addInput(e.input)})
			}
		}
	}
	return f
}

// expertsInput is the full input of per-expert accumulators (an expert without rows has count
// 0 and a zero matrix).
func expertsInput(id string, cols int, accs []*gramAcc) *gramInput {
	counts := make([]int64, len(accs))
	for e, a := range accs {
		if a != nil {
			counts[e] = a.rows
		}
	}
	per := packedLen(cols)
	return &gramInput{id: id, kind: GramFull, cols: cols, counts: counts, nvals: len(accs) * per,
		values: func(i0, i1 int, dst []float32) {
			for i0 < i1 { // one expert's part at a time
				e, r := i0/per, i0%per
				n := min(i1-i0, per-r)
				if a := accs[e]; a != nil {
					a.packedValues(r, r+n, dst[:n])
				} else {
					clear(dst[:n])
				}
				dst, i0 = dst[n:], i0+n
			}
		}}
}

// writeStepHessians writes the Gram file of a finished step.
func (r *run) writeStepHessians(g *gramCollector, names []string, ss *Stats) error {
	save, err := r.flushStepHessians(g, names, ss)
	if err != nil {
		return err
	}
	return save()
}

// flushStepHessians adds every accumulator's pending rows and returns the function that
// writes the step's Gram file (compression on up to gramWriters threads, then the file's
// fsync). The returned function only reads g's matrices and ss, so it may run while the
// step's search reads them; its time is added to g.plan.spent by the caller's goroutine
// after it returns (see layer).
func (r *run) flushStepHessians(g *gramCollector, names []string, ss *Stats) (func() error, error) {
	t0 := time.Now()
	defer func() { g.plan.spent += time.Since(t0) }()
	if err := g.flushAll(); err != nil {
		return nil, err
	}
	f := g.gramFile(names, ss)
	path := filepath.Join(g.plan.dir, g.plan.steps[g.step].file)
	workers := gramWriters(r.threadCount())
	return func() error { return saveHessianFile(path, f, workers) }, nil
}

// flushAll adds the pending rows of every accumulator of the step.
func (g *gramCollector) flushAll() error {
	for _, a := range g.acc {
		if err := a.flush(); err != nil {
			return err
		}
	}
	if g.dn != nil {
		if err := g.dn.flush(); err != nil {
			return err
		}
	}
	for _, accs := range g.experts {
		for _, a := range accs {
			if a == nil {
				continue
			}
			if err := a.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// finishHessians checks that every step's Gram file is there and belongs to this run (steps
// of an earlier, interrupted process included), writes the index last, removes Gram files a
// previous calibration left in the directory, and returns the record.
func (r *run) finishHessians(tokens int64) (*HessianRecord, error) {
	p := r.hess
	idx := hessianIndex{Format: HessianIndexFormat, Version: GramVersion, Run: hex.EncodeToString(p.run[:]),
		CalibrationHash: r.hash, Tokens: tokens}
	rec := &HessianRecord{Dir: HessianDir, Tokens: tokens, MaxCols: r.opts.HessianMaxCols,
		Run: idx.Run}
	keep := map[string]bool{}
	for step := 1; step <= len(p.steps); step++ {
		s := p.steps[step]
		path := filepath.Join(p.dir, s.file)
		ix, err := openGramIndex(path)
		if err != nil {
			return nil, fmt.Errorf("%w (rerun with --restart to recompute it)", err)
		}
		if ix.run != p.run || ix.layer != s.layer {
			return nil, fmt.Errorf("calib: Gram file %s belongs to another calibration (rerun with --restart to recompute it)", path)
		}
		for _, in := range ix.inputs {
			if in.kind == GramFull {
				rec.FullInputs++
			} else {
				rec.DiagonalInputs++
			}
		}
		idx.Files = append(idx.Files, hessianIndexFile{Name: s.file, Layer: s.layer, Bytes: ix.size})
		idx.Bytes += ix.size
		keep[s.file] = true
	}
	if err := saveJSON(filepath.Join(p.dir, HessianIndexFile), idx); err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	removeStaleGrams(p.dir, keep)
	rec.Files, rec.Bytes, rec.Seconds = len(idx.Files), idx.Bytes, p.spent.Seconds()
	return rec, nil
}

// removeStaleGrams deletes the Gram files of an earlier calibration in dir: regular files
// named like ours, not in keep, that start with GramMagic. Nothing else is touched.
func removeStaleGrams(dir string, keep map[string]bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if keep[e.Name()] || !e.Type().IsRegular() || !gramFileName.MatchString(e.Name()) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, _, err := openHessianFile(path)
		if err != nil {
			continue
		}
		var m [len(GramMagic)]byte
		_, err = io.ReadFull(f, m[:])
		f.Close()
		if err == nil && string(m[:]) == GramMagic {
			os.Remove(path)
		}
	}
}
