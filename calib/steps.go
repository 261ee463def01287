package calib

import (
	"errors"
	"fmt"
	"github.com/tq-project/tq/internal/modelsrc"
	"math/rand/v2"
	"runtime"
	"sort"
	"time"

	"github.com/tq-project/tq/infer"
)

// embed is step 0: the token embeddings of every sequence.
func (r *run) embed() (*stepResult, *Stats, error) {
	t0 := time.Now()
	E := r.cfg.NEmbd
	var total int64
	for _, s := range r.opts.Sequences {
		total += int64(len(s.Tokens))
	}
	var done int64
	for i, s := range r.opts.Sequences {
		if err := r.ctx.Err(); err != nil {
			return nil, nil, err
		}
		x := r.scratch[:len(s.Tokens)*E]
		for j, tok := range s.Tokens {
			if err := r.src.ReadRows("token_embd.weight", int64(tok), 1, x[j*E:(j+1)*E]); err != nil {
				return nil, nil, fmt.Errorf("calib: %w", err)
			}
		}
		if err := r.hidden.put(i, x); err != nil {
			return nil, nil, err
		}
		done += int64(len(s.Tokens))
		r.progress(Progress{Stage: "embed", Layer: -1, Seq: i + 1, NSeq: len(r.opts.Sequences), Tokens: done, TotalTokens: total, Elapsed: time.Since(t0)})
	}
	return &stepResult{Seconds: time.Since(t0).Seconds()}, NewStats(), nil
}

// reservoir keeps a uniform sample of rows (Algorithm R, deterministic seed).
type reservoir struct {
	cap, cols int
	rows      []float32
	n         int // rows kept
	seen      int64
	rng       *rand.Rand
}

func newReservoir(n, cols int, seed uint64) *reservoir {
	return &reservoir{cap: n, cols: cols, rows: make([]float32, 0, min(n, 4096)*cols), rng: rand.New(rand.NewPCG(seed, 0x7463616c6962))}
}

func (s *reservoir) add(x []float32, n int) {
	c := s.cols
	for i := 0; i < n; i++ {
		row := x[i*c : (i+1)*c]
		s.seen++
		if s.n < s.cap {
			s.rows = append(s.rows, row...)
			s.n++
			continue
		}
		if j := s.rng.Int64N(s.seen); j < int64(s.cap) {
			copy(s.rows[int(j)*c:], row)
		}
	}
}

