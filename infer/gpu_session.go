package infer

import (
	"fmt"
	"runtime"

	"github.com/tq-project/tq/infer/cuda"
)

// gpuSession is the device state of one session: the KV cache of the device blocks and the
// scratch buffers of a batch of capT tokens.
type gpuSession struct {
	be   cuda.Backend
	kv   *cuda.KVCache
	capT int

	x, h, q, k, v, att, tmp cuda.Buffer // hidden state (residual stream) and per-layer activations
	g, u                    cuda.Buffer // FFN intermediates (dense width, or expert width × rows)
	logits                  cuda.Buffer // MoE router logits
	xe, ye, slot            cuda.Buffer // MoE: gathered rows, expert output, per-(token, slot) outputs
	selD, wtsD              cuda.Buffer // MoE: the routing left on the device (fused decode path)
	hh, lg                  cuda.Buffer // LM head: normalised rows and their logits (headRows rows)
	bufs                    []cuda.Buffer

	// hybrid blocks (qwen35, qwen35moe): per device Gated DeltaNet block its convolution rows
	// and delta-rule states (fixed size), and the batch's intermediates
	conv, ssm                   []cuda.Buffer
	mixed, cout, z, y, bb, aa   cuda.Buffer
	qg, gate, sh1, sh2, shg, ff cuda.Buffer
	stateBufs                   []cuda.Buffer

	sel            []int32   // routing: T·k experts
	wts            []float32 // and their weights
	tokIdx, slotIx []int32   // rows routed to one expert: token index, (token, slot) index
	released       bool

	// the device blocks of a single-token step, recorded once and replayed (Options.GPUGraphs)
	graph         *cuda.Graph
	graphErr      error // why no graph is recorded (then every step runs eagerly)
	graphLaunches int   // steps that replayed the graph
}

// headRows is how many rows the device LM head computes per call (bounds the logits buffer); a
// variable for the tests.
var headRows = 32

// devOps runs backend operations until the first error, which it keeps.
type devOps struct {
	be  cuda.Backend
	err error
}

func (d *devOps) do(f func() error) {
	if d.err == nil {
		d.err = f()
	}
}

// gpuState returns the session's device state, creating it or growing its buffers for T tokens.
func (s *Session) gpuState(T int) (*gpuSession, error) {
	g := s.m.gpu
	ds := s.gpu
	if ds == nil {
		g.mu.Lock()
		closed := g.closed
		g.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("infer: the model is closed")
		}
		c := s.m.cfg
		ds = &gpuSession{be: g.be}
		if g.nKV > 0 {
			kv, err := g.be.NewKVCache(g.nKV, s.kv.ctx, c.KVDim(), s.m.tk, s.m.tv)
			if err != nil {
				return nil, fmt.Errorf("infer: device KV cache: %w", err)
			}
			ds.kv = kv
		}
		if err := ds.allocStates(c, g.nState); err != nil {
			ds.release()
			return nil, fmt.Errorf("infer: device recurrent state: %w", err)
		}
		g.mu.Lock()
		g.sessions[ds] = struct{}{}
		g.mu.Unlock()
		s.gpu = ds
		// Free the device memory when the session is dropped (Model.Close frees it earlier).
		runtime.AddCleanup(s, func(ds *gpuSession) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if _, ok := g.sessions[ds]; ok {
				delete(g.sessions, ds)
				ds.release()
			}
		}, ds)
	}
	if T <= ds.capT {
		return ds, nil
	}
	if err := ds.grow(s.m, T); err != nil {
		return nil, fmt.Errorf("infer: device buffers for %d tokens: %w", T, err)
	}
	return ds, nil
}

// allocStates allocates the convolution and delta-rule states of n device Gated DeltaNet blocks.
func (ds *gpuSession) allocStates(c *Config, n int) error {
	if n == 0 {
		return nil
	}
	h := c.Hybrid
	alloc := func(n int) (cuda.Buffer, error) {
		b, err := ds.be.Alloc(max(n, 1))
		if err == nil {
			ds.stateBufs = append(ds.stateBufs, b)
		}
		return b, err
	}
	for range n {
		conv, err := alloc((h.ConvK - 1) * h.ConvDim())
		if err != nil {
			return err
		}
		ssm, err := alloc(h.NVHeads * h.DState * h.DState)
		if err != nil {
			return err
		}
		ds.conv, ds.ssm = append(ds.conv, conv), append(ds.ssm, ssm)
	}
	return nil
}

