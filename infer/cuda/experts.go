package cuda

import (
	"fmt"
	"math"
)

// The routed experts of a batch without a round trip through the host: MoERouteDevice leaves
// the selection on the device, MatMulExperts multiplies every (token, slot) pair by its expert
// in one launch per projection, MoECombineDevice sums the weighted outputs. For one token (decode)
// that is 6 launches per MoE block instead of 6 per routed expert plus a host synchronisation,
// and each routed expert's weights are still read once.

// MoERouteDevice is MoERoute with the result left on the device: sel receives T·k expert indices
// (int32 bit patterns; -1 where a token's logits are not finite) and w their weights.
func (d *Device) MoERouteDevice(logits Buffer, T, nExpert, k int, renorm bool, sel, w Buffer) error {
	const op = "MoERouteDevice"
	if err := checkRoute(op, logits, T, nExpert, k); err != nil {
		return err
	}
	if err := need(op, "sel", sel, int64(T)*int64(k)); err != nil {
		return err
	}
	if err := need(op, "w", w, int64(T)*int64(k)); err != nil {
		return err
	}
	grid, block := moeGeometry(T)
	return d.do(func() error {
		return d.launch(kMoERoute, grid, block, argPtr(logits.ptr), argPtr(sel.ptr), argPtr(w.ptr), argI32(int32(T)),
			argI32(int32(nExpert)), argI32(int32(k)), argBool(renorm))
	})
}

// MatMulExperts computes, for each of npairs (token, slot) pairs p, y[p] = W[sel[p]] · x[p/k]:
// w is a stacked expert tensor (w.Mats matrices of w.Rows × w.Cols), x holds ⌈npairs/k⌉ rows
// of w.Cols floats, sel npairs expert indices (MoERouteDevice; an index outside the tensor gives
// a zero row), y receives npairs rows of w.Rows floats. k = 1 pairs every row of x with its own
// expert (the down projection of the gate/up outputs).
func (d *Device) MatMulExperts(y Buffer, w *Tensor, x, sel Buffer, npairs, k int) error {
	const op = "MatMulExperts"
	if w == nil || w.ptr == 0 {
		return fmt.Errorf("cuda: %s: no weight tensor", op)
	}
	if err := checkPositive(op, npairs, k); err != nil {
		return err
	}
	if npairs > maxGridYZ {
		return fmt.Errorf("cuda: %s: %d pairs exceed %d per call", op, npairs, maxGridYZ)
	}
	kid, ok := matvecIDsKernel(w.Type)
	if !ok {
		return fmt.Errorf("cuda: %s %s: no kernel for weight type %s", op, w.Name, w.Type)
	}
	rowsX := (npairs + k - 1) / k
	if err := need(op, "x", x, int64(rowsX)*int64(w.Cols)); err != nil {
		return err
	}
	if err := need(op, "y", y, int64(npairs)*int64(w.Rows)); err != nil {
		return err
	}
	if err := need(op, "sel", sel, int64(npairs)); err != nil {
		return err
	}
	if x.ptr%16 != 0 {
		return fmt.Errorf("cuda: %s %s: x must be 16-byte aligned", op, w.Name)
	}
	if int64(npairs)*int64(w.Rows) > math.MaxInt32 {
		return fmt.Errorf("cuda: %s %s: %d pairs of %d rows", op, w.Name, npairs, w.Rows)
	}
	grid, block := mvGeometry(w.Rows, mvRowsPerWarp(w.Type, false))
	grid.y = uint32(npairs)
	return d.do(func() error {
		return d.launch(kid, grid, block, argPtr(w.ptr), argPtr(x.ptr), argPtr(y.ptr), argPtr(sel.ptr),
			argI32(int32(w.Cols)), argI32(int32(w.Rows)), argI32(int32(w.Mats)), argI32(int32(k)), argI32(int32(npairs)))
	})
}

// MoECombineDevice is MoECombine with the weights (T·k floats, MoERouteDevice's) on the device.
func (d *Device) MoECombineDevice(out, slot, w Buffer, T, k, n int) error {
	const op = "MoECombineDevice"
	if err := checkPositive(op, T, k, n); err != nil {
		return err
	}
	if T > maxGridYZ || int64(T)*int64(k) > math.MaxInt32 {
		return fmt.Errorf("cuda: %s: %d tokens exceed %d per call", op, T, maxGridYZ)
	}
	if err := need(op, "w", w, int64(T)*int64(k)); err != nil {
		return err
	}
	if err := need(op, "out", out, int64(T)*int64(n)); err != nil {
		return err
	}
	if err := need(op, "slot", slot, int64(T)*int64(k)*int64(n)); err != nil {
		return err
	}
	grid, block := rowsByColsGeometry(n, T)
	return d.do(func() error {
		return d.launch(kMoECombine, grid, block, argPtr(out.ptr), argPtr(slot.ptr), argPtr(w.ptr), argI32(int32(T)), argI32(int32(k)), argI32(int32(n)))
	})
}