// layer runs block il over every sequence, completes the statistics of never-routed experts
// and searches the block's tensors.
func (r *run) layer(il int) (*stepResult, *Stats, error) {
	t0 := time.Now()
	c := r.cfg
	r.runner.Release()
	runtime.GC()
	lw, err := loadLayer(r.src, il, r.threadCount())
	if err != nil {
		return nil, nil, err
	}
	if err := r.runner.LoadBlock(il, &metaSource{md: r.md, tensors: lw.tensors}); err != nil {
		return nil, nil, fmt.Errorf("calib: %w", err)
	}
	ss := NewStats()
	col := NewCollector(ss, c.NExpert, c.NExpertUse)
	gc := r.newGramCollector(il + 1)
	col.gram = gc
	var sample *reservoir
	if c.NExpert > 0 && r.opts.UncoveredSample > 0 {
		sample = newReservoir(r.opts.UncoveredSample, c.NEmbd, uint64(il)+1)
		col.Sample = func(_ int, x []float32, n, _ int) { sample.add(x, n) }
	}
	var total, done int64
	for _, s := range r.opts.Sequences {
		total += int64(len(s.Tokens))
	}
	tf := time.Now()
	for i, s := range r.opts.Sequences {
		if err := r.ctx.Err(); err != nil {
			return nil, nil, err
		}
		x, err := r.hidden.get(i, r.scratch)
		if err != nil {
			return nil, nil, err
		}
		col.SetValid(s.Valid)
		if err := r.runner.Forward(x, len(s.Tokens), col); err != nil {
			return nil, nil, fmt.Errorf("calib: block %d, sequence %d: %w", il, i, err)
		}
		if err := col.Err(); err != nil {
			return nil, nil, err
		}
		if err := r.hidden.put(i, x); err != nil {
			return nil, nil, err
		}
		done += int64(len(s.Tokens))
		r.progress(Progress{Stage: "layer", Layer: il, Seq: i + 1, NSeq: len(r.opts.Sequences), Tokens: done, TotalTokens: total, Elapsed: time.Since(t0)})
	}
	r.fwdTime += time.Since(tf)
	sr := &stepResult{Choices: map[string]*TensorChoice{}}
	if c.NExpert > 0 {
		var hist *LayerRouting
		for _, h := range ss.Routing {
			if h.Layer == il {
				hist = h
			}
		}
		if hist == nil {
			hist = NewLayerRouting(il, c.NExpert, c.NExpertUse)
			ss.Routing = append(ss.Routing, hist)
		}
		cov := hist.Coverage()
		sr.Coverage = &cov
		if len(cov.Uncovered) > 0 {
			n, err := r.fillUncovered(il, ss, lw, cov.Uncovered, sample, gc)
			if err != nil {
				return nil, nil, err
			}
			sr.Uncovered = n
		}
	}
	sample = nil
	// The step's Gram file is compressed and written (and fsynced) while the search runs: the
	// search only reads the statistics and the weights, the writer only the matrices and the
	// statistics, and the step counts as finished only after both (the accumulators stay
	// live through the search; the memory estimate has always counted both).
	var saved chan error
	var saveTime time.Duration
	if gc != nil {
		names := make([]string, len(lw.descs))
		for i, d := range lw.descs {
			names[i] = d.Name
		}
		save, err := r.flushStepHessians(gc, names, ss)
		if err != nil {
			return nil, nil, err
		}
		col.gram = nil // the accumulators are not needed by the search
		saved = make(chan error, 1)
		go func() {
			t := time.Now()
			err := save()
			saveTime = time.Since(t)
			saved <- err
		}()
	}
	waitSaved := func() error {
		if saved == nil {
			return nil
		}
		err := <-saved
		saved = nil
		gc.plan.spent += saveTime
		gc = nil
		// The accumulators were most of the live heap: collecting now sets the next heap goal
		// to twice what remains rather than twice the accumulators, which bounds the garbage
		// the next step can pile up (the full calibration's peak RSS).
		runtime.GC()
		return err
	}
	r.progress(Progress{Stage: "search", Layer: il, Elapsed: time.Since(t0)})
	for _, d := range lw.descs {
		if !r.searched(d.Name) {
			continue
		}
		name := d.Name
		cols, rows := int(d.Shape[0]), int(d.Shape[1])
		read := func(e, r0, n int, dst []float32) error {
			lw.rows(name, e*rows+r0, n, cols, dst)
			return nil
		}
		ch, err := r.search(d, read, ss)
		if err != nil {
			waitSaved() // no writer outlives the step; the search's error is the one reported
			return nil, nil, err
		}
		sr.Choices[d.Name] = ch
	}
	if err := waitSaved(); err != nil {
		return nil, nil, err
	}
	ss.Meta.LayersDone = il + 1
	r.runner.Release()
	sr.Seconds = time.Since(t0).Seconds()
	return sr, ss, nil
}

func (r *run) searchOpts() *SearchOptions {
	return &SearchOptions{Config: r.turbo, Threads: r.opts.Threads, NoBaseline: r.opts.NoBaseline,
		NoSensitivity: r.opts.NoSensitivity, SampleRows: r.opts.SearchRows}
}

// fillUncovered gives never-routed experts statistics (and, with gc, Gram matrices) by running
// them on the sampled FFN inputs of the layer as if every sampled token had been routed to them.
func (r *run) fillUncovered(il int, ss *Stats, lw *layerWeights, experts []int, sample *reservoir, gc *gramCollector) (int, error) {
	if sample == nil || sample.n == 0 {
		r.warn("layer %d: experts %v were never routed to and keep no statistics (uncovered-expert fallback disabled or no tokens)", il, experts)
		return 0, nil
	}
	c := r.cfg
	E, F, S := c.NEmbd, c.NFFExp, sample.n
	names := [3]string{blkName(il, "ffn_gate_exps.weight"), blkName(il, "ffn_up_exps.weight"), blkName(il, "ffn_down_exps.weight")}
	var ts [3]*TensorStats
	for i, n := range names {
		if !lw.has(n) {
			return 0, fmt.Errorf("calib: block %d has no %s", il, n)
		}
		cols := E
		if i == 2 {
			cols = F
		}
		ts[i] = ss.Tensors[n]
		if ts[i] == nil {
			ts[i] = NewTensorStats(n, cols, c.NExpert)
			ss.Tensors[n] = ts[i]
		}
	}
	x := sample.rows[:S*E]
	g := make([]float32, S*F)
	u := make([]float32, S*F)
	var wg, wu []float32 // float32 views or widened copies of one expert's matrices
	for _, e := range experts {
		wg = lw.floats(names[0], e*F*E, F*E, wg)
		wu = lw.floats(names[1], e*F*E, F*E, wu)
		if err := infer.ExpertActivations(x, S, E, wg, wu, F, g, u); err != nil {
			return 0, fmt.Errorf("calib: block %d expert %d: %w", il, e, err)
		}
		for i := 0; i < 2; i++ {
			ts[i].Add(e, x, S)
			ts[i].Synthetic[e] = true
		}
		ts[2].Add(e, g, S)
		ts[2].Synthetic[e] = true
		if gc != nil { // the per-expert Gram matrices see the same rows
			if err := gc.expert(names[0], e, x, S, E); err != nil {
				return 0, err
			}
			if err := gc.expert(names[2], e, g, S, F); err != nil {
				return 0, err
			}
		}
	}
	r.warn("layer %d: experts %v were never routed to; their statistics come from %d sampled tokens of the layer run through them", il, experts, S)
	return len(experts), nil
}

