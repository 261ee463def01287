package infer

// gpuMoE runs the mixture-of-experts FFN of a device block on the T normalised rows in ds.h and
// leaves its output in ds.tmp. The router runs on the device and the routing comes back to the
// host (MoERoute: softmax over all experts, top-k, weights renormalised with the 6.1e-5 floor, as
// moeFFN.forward computes them). The selected experts then run where their weights live: on the
// device (gather the routed rows, SwiGLU expert, scatter into per-slot rows, weighted combination
// in slot order) or, for CPUMoE blocks, on the host with the rows read back. A single token
// (decode) with its experts on the device never leaves it: MoERouteDevice, MatMulExperts per
// projection, MoECombineDevice.
func (s *Session) gpuMoE(ops *devOps, ds *gpuSession, b *gpuBlock, il, T int) {
	c := s.m.cfg
	f := b.moe
	be := ds.be
	E, nE, k := c.NEmbd, f.nExpert, f.nUsed
	sel, wts := ds.sel[:T*k], ds.wts[:T*k]
	ops.do(func() error { return be.MatMul(ds.logits, b.router, 0, ds.h, T) })
	if b.gateExp != nil && T == 1 {
		// One token (decode): the routing stays on the device and one launch per projection runs
		// every routed expert; each expert's weights are read once, as in the loop below.
		nff := b.gateExp.Rows
		ops.do(func() error { return be.MoERouteDevice(ds.logits, T, nE, k, true, ds.selD, ds.wtsD) })
		ops.do(func() error { return be.MatMulExperts(ds.g, b.gateExp, ds.h, ds.selD, T*k, k) })
		ops.do(func() error { return be.MatMulExperts(ds.u, b.upExp, ds.h, ds.selD, T*k, k) })
		ops.do(func() error { return be.SwiGLU(ds.g, ds.u, T*k*nff) })
		ops.do(func() error { return be.MatMulExperts(ds.slot, b.downEx, ds.g, ds.selD, T*k, 1) })
		ops.do(func() error { return be.MoECombineDevice(ds.tmp, ds.slot, ds.wtsD, T, k, E) })
		return
	}
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
