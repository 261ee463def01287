package infer

// gpuMoE runs the mixture-of-experts FFN of a device block on the T normalised rows in ds.h and
// leaves its output in ds.tmp. The router runs on the device and the routing comes back to the
// host (MoERoute: softmax over all experts, top-k, weights renormalised with the 6.1e-5 floor, as
// moeFFN.forward computes them). The selected experts then run where their weights live: on the
// device (gather the routed rows, SwiGLU expert, scatter into per-slot rows, weighted combination
// in slot order) or, for CPUMoE blocks, on the host with the rows read back.
func (s *Session) gpuMoE(ops *devOps, ds *gpuSession, b *gpuBlock, il, T int) {
	c := s.m.cfg
	f := b.moe
	be := ds.be
	E, nE, k := c.NEmbd, f.nExpert, f.nUsed
	sel, wts := ds.sel[:T*k], ds.wts[:T*k]
	ops.do(func() error { return be.MatMul(ds.logits, b.router, 0, ds.h, T) })
	ops.do(func() error { return be.MoERoute(ds.logits, T, nE, k, true, sel, wts) })
	if ops.err != nil {
		return
	}
	if b.gateExp == nil {
		h := s.h[:T*E]
		ops.do(func() error { return be.Read(h, ds.h) })
		if ops.err != nil {
			return
		}
		s.hostExperts(f, h, T, sel, wts, s.tmp[:T*E])
		ops.do(func() error { return be.Write(ds.tmp, s.tmp[:T*E]) })
		return
	}
	nff := b.gateExp.Rows
	for e := 0; e < nE && ops.err == nil; e++ {
		ds.tokIdx, ds.slotIx = ds.tokIdx[:0], ds.slotIx[:0]
		for i, se := range sel {
			if int(se) == e {
				ds.tokIdx = append(ds.tokIdx, int32(i/k))
				ds.slotIx = append(ds.slotIx, int32(i))
			}
		}
		n := len(ds.tokIdx)
		if n == 0 {
			continue
		}
		ops.do(func() error { return be.GatherRows(ds.xe, ds.h, ds.tokIdx, E) })
		ops.do(func() error { return be.MatMul(ds.g, b.gateExp, e, ds.xe, n) })
		ops.do(func() error { return be.MatMul(ds.u, b.upExp, e, ds.xe, n) })
		ops.do(func() error { return be.SwiGLU(ds.g, ds.u, n*nff) })
		ops.do(func() error { return be.MatMul(ds.ye, b.downEx, e, ds.g, n) })
		ops.do(func() error { return be.ScatterRows(ds.slot, ds.ye, ds.slotIx, E) })
	}
	ops.do(func() error { return be.MoECombine(ds.tmp, ds.slot, wts, T, k, E) })
}

// hostExperts runs the routed experts of f on the host: for T rows h (n_embd each) routed to
// sel (T·k experts) with weights wts, out[t] = Σ_j wts[t·k+j] · expert_sel[t·k+j](h[t]), summed in
// slot order as moeFFN.forward does.
func (s *Session) hostExperts(f *moeFFN, h []float32, T int, sel []int32, wts []float32, out []float32) {
	E, nE, k := s.m.cfg.NEmbd, f.nExpert, f.nUsed
	nff := f.gate.out
	ms := &s.moe
	ms.slotOut = grow(ms.slotOut, T*k*E)
	for e := 0; e < nE; e++ {
		ms.rows = ms.rows[:0]
		for i, se := range sel {
			if int(se) == e {
				ms.rows = append(ms.rows, i)
			}
		}
		n := len(ms.rows)
		if n == 0 {
			continue
		}
		ms.xe = grow(ms.xe, n*E)
		for j, i := range ms.rows {
			t := i / k
			copy(ms.xe[j*E:(j+1)*E], h[t*E:(t+1)*E])
		}
		ms.ge = grow(ms.ge, n*nff)
		ms.ue = grow(ms.ue, n*nff)
		ms.ye = grow(ms.ye, n*E)
		s.matmul(f.gate, e, ms.xe, n, ms.ge)
		s.matmul(f.up, e, ms.xe, n, ms.ue)
		swiglu(ms.ge, ms.ue, nff)
		s.matmul(f.down, e, ms.ge, n, ms.ye)
		for j, i := range ms.rows {
			copy(ms.slotOut[i*E:(i+1)*E], ms.ye[j*E:(j+1)*E])
		}
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
