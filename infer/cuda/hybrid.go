package cuda

import (
	"fmt"
	"math"
)

// Operations of the Qwen3.5 / Qwen3.6 hybrid blocks (qwen35, qwen35moe; kernels/hybrid.cu).

// DeltaNetShape describes a Gated DeltaNet layer's heads for [Device.DeltaRule].
type DeltaNetShape struct {
	DState  int // key and value head size (ssm.state_size)
	NKHeads int // query/key heads (ssm.group_count)
	NVHeads int // value heads (ssm.time_step_rank, a multiple of NKHeads); value head h reads key head h mod NKHeads
	Stride  int // floats per row of the q|k|v input (at least 2·NKHeads·DState + NVHeads·DState)
}

// StateLen is the number of floats of one layer's delta-rule state (NVHeads · DState²).
func (s DeltaNetShape) StateLen() int { return s.NVHeads * s.DState * s.DState }

func (s DeltaNetShape) check(op string) error {
	if err := checkPositive(op, s.DState, s.NKHeads, s.NVHeads, s.Stride); err != nil {
		return err
	}
	if s.DState > drMaxDState {
		return fmt.Errorf("cuda: %s: state size %d exceeds %d", op, s.DState, drMaxDState)
	}
	if s.NVHeads%s.NKHeads != 0 {
		return fmt.Errorf("cuda: %s: %d value heads are not a multiple of %d key heads", op, s.NVHeads, s.NKHeads)
	}
	if int64(s.Stride) < int64(2*s.NKHeads+s.NVHeads)*int64(s.DState) || int64(s.NVHeads)*int64(s.DState)*int64(s.DState) > math.MaxInt32 {
		return fmt.Errorf("cuda: %s: rows of %d floats cannot hold %d key and %d value heads of %d", op, s.Stride, s.NKHeads, s.NVHeads, s.DState)
	}
	return nil
}

// SSMConv computes the depthwise causal convolution of T rows of C channels of x followed by
// SiLU into out: out[t][c] = silu(Σ_{i<K} w[c·K+i] · u[t+i][c]), where u is the K−1 rows of
// state (oldest first; zeros at a sequence start) followed by x. state then holds the last K−1
// rows of u. w holds channel c's K taps at w[c·K:(c+1)·K] (ssm_conv1d, oldest tap first).
func (d *Device) SSMConv(out, x, state, w Buffer, T, C, K int) error {
	const op = "SSMConv"
	if err := checkPositive(op, T, C, K); err != nil {
		return err
	}
	if int64(T)*int64(C) > math.MaxInt32 || int64(C)*int64(K) > math.MaxInt32 {
		return fmt.Errorf("cuda: %s: %d rows of %d channels, %d taps", op, T, C, K)
	}
	if err := need(op, "x", x, int64(T)*int64(C)); err != nil {
		return err
	}
	if err := need(op, "out", out, int64(T)*int64(C)); err != nil {
		return err
	}
	if err := need(op, "w", w, int64(C)*int64(K)); err != nil {
		return err
	}
	if K > 1 {
		if err := need(op, "state", state, int64(K-1)*int64(C)); err != nil {
			return err
		}
	}
	grid, block := dim3{uint32(ceilDiv(C, rowThreads)), 1, 1}, dim3{rowThreads, 1, 1}
	return d.do(func() error {
		return d.launch(kSSMConv, grid, block, argPtr(x.ptr), argPtr(state.ptr), argPtr(w.ptr), argPtr(out.ptr),
			argI32(int32(T)), argI32(int32(C)), argI32(int32(K)))
	})
}

// L2NormHeads normalises, in place, the first heads heads of d floats of each of T rows of x
// (rows of stride floats): v / max(sqrt(Σv²), eps).
func (d *Device) L2NormHeads(x Buffer, d0, heads, T, stride int, eps float32) error {
	const op = "L2NormHeads"
	if err := checkPositive(op, d0, heads, T, stride); err != nil {
		return err
	}
	if int64(heads)*int64(d0) > int64(stride) || T > maxGridYZ || int64(T)*int64(stride) > math.MaxInt32 {
		return fmt.Errorf("cuda: %s: %d heads of %d in %d rows of %d", op, heads, d0, T, stride)
	}
	if err := need(op, "x", x, int64(T-1)*int64(stride)+int64(heads)*int64(d0)); err != nil {
		return err
	}
	grid, block := dim3{uint32(heads), uint32(T), 1}, dim3{rowThreads, 1, 1}
	return d.do(func() error {
		return d.launch(kL2Norm, grid, block, argPtr(x.ptr), argI32(int32(d0)), argI32(int32(heads)), argI32(int32(T)),
			argI32(int32(stride)), argF32(eps))
	})
}

// DeltaNetGates turns T rows of hv raw projections in place into the write strengths
// beta = σ(beta) and the log decays g = softplus(g + dtBias[j])·ssmA[j] (j the value head;
// softplus(v) = log(1+e^v), v itself above 20).
func (d *Device) DeltaNetGates(beta, g, dtBias, ssmA Buffer, hv, T int) error {
	const op = "DeltaNetGates"
	if err := checkPositive(op, hv, T); err != nil {
		return err
	}
	n := int64(hv) * int64(T)
	if n > math.MaxInt32 {
		return fmt.Errorf("cuda: %s: %d×%d values", op, T, hv)
	}
	for _, b := range []struct {
		what string
		buf  Buffer
		n    int64
	}{{"beta", beta, n}, {"g", g, n}, {"dt_bias", dtBias, int64(hv)}, {"ssm_a", ssmA, int64(hv)}} {
		if err := need(op, b.what, b.buf, b.n); err != nil {
			return err
		}
	}
	grid, block := elemGeometry(int(n))
	return d.do(func() error {
		return d.launch(kDeltaNetGates, grid, block, argPtr(beta.ptr), argPtr(g.ptr), argPtr(dtBias.ptr), argPtr(ssmA.ptr),
			argI32(int32(hv)), argI32(int32(n)))
	})
}

