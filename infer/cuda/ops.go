package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/tq-project/tq/gguf"
)

// checkPositive reports an error unless every value is in [1, MaxInt32].
func checkPositive(op string, vals ...int) error {
	for _, v := range vals {
		if v <= 0 || v > math.MaxInt32 {
			return fmt.Errorf("cuda: %s: size %d out of range", op, v)
		}
	}
	return nil
}

// need reports an error unless buffer b (named what) holds at least n elements.
func need(op, what string, b Buffer, n int64) error {
	if b.ptr == 0 {
		return fmt.Errorf("cuda: %s: %s is the zero Buffer", op, what)
	}
	if int64(b.n) < n {
		return fmt.Errorf("cuda: %s: %s holds %d elements, need %d", op, what, b.n, n)
	}
	return nil
}

// MatMul computes y[t] = W[mat] · x[t] for T activation rows: x holds T rows of w.Cols floats,
// y receives T rows of w.Rows floats. The weight stays in its GGUF encoding (one of MatVecTypes);
// batches are processed mvMaxT rows per launch, each launch reading the weight once.
func (d *Device) MatMul(y Buffer, w *Tensor, mat int, x Buffer, T int) error {
	const op = "MatMul"
	if w == nil || w.ptr == 0 {
		return fmt.Errorf("cuda: %s: no weight tensor", op)
	}
	if err := checkPositive(op, T); err != nil {
		return err
	}
	if mat < 0 || mat >= w.Mats {
		return fmt.Errorf("cuda: %s %s: matrix %d of %d", op, w.Name, mat, w.Mats)
	}
	k1, ok := matvecKernel(w.Type, false)
	if !ok {
		return fmt.Errorf("cuda: %s %s: no kernel for weight type %s", op, w.Name, w.Type)
	}
	k8, _ := matvecKernel(w.Type, true)
	n, rows := w.Cols, w.Rows
	if err := need(op, "x", x, int64(T)*int64(n)); err != nil {
		return err
	}
	if err := need(op, "y", y, int64(T)*int64(rows)); err != nil {
		return err
	}
	if x.ptr%16 != 0 {
		return fmt.Errorf("cuda: %s %s: x must be 16-byte aligned", op, w.Name)
	}
	wp := w.ptr + uint64(mat)*uint64(rows)*uint64(w.RowBytes)
	grid1, block := mvGeometry(rows, mvRowsPerWarp(w.Type, false))
	grid8, _ := mvGeometry(rows, mvRowsPerWarp(w.Type, true))
	return d.do(func() error {
		for t0 := 0; t0 < T; t0 += mvMaxT {
			nt := min(mvMaxT, T-t0)
			k, grid := k8, grid8
			if nt == 1 {
				k, grid = k1, grid1
			}
			if err := d.launch(k, grid, block, argPtr(wp), argPtr(x.ptr+uint64(t0)*uint64(n)*4),
				argPtr(y.ptr+uint64(t0)*uint64(rows)*4), argI32(int32(n)), argI32(int32(rows)), argI32(int32(nt))); err != nil {
				return err
			}
		}
		return nil
	})
}

// RMSNorm writes y[r] = x[r] / sqrt(mean(x[r]²) + eps) · w for rows rows of n floats. w may be the
// zero Buffer (no weight); y may be x.
func (d *Device) RMSNorm(y, x, w Buffer, n, rows int, eps float32) error {
	const op = "RMSNorm"
	if err := checkPositive(op, n, rows); err != nil {
		return err
	}
	if err := need(op, "x", x, int64(n)*int64(rows)); err != nil {
		return err
	}
	if err := need(op, "y", y, int64(n)*int64(rows)); err != nil {
		return err
	}
	if !w.IsZero() {
		if err := need(op, "w", w, int64(n)); err != nil {
			return err
		}
	}
	grid, block := rowGeometry(rows)
	return d.do(func() error {
		return d.launch(kRMSNorm, grid, block, argPtr(x.ptr), argPtr(w.ptr), argPtr(y.ptr), argI32(int32(n)), argI32(int32(rows)), argF32(eps))
	})
}

// Rope holds the rotary-embedding parameters of a model, as ggml_rope_ext takes them (package
// infer computes them from the GGUF metadata).
type Rope struct {
	NeoX       bool    // pair (i, i+NRot/2) instead of (2i, 2i+1)
	NRot       int     // rotated dimensions per head (even, <= head_dim)
	ThetaScale float32 // base^(-2/NRot)
	FreqScale  float32 // 1/rope scaling factor (1 without scaling)
	ExtFactor  float32 // YaRN extrapolation mix (0 without YaRN)
	AttnFactor float32 // magnitude scale (1 without YaRN)
	Corr       [2]float32
	Freqs      Buffer // optional per-pair frequency divisors (NRot/2 floats)
}