func blkName(il int, s string) string { return fmt.Sprintf("blk.%d.%s", il, s) }

// head is the last step: the statistics of the LM head's input (the final normalised hidden
// states) and the search of tensors outside the blocks.
func (r *run) head() (*stepResult, *Stats, error) {
	t0 := time.Now()
	c := r.cfg
	E := c.NEmbd
	ss := NewStats()
	sr := &stepResult{Choices: map[string]*TensorChoice{}}
	headName := "output.weight"
	if _, ok := r.descs[headName]; !ok {
		headName = "token_embd.weight" // tied embeddings: the embedding matrix is the head
	}
	norm := make([]float32, E)
	if d, ok := r.descs["output_norm.weight"]; ok {
		if err := readTensor(r.src, d, norm); err != nil {
			return nil, nil, fmt.Errorf("calib: %w", err)
		}
	} else {
		return nil, nil, errors.New("calib: the model has no output_norm.weight")
	}
	ts := NewTensorStats(headName, E, 1)
	ss.Tensors[headName] = ts
	row := make([]float32, E)
	eps := float32(c.RMSEps)
	gc := r.newGramCollector(c.NLayer + 1)
	for i, s := range r.opts.Sequences {
		if err := r.ctx.Err(); err != nil {
			return nil, nil, err
		}
		x, err := r.hidden.get(i, r.scratch)
		if err != nil {
			return nil, nil, err
		}
		for t := 0; t < s.Valid; t++ {
			infer.RMSNorm(row, x[t*E:(t+1)*E], norm, eps)
			ts.AddRow(0, row)
			if gc != nil {
				if err := gc.linear(headName, row, 1, E); err != nil {
					return nil, nil, err
				}
			}
		}
		r.progress(Progress{Stage: "head", Layer: c.NLayer, Seq: i + 1, NSeq: len(r.opts.Sequences), Elapsed: time.Since(t0)})
	}
	if gc != nil {
		if err := r.writeStepHessians(gc, []string{headName}, ss); err != nil {
			return nil, nil, err
		}
	}
	// search tensors outside the blocks (only when listed in layers_to_quantize)
	var names []string
	for name := range r.descs {
		if Layer(name) < 0 && r.searched(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		d := r.descs[name]
		if len(d.Shape) != 2 {
			continue
		}
		read := func(e, r0, n int, dst []float32) error { return readMatrixRows(r.src, d, e, r0, n, dst) }
		ch, err := r.search(d, read, ss)
		if err != nil {
			return nil, nil, err
		}
		sr.Choices[name] = ch
	}
	sr.Seconds = time.Since(t0).Seconds()
	return sr, ss, nil
}

// search runs the parameter search of tensor d with the importance and routing shares of ss.
func (r *run) search(d modelsrc.TensorDesc, read MatrixReader, ss *Stats) (*TensorChoice, error) {
	ts := ss.Tensors[d.Name]
	imp := func(e int) []float32 {
		if ts == nil {
			return nil
		}
		v, _ := ts.Importance(e)
		return v
	}
	share := func(int) float64 { return 1 }
	if len(d.Shape) > 2 {
		il := Layer(d.Name)
		for _, h := range ss.Routing {
			if h.Layer == il && h.NExpert == int(d.Shape[2]) {
				share = func(e int) float64 {
					if h.Tokens == 0 {
						return 0
					}
					return float64(h.Counts[e]) / float64(h.Tokens)
				}
			}
		}
	}
	return SearchTensor(d.Name, d.Shape, read, imp, share, r.searchOpts())
}

// readMatrixRows reads rows [r0, r0+n) of matrix e of a tensor from the weight source.
func readMatrixRows(src WeightSource, d modelsrc.TensorDesc, e, r0, n int, dst []float32) error {
	rows := d.Shape[1]
	return src.ReadRows(d.Name, int64(e)*rows+int64(r0), int64(n), dst[:int64(n)*d.Shape[0]])
}
