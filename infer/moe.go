package infer

import "sort"

// moeScratch holds the buffers of a mixture-of-experts FFN pass.
type moeScratch struct {
	logits  []float32
	sel     []int32
	wts     []float32
	slotOut []float32 // T·k rows of n_embd: each (token, slot) expert output
	xe, ge  []float32
	ue, ye  []float32
	rows    []int        // the (token*k + slot) entries grouped by expert
	groups  []expertRows // each routed expert's share of rows
	count   []int
	order   []int
}

// topK writes the indices of the k largest p into sel in descending order (ties: lower index
// first).
func topK(p []float32, k int, sel []int32, order []int) {
	order = order[:len(p)]
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return p[order[a]] > p[order[b]] })
	for j := 0; j < k; j++ {
		sel[j] = int32(order[j])
	}
}

func (f *moeFFN) forward(s *Session, il int, h []float32, T int, out []float32) {
	nE, k := f.nExpert, f.nUsed
	ms := &s.moe
	ms.logits = grow(ms.logits, T*nE)
	if cap(ms.sel) < T*k {
		ms.sel = make([]int32, T*k)
	}
	ms.sel = ms.sel[:T*k]
	ms.wts = grow(ms.wts, T*k)
	if cap(ms.order) < nE {
		ms.order = make([]int, nE)
	}
	s.linear(f.router, h, T, ms.logits)
	for t := 0; t < T; t++ {
		p := ms.logits[t*nE : (t+1)*nE]
		softmaxInPlace(p, 1)
		sel := ms.sel[t*k : (t+1)*k]
		topK(p, k, sel, ms.order)
		var sum float64
		for _, e := range sel {
			sum += float64(p[e])
		}
		den := max(float32(sum), 6.103515625e-5)
		for j, e := range sel {
			ms.wts[t*k+j] = p[e] / den
		}
	}
	if s.obs != nil {
		s.obs.Route(il, ms.sel, ms.wts, T, k)
	}
	s.hostExperts(f, h, T, ms.sel, ms.wts, out)
}

// hostExperts runs the routed experts of f on the host: for T rows h (n_embd each) routed to
// sel (T·k experts) with weights wts, out[t] = Σ_j wts[t·k+j] · expert_sel[t·k+j](h[t]), summed in
// slot order as llama.cpp adds the weighted expert outputs. The CPU forward pass and the hybrid
// GPU path (experts kept in host memory) both use it.
func (s *Session) hostExperts(f *moeFFN, h []float32, T int, sel []int32, wts []float32, out []float32) {
	E, nE, k := s.m.cfg.NEmbd, f.nExpert, f.nUsed
	nff := f.gate.out
	ms := &s.moe
	ms.slotOut = grow(ms.slotOut, T*k*E)
	// Group the (token, slot) entries by expert, in expert order and, within an expert, in
	// entry order: ms.rows lists them, ms.groups gives each expert's share.
	if cap(ms.count) < nE {
		ms.count = make([]int, nE)
	}
	count := ms.count[:nE]
	clear(count)
	for _, e := range sel {
		count[e]++
	}
	ms.groups = ms.groups[:0]
	off := 0
	batched := true
	for e, n := range count {
		if n == 0 {
			continue
		}
		ms.groups = append(ms.groups, expertRows{e: e, off: off, n: n})
		count[e] = off // now the next free row of expert e
		off += n
		batched = batched && s.gemmFor(f.gate, n) == gemmNone && s.gemmFor(f.up, n) == gemmNone && s.gemmFor(f.down, n) == gemmNone
	}
	if cap(ms.rows) < len(sel) {
		ms.rows = make([]int, len(sel))
	}
	ms.rows = ms.rows[:len(sel)]
	for i, e := range sel {
		ms.rows[count[e]] = i
		count[e]++
	}
	R := len(sel)
	ms.xe = grow(ms.xe, R*E)
	for j, i := range ms.rows {
		t := i / k
		copy(ms.xe[j*E:(j+1)*E], h[t*E:(t+1)*E])
	}
	ms.ge = grow(ms.ge, R*nff)
	ms.ue = grow(ms.ue, R*nff)
	ms.ye = grow(ms.ye, R*E)
	if s.obs != nil {
		for _, g := range ms.groups {
			s.obs.Linear(f.gate.name, g.e, ms.xe[g.off*E:(g.off+g.n)*E], g.n, E)
			s.obs.Linear(f.up.name, g.e, ms.xe[g.off*E:(g.off+g.n)*E], g.n, E)
		}
	}
	if batched {
		// One pool run per projection for all routed experts (matmulExperts).
		a := s.expertActs(f.gate, ms.groups, ms.xe)
		s.matmulExpertsPrepared(f.gate, ms.groups, a, ms.ge)
		if f.up.k.act != f.gate.k.act || f.up.in != f.gate.in {
			a = s.expertActs(f.up, ms.groups, ms.xe)
		}
		s.matmulExpertsPrepared(f.up, ms.groups, a, ms.ue)
	} else {
		for _, g := range ms.groups {
			s.matmul(f.gate, g.e, ms.xe[g.off*E:], g.n, ms.ge[g.off*nff:])
			s.matmul(f.up, g.e, ms.xe[g.off*E:], g.n, ms.ue[g.off*nff:])
		}
	}
	swiglu(ms.ge, ms.ue, nff)
	if s.obs != nil {
		for _, g := range ms.groups {
			s.obs.Linear(f.down.name, g.e, ms.ge[g.off*nff:(g.off+g.n)*nff], g.n, nff)
		}
	}
	if batched {
		s.matmulExperts(f.down, ms.groups, ms.ge, ms.ye)
	} else {
		for _, g := range ms.groups {
			s.matmul(f.down, g.e, ms.ge[g.off*nff:], g.n, ms.ye[g.off*E:])
		}
	}
	for j, i := range ms.rows {
		copy(ms.slotOut[i*E:(i+1)*E], ms.ye[j*E:(j+1)*E])
	}
	for t := 0; t < T; t++ {
		o := out[t*E : (t+1)*E]
		for j := 0; j < k; j++ {
			w := wts[t*k+j]
			y := ms.slotOut[(t*k+j)*E : (t*k+j+1)*E]
			if j == 0 {
				for i := range o {
					o[i] = y[i] * w
				}
				continue
			}
			for i := range o {
				o[i] += y[i] * w
			}
		}
	}
}