// RoPE rotates, in place, the nHeads heads of headDim floats of each of T rows of x, at positions
// pos0 .. pos0+T-1.
func (d *Device) RoPE(x Buffer, T, nHeads, headDim, pos0 int, r *Rope) error {
	const op = "RoPE"
	if err := checkPositive(op, T, nHeads, headDim); err != nil {
		return err
	}
	if r == nil || r.NRot <= 0 || r.NRot%2 != 0 || r.NRot > headDim || r.NRot/2 > maxBlockThreads {
		return fmt.Errorf("cuda: %s: bad rotation width (head_dim %d)", op, headDim)
	}
	if pos0 < 0 || pos0 > math.MaxInt32-T {
		return fmt.Errorf("cuda: %s: position %d out of range", op, pos0)
	}
	if T > maxGridYZ {
		return fmt.Errorf("cuda: %s: %d rows exceed %d per call", op, T, maxGridYZ)
	}
	if err := need(op, "x", x, int64(T)*int64(nHeads)*int64(headDim)); err != nil {
		return err
	}
	if !r.Freqs.IsZero() {
		if err := need(op, "freqs", r.Freqs, int64(r.NRot/2)); err != nil {
			return err
		}
	}
	grid, block := ropeGeometry(nHeads, T, r.NRot)
	return d.do(func() error {
		return d.launch(kRoPE, grid, block, argPtr(x.ptr), argI32(int32(T)), argI32(int32(nHeads)), argI32(int32(headDim)),
			argI32(int32(pos0)), argI32(int32(r.NRot)), argBool(r.NeoX), argF32(r.ThetaScale), argF32(r.FreqScale),
			argF32(r.ExtFactor), argF32(r.AttnFactor), argF32(r.Corr[0]), argF32(r.Corr[1]), argPtr(r.Freqs.ptr),
			d.posArg(math.MaxInt32-T))
	})
}

// SwiGLU computes g[i] = silu(g[i]) · u[i] for i < n.
func (d *Device) SwiGLU(g, u Buffer, n int) error {
	return d.binary(kSwiGLU, "SwiGLU", g, u, n)
}

// Add computes y[i] += x[i] for i < n (the residual connection).
func (d *Device) Add(y, x Buffer, n int) error {
	return d.binary(kAdd, "Add", y, x, n)
}

func (d *Device) binary(k kernelID, op string, y, x Buffer, n int) error {
	if err := checkPositive(op, n); err != nil {
		return err
	}
	if err := need(op, "destination", y, int64(n)); err != nil {
		return err
	}
	if err := need(op, "operand", x, int64(n)); err != nil {
		return err
	}
	grid, block := elemGeometry(n)
	return d.do(func() error { return d.launch(k, grid, block, argPtr(y.ptr), argPtr(x.ptr), argI32(int32(n))) })
}

// AddRows adds b (n floats) to each of the T rows of y (biases).
func (d *Device) AddRows(y, b Buffer, n, T int) error {
	const op = "AddRows"
	if err := checkPositive(op, n, T); err != nil {
		return err
	}
	if int64(n)*int64(T) > math.MaxInt32 {
		return fmt.Errorf("cuda: %s: %d×%d elements", op, T, n)
	}
	if err := need(op, "y", y, int64(n)*int64(T)); err != nil {
		return err
	}
	if err := need(op, "b", b, int64(n)); err != nil {
		return err
	}
	grid, block := elemGeometry(n * T)
	return d.do(func() error {
		return d.launch(kAddRows, grid, block, argPtr(y.ptr), argPtr(b.ptr), argI32(int32(n)), argI32(int32(T)))
	})
}

// KVStore converts T rows of keys and values (c.KVDim floats each, already rotated) to the cache's
// types (f16: round to nearest even; q8_0: ggml's quantize_row_q8_0 per 32 values) and stores them
// in layer's cache at positions pos0 .. pos0+T-1.
func (d *Device) KVStore(c *KVCache, layer, pos0, T int, k, v Buffer) error {
	const op = "KVStore"
	if c == nil || layer < 0 || layer >= len(c.k) {
		return fmt.Errorf("cuda: %s: no layer %d in the cache", op, layer)
	}
	if err := checkPositive(op, T); err != nil {
		return err
	}
	if pos0 < 0 || pos0 > c.Ctx-T || T > maxGridYZ {
		return fmt.Errorf("cuda: %s: positions %d..%d outside the cache of %d", op, pos0, pos0+T-1, c.Ctx)
	}
	if err := need(op, "k", k, int64(T)*int64(c.KVDim)); err != nil {
		return err
	}
	if err := need(op, "v", v, int64(T)*int64(c.KVDim)); err != nil {
		return err
	}
	grid, block := rowsByColsGeometry(c.KVDim, T)
	grid.z = 2 // keys and values in one launch
	return d.do(func() error {
		return d.launch(kKVStore, grid, block, argPtr(k.ptr), argPtr(v.ptr), argPtr(c.k[layer]), argPtr(c.v[layer]),
			argI32(int32(pos0)), argI32(int32(T)), argI32(int32(c.KVDim)), argI32(kvTypeCode(c.K)), argI32(kvTypeCode(c.V)),
			d.posArg(c.Ctx-T), argI32(int32(c.Ctx)))
	})
}