// grow replaces the scratch buffers by ones for T tokens.
func (ds *gpuSession) grow(m *Model, T int) error {
	c := m.cfg
	g := m.gpu
	ds.dropGraph() // it refers to the old buffers
	ds.freeBufs()
	ds.capT = 0
	var err error
	alloc := func(n int) cuda.Buffer {
		if err != nil || n <= 0 {
			return cuda.Buffer{}
		}
		b, e := ds.be.Alloc(n)
		if e != nil {
			err = e
			return cuda.Buffer{}
		}
		ds.bufs = append(ds.bufs, b)
		return b
	}
	E := c.NEmbd
	ff := 0
	moe := false
	for _, b := range g.blocks {
		if b.moe != nil {
			moe = true
			ff = max(ff, b.moe.gate.out)
		} else {
			ff = max(ff, b.gate.Rows)
		}
	}
	ds.x, ds.h, ds.tmp = alloc(T*E), alloc(T*E), alloc(T*E)
	ds.q, ds.att = alloc(T*c.QDim()), alloc(T*c.QDim())
	ds.k, ds.v = alloc(T*c.KVDim()), alloc(T*c.KVDim())
	rowsFF := T
	if moe {
		rowsFF = max(T, c.NExpertUse) // the fused decode path keeps every slot's expert rows
	}
	ds.g, ds.u = alloc(rowsFF*ff), alloc(rowsFF*ff)
	if moe {
		k := c.NExpertUse
		ds.logits = alloc(T * c.NExpert)
		ds.xe, ds.ye, ds.slot = alloc(T*E), alloc(T*E), alloc(T*k*E)
		ds.selD, ds.wtsD = alloc(T*k), alloc(T*k)
		ds.sel = make([]int32, T*k)
		ds.wts = make([]float32, T*k)
		ds.tokIdx = make([]int32, 0, T)
		ds.slotIx = make([]int32, 0, T)
	}
	if h := c.Hybrid; h != nil {
		ds.mixed, ds.cout = alloc(T*h.ConvDim()), alloc(T*h.ConvDim())
		ds.z, ds.y = alloc(T*h.ValueDim()), alloc(T*h.ValueDim())
		ds.bb, ds.aa = alloc(T*h.NVHeads), alloc(T*h.NVHeads)
		ds.qg, ds.gate = alloc(2*T*c.QDim()), alloc(T*c.QDim())
		if h.NFFShexp > 0 {
			ds.sh1, ds.sh2, ds.shg, ds.ff = alloc(T*h.NFFShexp), alloc(T*h.NFFShexp), alloc(T), alloc(T*E)
		}
	}
	if g.head {
		n := min(T, headRows)
		ds.hh, ds.lg = alloc(n*E), alloc(n*c.NVocab)
	}
	if err != nil {
		ds.freeBufs()
		return err
	}
	ds.capT = T
	return nil
}

func (ds *gpuSession) freeBufs() error {
	var first error
	for _, b := range ds.bufs {
		if err := ds.be.Free(b); err != nil && first == nil {
			first = err
		}
	}
	ds.bufs = nil
	return first
}

// release frees the session's device memory (once); the model's lock is held.
func (ds *gpuSession) release() error {
	if ds.released {
		return nil
	}
	ds.released = true
	ds.dropGraph()
	err := ds.freeBufs()
	for _, b := range ds.stateBufs {
		if e := ds.be.Free(b); e != nil && err == nil {
			err = e
		}
	}
	ds.stateBufs, ds.conv, ds.ssm = nil, nil, nil
	if ds.kv != nil {
		if e := ds.be.FreeKVCache(ds.kv); e != nil && err == nil {
			err = e
		}
	}
	ds.capT = 0
	return err
}

