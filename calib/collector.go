package calib

import (
	"fmt"
	"strings"

	"github.com/tq-project/tq/infer"
)

// Collector accumulates activation statistics from the observer calls of a forward pass
// (infer.Observer): Σx² and max|x| per input column of every linear weight, per expert for
// stacked expert tensors, and the MoE routing histogram. Rows at positions >= the valid length
// of the current sequence (padding) are left out.
//
// A sequence may be evaluated in several batches: Collector counts the rows each weight has
// seen since SetValid to know the positions of a call's rows (calls arrive in position order,
// and an expert receives the tokens routed to it in position order).
type Collector struct {
	Stats *Stats
	// NExpert and K describe the MoE layers (0 for dense models).
	NExpert, K int
	// Sample, when not nil, receives the valid input rows of every MoE router (the FFN input
	// of the layer), for the uncovered-expert fallback.
	Sample func(layer int, x []float32, n, cols int)
	// gram, when not nil, accumulates the full Gram matrices of the step's inputs from the
	// valid rows of every weight's calls (per expert for routed experts).
	gram *gramCollector

	valid  int // valid rows of the current sequence
	err    error
	routed map[int]*routeState // per layer: valid-token count per expert of the current call
	seen   map[string]int      // rows of the current sequence each dense weight has seen
}

type routeState struct {
	validPerExpert []int
	totalPerExpert []int
	seen           int // tokens of the current sequence routed so far
}

// NewCollector returns a collector adding into s.
func NewCollector(s *Stats, nExpert, k int) *Collector {
	return &Collector{Stats: s, NExpert: nExpert, K: k, routed: map[int]*routeState{}, seen: map[string]int{}}
}

// SetValid starts a new sequence whose first n tokens are real (the rest is padding).
func (c *Collector) SetValid(n int) {
	c.valid = n
	clear(c.seen)
	for _, rs := range c.routed {
		rs.seen = 0
	}
}

// Err returns the first inconsistency seen (an observer cannot return errors).
func (c *Collector) Err() error { return c.err }

func (c *Collector) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

func (c *Collector) tensor(name string, cols, nmat int) *TensorStats {
	t := c.Stats.Tensors[name]
	if t == nil {
		t = NewTensorStats(name, cols, nmat)
		c.Stats.Tensors[name] = t
	}
	if t.Cols != cols || t.NMat != nmat {
		c.fail(fmt.Errorf("calib: %s: activations of %d columns for %d matrices, earlier %d/%d", name, cols, nmat, t.Cols, t.NMat))
		return nil
	}
	return t
}

// Linear implements infer.Observer.
func (c *Collector) Linear(name string, expert int, x []float32, n, cols int) {
	if c.err != nil {
		return
	}
	if len(x) < n*cols {
		c.fail(fmt.Errorf("calib: %s: %d values for %d rows of %d", name, len(x), n, cols))
		return
	}
	if expert < 0 {
		off := c.seen[name]
		c.seen[name] = off + n
		v := max(0, min(n, c.valid-off))
		if t := c.tensor(name, cols, 1); t != nil && v > 0 {
			t.Add(0, x, v)
		}
		if c.gram != nil && v > 0 {
			if err := c.gram.linear(name, x[:v*cols], v, cols); err != nil {
				c.fail(err)
				return
			}
		}
		if c.Sample != nil && strings.HasSuffix(name, ".ffn_gate_inp.weight") && v > 0 {
			c.Sample(Layer(name), x[:v*cols], v, cols)
		}
		return
	}
	if expert >= c.NExpert {
		c.fail(fmt.Errorf("calib: %s: expert %d out of range (%d experts)", name, expert, c.NExpert))
		return
	}
	rs := c.routed[Layer(name)]
	if rs == nil {
		c.fail(fmt.Errorf("calib: %s: expert activations without a routing call", name))
		return
	}
	if n != rs.totalPerExpert[expert] {
		c.fail(fmt.Errorf("calib: %s: expert %d got %d rows, routing selected %d", name, expert, n, rs.totalPerExpert[expert]))
		return
	}
	v := min(n, rs.validPerExpert[expert])
	if t := c.tensor(name, cols, c.NExpert); t != nil && v > 0 {
		t.Add(expert, x, v)
	}
	if c.gram != nil && v > 0 {
		if err := c.gram.expert(name, expert, x[:v*cols], v, cols); err != nil {
			c.fail(err)
		}
	}
}

// DeltaNet implements infer.DeltaNetObserver: the Gram collector's per-head matrices.
func (c *Collector) DeltaNet(_ int, tr *infer.DeltaNetTrace) {
	if c.err != nil || c.gram == nil {
		return
	}
	if err := c.gram.deltaNet(tr, c.valid); err != nil {
		c.fail(err)
	}
}

// Route implements infer.Observer.
func (c *Collector) Route(layer int, experts []int32, weights []float32, n, k int) {
	if c.err != nil {
		return
	}
	if c.NExpert <= 0 || k != c.K {
		c.fail(fmt.Errorf("calib: layer %d: routing with k=%d, collector set up for %d of %d experts", layer, k, c.K, c.NExpert))
		return
	}
	rs := c.routed[layer]
	if rs == nil {
		rs = &routeState{validPerExpert: make([]int, c.NExpert), totalPerExpert: make([]int, c.NExpert)}
		c.routed[layer] = rs
	}
	clear(rs.validPerExpert)
	clear(rs.totalPerExpert)
	v := max(0, min(n, c.valid-rs.seen))
	rs.seen += n
	for i := 0; i < n*k; i++ {
		e := experts[i]
		if e < 0 || int(e) >= c.NExpert {
			c.fail(fmt.Errorf("calib: layer %d: expert id %d out of range", layer, e))
			return
		}
		rs.totalPerExpert[e]++
		if i/k < v {
			rs.validPerExpert[e]++
		}
	}
	var hist *LayerRouting
	for _, r := range c.Stats.Routing {
		if r.Layer == layer {
			hist = r
		}
	}
	if hist == nil {
		hist = NewLayerRouting(layer, c.NExpert, k)
		c.Stats.Routing = append(c.Stats.Routing, hist)
	}
	if v > 0 {
		if err := hist.Add(experts[:v*k], weights[:v*k], v, k); err != nil {
			c.fail(err)
		}
	}
}