// Attention computes causal attention of T query rows (positions pos0 .. pos0+T-1; nHead heads of
// headDim floats each) against layer's cache, which must already hold positions 0 .. pos0+T-1.
// out receives T rows of nHead·headDim floats. Scores use scale 1/sqrt(headDim).
func (d *Device) Attention(out, q Buffer, c *KVCache, layer, pos0, T, nHead, nHeadKV, headDim int) error {
	const op = "Attention"
	if c == nil || layer < 0 || layer >= len(c.k) {
		return fmt.Errorf("cuda: %s: no layer %d in the cache", op, layer)
	}
	if err := checkPositive(op, T, nHead, nHeadKV, headDim); err != nil {
		return err
	}
	if nHead%nHeadKV != 0 || nHeadKV*headDim != c.KVDim {
		return fmt.Errorf("cuda: %s: %d heads, %d KV heads of %d do not fit the cache rows of %d", op, nHead, nHeadKV, headDim, c.KVDim)
	}
	if headDim > attnMaxHeadDim {
		return fmt.Errorf("cuda: %s: head_dim %d exceeds %d", op, headDim, attnMaxHeadDim)
	}
	if (c.K == gguf.TypeQ8_0 || c.V == gguf.TypeQ8_0) && headDim%32 != 0 {
		return fmt.Errorf("cuda: %s: a q8_0 cache needs head_dim to be a multiple of 32, not %d", op, headDim)
	}
	if pos0 < 0 || pos0 > c.Ctx-T || T > maxGridYZ {
		return fmt.Errorf("cuda: %s: positions %d..%d outside the cache of %d", op, pos0, pos0+T-1, c.Ctx)
	}
	qd := int64(nHead) * int64(headDim)
	if err := need(op, "q", q, int64(T)*qd); err != nil {
		return err
	}
	if err := need(op, "out", out, int64(T)*qd); err != nil {
		return err
	}
	scale := float32(1 / math.Sqrt(float64(headDim)))
	grid, block := attnGeometry(nHead, T)
	return d.do(func() error {
		scores, err := d.scratchBuf("attn.scores", int64(T)*int64(nHead)*int64(c.Ctx)*4)
		if err != nil {
			return err
		}
		return d.launch(kAttn, grid, block, argPtr(q.ptr), argPtr(c.k[layer]), argPtr(c.v[layer]), argPtr(out.ptr),
			argPtr(scores), argI32(int32(T)), argI32(int32(pos0)), argI32(int32(nHead)), argI32(int32(nHeadKV)),
			argI32(int32(headDim)), argI32(int32(c.Ctx)), argF32(scale), argI32(kvTypeCode(c.K)), argI32(kvTypeCode(c.V)),
			d.posArg(c.Ctx-T))
	})
}

// MoERoute routes T tokens: for router logits (T rows of nExpert floats) it computes the softmax,
// selects the k most probable experts per token (descending, ties to the lower index) into sel
// (T·k) and their weights into w (T·k), renormalised to sum to 1 when renorm is set (with
// llama.cpp's 6.103515625e-5 floor on the sum).
func (d *Device) MoERoute(logits Buffer, T, nExpert, k int, renorm bool, sel []int32, w []float32) error {
	const op = "MoERoute"
	if err := checkRoute(op, logits, T, nExpert, k); err != nil {
		return err
	}
	nk := T * k
	if len(sel) < nk || len(w) < nk {
		return fmt.Errorf("cuda: %s: result slices hold %d and %d entries, need %d", op, len(sel), len(w), nk)
	}
	grid, block := moeGeometry(T)
	err := d.do(func() error {
		ds, err := d.scratchBuf("moe.sel", int64(nk)*4)
		if err != nil {
			return err
		}
		dw, err := d.scratchBuf("moe.w", int64(nk)*4)
		if err != nil {
			return err
		}
		if err := d.launch(kMoERoute, grid, block, argPtr(logits.ptr), argPtr(ds), argPtr(dw), argI32(int32(T)),
			argI32(int32(nExpert)), argI32(int32(k)), argBool(renorm)); err != nil {
			return err
		}
		if err := d.dtoh(unsafe.Pointer(&sel[0]), ds, int64(nk)*4); err != nil {
			return err
		}
		return d.dtoh(unsafe.Pointer(&w[0]), dw, int64(nk)*4)
	})
	runtime.KeepAlive(sel)
	runtime.KeepAlive(w)
	if err != nil {
		return err
	}
	for i, e := range sel[:nk] {
		if e < 0 || int(e) >= nExpert {
			return fmt.Errorf("cuda: %s: token %d: no valid expert (non-finite router logits?)", op, i/k)
		}
	}
	return nil
}