// runBlocks runs every block on the T rows of s.x at positions s.pos... With device blocks, the
// hidden state is written to the device before the first one and, unless the LM head is on the
// device too, read back into s.x after the last one.
func (s *Session) runBlocks(T int) error {
	g := s.m.gpu
	if g == nil {
		for il, b := range s.m.blocks {
			s.layer(b, il, T, s.pos)
		}
		return nil
	}
	if s.obs != nil {
		return errObserverGPU
	}
	ds, err := s.gpuState(T)
	if err != nil {
		return err
	}
	if ds.released {
		return fmt.Errorf("infer: the model is closed")
	}
	for il := 0; il < g.first; il++ {
		s.layer(s.m.blocks[il], il, T, s.pos)
	}
	E := s.m.cfg.NEmbd
	ops := &devOps{be: ds.be}
	ops.do(func() error { return ds.be.Write(ds.x, s.x[:T*E]) })
	if ops.err == nil {
		if gr := s.gpuGraph(ds, T); gr == nil {
			s.gpuBlocks(ops, ds, T)
		} else if err := gr.Launch(s.pos); err != nil {
			// The launch was refused (nothing ran): run this step and the later ones eagerly.
			ds.graphErr = fmt.Errorf("graph launch: %w", err)
			ds.dropGraph()
			s.gpuBlocks(ops, ds, T)
		} else {
			ds.graphLaunches++
		}
	}
	if !g.head {
		ops.do(func() error { return ds.be.Read(s.x[:T*E], ds.x) })
	}
	if ops.err != nil {
		return fmt.Errorf("infer: GPU layers: %w", ops.err)
	}
	return nil
}

// gpuBlocks queues every device block on the T rows of the device hidden state at positions
// s.pos...
func (s *Session) gpuBlocks(ops *devOps, ds *gpuSession, T int) {
	g := s.m.gpu
	for i, b := range g.blocks {
		if ops.err != nil {
			return
		}
		if b.hy != nil {
			s.gpuHybridLayer(ops, ds, b, g.first+i, T, s.pos)
		} else {
			s.gpuLayer(ops, ds, b, g.first+i, T, s.pos)
		}
	}
}

// gpuGraph returns the recorded graph of the device blocks for a single-token step, recording
// it at the first such step after position 0 (position 0 clears recurrent states, which later
// steps do not), or nil when this step runs kernel by kernel: batches, no Options.GPUGraphs, a
// backend without graphs, or blocks whose work leaves the device (experts on the CPU), which
// make the recording fail once (graphErr) and the session run eagerly from then on. Recording
// runs nothing: the caller launches the graph for this step too.
func (s *Session) gpuGraph(ds *gpuSession, T int) *cuda.Graph {
	if T != 1 || s.pos == 0 || !s.m.gpu.graphs || ds.graphErr != nil {
		return nil
	}
	if ds.graph != nil {
		return ds.graph
	}
	cp, ok := ds.be.(cuda.Capturer)
	if !ok || !cp.GraphsSupported() {
		ds.graphErr = cuda.ErrNoGraphs
		return nil
	}
	if err := cp.BeginCapture(); err != nil {
		ds.graphErr = err
		return nil
	}
	ended := false
	defer func() {
		if !ended { // a panic while recording: the device must not stay reserved
			cp.AbortCapture()
		}
	}()
	ops := &devOps{be: ds.be}
	s.gpuBlocks(ops, ds, T)
	ended = true
	if ops.err != nil {
		cp.AbortCapture()
		ds.graphErr = ops.err
		return nil
	}
	gr, err := cp.EndCapture()
	if err != nil {
		ds.graphErr = err
		return nil
	}
	ds.graph = gr
	return gr
}

// GPUGraphSteps reports how many single-token steps replayed the session's recorded CUDA graph
// (Options.GPUGraphs) and, when recording or replaying failed, why the session runs kernel by
// kernel instead (nil otherwise, and without device blocks or GPUGraphs).
func (s *Session) GPUGraphSteps() (steps int, err error) {
	if s.gpu == nil {
		return 0, nil
	}
	return s.gpu.graphLaunches, s.gpu.graphErr
}

// dropGraph frees the session's recorded graph (its buffers are about to change or go).
func (ds *gpuSession) dropGraph() {
	if ds.graph != nil {
		ds.graph.Destroy()
		ds.graph = nil
	}
}