// DeltaRule runs the gated delta rule of every value head over T tokens. qkv holds T rows of
// s.Stride floats (the L2-normalised query heads, the key heads, then the value heads), beta and
// g T rows of NVHeads write strengths and log decays (DeltaNetGates). state (s.StateLen floats)
// carries each head's DState×DState matrix from call to call, in the device's own layout
// (column-major per head: element (a, j) at h·DState² + a·DState + j); zero it (Zero) at a
// sequence start. Per token: S ← e^g·S; δ_j = β·(v_j − Σ_a S[a][j]·k_a); S[a][j] += k_a·δ_j;
// out_j = scale·Σ_a S[a][j]·q_a. out receives T rows of NVHeads·DState floats. A batch of
// several tokens runs the chunked form (tq_delta_rule_chunked: 16 tokens per pass over the
// state, the chunk's writes from a triangular system), one token the recurrent step.
func (d *Device) DeltaRule(out, qkv, beta, g, state Buffer, T int, s DeltaNetShape, scale float32) error {
	return d.deltaRule(out, qkv, beta, g, state, T, s, scale, T > 1)
}

func (d *Device) deltaRule(out, qkv, beta, g, state Buffer, T int, s DeltaNetShape, scale float32, chunked bool) error {
	const op = "DeltaRule"
	if err := checkPositive(op, T); err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	vd := int64(s.NVHeads) * int64(s.DState)
	if int64(T)*int64(s.Stride) > math.MaxInt32 || int64(T)*vd > math.MaxInt32 {
		return fmt.Errorf("cuda: %s: %d rows of %d", op, T, s.Stride)
	}
	for _, b := range []struct {
		what string
		buf  Buffer
		n    int64
	}{{"qkv", qkv, int64(T) * int64(s.Stride)}, {"beta", beta, int64(T) * int64(s.NVHeads)},
		{"g", g, int64(T) * int64(s.NVHeads)}, {"state", state, int64(s.StateLen())}, {"out", out, int64(T) * vd}} {
		if err := need(op, b.what, b.buf, b.n); err != nil {
			return err
		}
	}
	grid, block := dim3{uint32(s.NVHeads), 1, 1}, dim3{uint32(drSplit * s.DState), 1, 1}
	k := kDeltaRule
	if chunked {
		k, block = kDeltaRuleChunked, dim3{uint32(s.DState), 1, 1}
	}
	return d.do(func() error {
		return d.launch(k, grid, block, argPtr(qkv.ptr), argPtr(beta.ptr), argPtr(g.ptr), argPtr(state.ptr), argPtr(out.ptr),
			argI32(int32(T)), argI32(int32(s.DState)), argI32(int32(s.NKHeads)), argI32(int32(s.NVHeads)), argI32(int32(s.Stride)),
			argF32(scale))
	})
}

// SplitHeads splits T rows of heads×(2·hd) floats of src (per head hd query values, then hd gate
// values) into a and b, T rows of heads×hd each.
func (d *Device) SplitHeads(a, b, src Buffer, hd, heads, T int) error {
	const op = "SplitHeads"
	if err := checkPositive(op, hd, heads, T); err != nil {
		return err
	}
	n := int64(hd) * int64(heads)
	if 2*n*int64(T) > math.MaxInt32 || T > maxGridYZ {
		return fmt.Errorf("cuda: %s: %d rows of %d heads of %d", op, T, heads, hd)
	}
	if err := need(op, "src", src, 2*n*int64(T)); err != nil {
		return err
	}
	if err := need(op, "a", a, n*int64(T)); err != nil {
		return err
	}
	if err := need(op, "b", b, n*int64(T)); err != nil {
		return err
	}
	grid, block := rowsByColsGeometry(int(n), T)
	return d.do(func() error {
		return d.launch(kSplitHeads, grid, block, argPtr(src.ptr), argPtr(a.ptr), argPtr(b.ptr), argI32(int32(hd)),
			argI32(int32(heads)), argI32(int32(T)))
	})
}

// SigmoidMul computes y[i] *= σ(g[i]) for i < n.
func (d *Device) SigmoidMul(y, g Buffer, n int) error {
	return d.binary(kSigmoidMul, "SigmoidMul", y, g, n)
}

// RowSigmoidScale multiplies each of the T rows of n floats of y by σ(s[t]).
func (d *Device) RowSigmoidScale(y, s Buffer, n, T int) error {
	const op = "RowSigmoidScale"
	if err := checkPositive(op, n, T); err != nil {
		return err
	}
	if int64(n)*int64(T) > math.MaxInt32 || T > maxGridYZ {
		return fmt.Errorf("cuda: %s: %d×%d elements", op, T, n)
	}
	if err := need(op, "y", y, int64(n)*int64(T)); err != nil {
		return err
	}
	if err := need(op, "s", s, int64(T)); err != nil {
		return err
	}
	grid, block := rowsByColsGeometry(n, T)
	return d.do(func() error {
		return d.launch(kRowSigmoidScale, grid, block, argPtr(y.ptr), argPtr(s.ptr), argI32(int32(n)), argI32(int32(T)))
	})
}

// Zero sets the first n floats of b to 0.
func (d *Device) Zero(b Buffer, n int) error {
	const op = "Zero"
	if err := checkPositive(op, n); err != nil {
		return err
	}
	if err := need(op, "buffer", b, int64(n)); err != nil {
		return err
	}
	grid, block := elemGeometry(n)
	return d.do(func() error { return d.launch(kZero, grid, block, argPtr(b.ptr), argI32(int32(n))) })
}