// checkRoute checks the shape of a routing call (MoERoute, MoERouteDevice).
func checkRoute(op string, logits Buffer, T, nExpert, k int) error {
	if err := checkPositive(op, T, nExpert, k); err != nil {
		return err
	}
	if nExpert > moeMaxExperts || k > min(nExpert, moeMaxK) || T > maxGridX {
		return fmt.Errorf("cuda: %s: %d experts, top %d (at most %d experts, top %d)", op, nExpert, k, moeMaxExperts, moeMaxK)
	}
	return need(op, "logits", logits, int64(T)*int64(nExpert))
}

// GatherRows copies rows idx[j] of src to row j of dst (rows of n floats).
func (d *Device) GatherRows(dst, src Buffer, idx []int32, n int) error {
	return d.rows(kGatherRows, "GatherRows", dst, src, idx, n, true)
}

// ScatterRows copies row j of src to row idx[j] of dst (rows of n floats).
func (d *Device) ScatterRows(dst, src Buffer, idx []int32, n int) error {
	return d.rows(kScatterRows, "ScatterRows", dst, src, idx, n, false)
}

func (d *Device) rows(k kernelID, op string, dst, src Buffer, idx []int32, n int, gather bool) error {
	if err := checkPositive(op, n, len(idx)); err != nil {
		return err
	}
	if len(idx) > maxGridYZ {
		return fmt.Errorf("cuda: %s: %d rows exceed %d per call", op, len(idx), maxGridYZ)
	}
	indexed, dense := src, dst
	if !gather {
		indexed, dense = dst, src
	}
	if err := need(op, "dense operand", dense, int64(len(idx))*int64(n)); err != nil {
		return err
	}
	if indexed.ptr == 0 {
		return fmt.Errorf("cuda: %s: indexed operand is the zero Buffer", op)
	}
	nrows := indexed.n / n
	for j, r := range idx {
		if r < 0 || int(r) >= nrows {
			return fmt.Errorf("cuda: %s: index %d is row %d of %d", op, j, r, nrows)
		}
	}
	grid, block := rowsByColsGeometry(n, len(idx))
	err := d.do(func() error {
		di, err := d.scratchBuf("rows.idx", int64(len(idx))*4)
		if err != nil {
			return err
		}
		if err := d.htod(di, unsafe.Pointer(&idx[0]), int64(len(idx))*4); err != nil {
			return err
		}
		return d.launch(k, grid, block, argPtr(dst.ptr), argPtr(src.ptr), argPtr(di), argI32(int32(n)), argI32(int32(len(idx))))
	})
	runtime.KeepAlive(idx)
	return err
}

// MoECombine writes out[t] = Σ_j w[t·k+j] · slot[t·k+j] for T tokens, rows of n floats, summing
// in slot order.
func (d *Device) MoECombine(out, slot Buffer, w []float32, T, k, n int) error {
	const op = "MoECombine"
	if err := checkPositive(op, T, k, n); err != nil {
		return err
	}
	if T > maxGridYZ || int64(T)*int64(k) > math.MaxInt32 {
		return fmt.Errorf("cuda: %s: %d tokens exceed %d per call", op, T, maxGridYZ)
	}
	if len(w) < T*k {
		return fmt.Errorf("cuda: %s: %d weights, need %d", op, len(w), T*k)
	}
	if err := need(op, "out", out, int64(T)*int64(n)); err != nil {
		return err
	}
	if err := need(op, "slot", slot, int64(T)*int64(k)*int64(n)); err != nil {
		return err
	}
	grid, block := rowsByColsGeometry(n, T)
	err := d.do(func() error {
		dw, err := d.scratchBuf("moe.combine.w", int64(T*k)*4)
		if err != nil {
			return err
		}
		if err := d.htod(dw, unsafe.Pointer(&w[0]), int64(T*k)*4); err != nil {
			return err
		}
		return d.launch(kMoECombine, grid, block, argPtr(out.ptr), argPtr(slot.ptr), argPtr(dw), argI32(int32(T)), argI32(int32(k)), argI32(int32(n)))
	})
	runtime.KeepAlive(w)
	return err
}