// gpuLayer runs block il on the T rows of the device hidden state at positions
// pos0..pos0+T-1, the device twin of Session.layer.
func (s *Session) gpuLayer(ops *devOps, ds *gpuSession, b *gpuBlock, il, T, pos0 int) {
	c := s.m.cfg
	g := s.m.gpu
	be := ds.be
	E, hd := c.NEmbd, c.HeadDim
	qd, kd := c.QDim(), c.KVDim()
	eps := float32(c.RMSEps)
	bias := func(y, bb cuda.Buffer, n int) {
		if !bb.IsZero() {
			ops.do(func() error { return be.AddRows(y, bb, n, T) })
		}
	}
	ops.do(func() error { return be.RMSNorm(ds.h, ds.x, b.attnNorm, E, T, eps) })
	ops.do(func() error { return be.MatMul(ds.q, b.q, 0, ds.h, T) })
	bias(ds.q, b.bq, qd)
	ops.do(func() error { return be.MatMul(ds.k, b.k, 0, ds.h, T) })
	bias(ds.k, b.bk, kd)
	ops.do(func() error { return be.MatMul(ds.v, b.v, 0, ds.h, T) })
	bias(ds.v, b.bv, kd)
	if !b.qNorm.IsZero() {
		ops.do(func() error { return be.RMSNorm(ds.q, ds.q, b.qNorm, hd, T*c.NHead, eps) })
		ops.do(func() error { return be.RMSNorm(ds.k, ds.k, b.kNorm, hd, T*c.NHeadKV, eps) })
	}
	ops.do(func() error { return be.RoPE(ds.q, T, c.NHead, hd, pos0, &g.rope) })
	ops.do(func() error { return be.RoPE(ds.k, T, c.NHeadKV, hd, pos0, &g.rope) })
	ops.do(func() error { return be.KVStore(ds.kv, b.kv, pos0, T, ds.k, ds.v) })
	ops.do(func() error { return be.Attention(ds.att, ds.q, ds.kv, b.kv, pos0, T, c.NHead, c.NHeadKV, hd) })
	ops.do(func() error { return be.MatMul(ds.tmp, b.o, 0, ds.att, T) })
	bias(ds.tmp, b.bo, E)
	ops.do(func() error { return be.Add(ds.x, ds.tmp, T*E) })
	ops.do(func() error { return be.RMSNorm(ds.h, ds.x, b.ffnNorm, E, T, eps) })
	s.gpuFFN(ops, ds, b, il, T)
	ops.do(func() error { return be.Add(ds.x, ds.tmp, T*E) })
}

// gpuFFN runs block il's feed-forward network (dense SwiGLU or routed experts) on the T
// normalised rows in ds.h into ds.tmp.
func (s *Session) gpuFFN(ops *devOps, ds *gpuSession, b *gpuBlock, il, T int) {
	be := ds.be
	if b.moe != nil {
		s.gpuMoE(ops, ds, b, il, T)
		return
	}
	n := b.gate.Rows
	ops.do(func() error { return be.MatMul(ds.g, b.gate, 0, ds.h, T) })
	ops.do(func() error { return be.MatMul(ds.u, b.up, 0, ds.h, T) })
	ops.do(func() error { return be.SwiGLU(ds.g, ds.u, T*n) })
	ops.do(func() error { return be.MatMul(ds.tmp, b.down, 0, ds.g, T) })
}

// outputLogits returns the logits of the given rows of the last batch: from the device when the
// LM head is there, else from s.x on the host.
func (s *Session) outputLogits(rows []int) ([][]float32, error) {
	g := s.m.gpu
	if g == nil || !g.head {
		return s.logits(rows), nil
	}
	ds := s.gpu
	c := s.m.cfg
	E, V := c.NEmbd, c.NVocab
	be := ds.be
	flat := make([]float32, len(rows)*V)
	idx := make([]int32, 0, headRows)
	ops := &devOps{be: be}
	for r0 := 0; r0 < len(rows) && ops.err == nil; r0 += headRows {
		r1 := min(len(rows), r0+headRows)
		n := r1 - r0
		idx = idx[:0]
		for _, r := range rows[r0:r1] {
			idx = append(idx, int32(r))
		}
		if n == 1 { // (decode) normalise the row in place of gathering it: no host copy
			r := rows[r0]
			ops.do(func() error { return be.RMSNorm(ds.hh, ds.x.Slice(r*E, E), g.outNorm, E, 1, float32(c.RMSEps)) })
		} else {
			ops.do(func() error { return be.GatherRows(ds.hh, ds.x, idx, E) })
			ops.do(func() error { return be.RMSNorm(ds.hh, ds.hh, g.outNorm, E, n, float32(c.RMSEps)) })
		}
		ops.do(func() error { return be.MatMul(ds.lg, g.output, 0, ds.hh, n) })
		ops.do(func() error { return be.Read(flat[r0*V:r1*V], ds.lg) })
	}
	if ops.err != nil {
		return nil, fmt.Errorf("infer: GPU LM head: %w", ops.err)
	}
	out := make([][]float32, len(rows))
	for i := range out {
		out[i] = flat[i*V : (i+1)*V : (i+1)*V]
	}
	return out, nil
}
