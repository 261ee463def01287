package kernels

import "fmt"

// checkRows validates a mat-vec row range against out and w.
func checkRows(out []float32, w []byte, rowBytes, r0, r1 int) error {
	if r0 < 0 || r1 < r0 {
		return fmt.Errorf("kernels: invalid row range [%d, %d)", r0, r1)
	}
	if len(out) < r1 {
		return fmt.Errorf("kernels: out has %d entries, row range ends at %d", len(out), r1)
	}
	if r1 > 0 && len(w)/rowBytes < r1 {
		return fmt.Errorf("kernels: weights hold %d rows of %d bytes, row range ends at %d", len(w)/rowBytes, rowBytes, r1)
	}
	return nil
}

// MatVec computes out[r] = dot(row r of w, x) for r in [r0, r1), single-threaded, for a
// quantized weight type t (Q4_0, Q8_0, Q4_K, Q5_K or Q6_K). Row r occupies
// w[r·rowBytes : (r+1)·rowBytes]; its element count n follows from rowBytes. xq is the
// activation row quantized to ActivationType(t) (Q8_0 or Q8_K) with at least n elements, as
// QuantizeActivations writes it (for Q8_0 weights the activation quants must be in
// [−127, 127], see DotQ8_0Q8_0).
// Callers split [0, rows) into ranges for their own workers; out is indexed by absolute row.
func MatVec(t Type, out []float32, w []byte, rowBytes int, xq []byte, r0, r1 int) error {
	wb := BlockBytes(t)
	at, err := ActivationType(t)
	if err != nil || at == F32 {
		return fmt.Errorf("kernels: MatVec: unsupported weight type %v", t)
	}
	if rowBytes <= 0 || rowBytes%wb != 0 {
		return fmt.Errorf("kernels: MatVec: row size %d is not a positive multiple of the %v block size %d bytes", rowBytes, t, wb)
	}
	nb := rowBytes / wb
	if nb > len(xq)/BlockBytes(at) {
		return fmt.Errorf("kernels: MatVec: activation row has %d bytes, %d %v blocks need %d", len(xq), nb, at, nb*BlockBytes(at))
	}
	if err := checkRows(out, w, rowBytes, r0, r1); err != nil {
		return err
	}
	if r0 == r1 {
		return nil
	}
	if useAsm() {
		matVecAsm(t, out, w, rowBytes, xq, nb, r0, r1)
		return nil
	}
	var dot func(nb int, w, x []byte) float32
	switch t {
	case Q8_0:
		dot = dotQ8_0Q8_0Go
	case Q4_0:
		dot = dotQ4_0Q8_0Go
	case Q4_K:
		dot = dotQ4KQ8KGo
	case Q5_K:
		dot = dotQ5KQ8KGo
	case Q6_K:
		dot = dotQ6KQ8KGo
	}
	for r := r0; r < r1; r++ {
		out[r] = dot(nb, w[r*rowBytes:(r+1)*rowBytes], xq)
	}
	return nil
}

// matVecAsm is MatVec's assembly path (arguments already validated). Q8_0 and Q4_0 rows go
// through MatMulQ0's tiles (activation scales widened once for all rows).
func matVecAsm(t Type, out []float32, w []byte, rowBytes int, xq []byte, nb, r0, r1 int) {
	switch t {
	case Q8_0, Q4_0:
		// Register tiles of several rows (MatMulQ0 with one activation row): bit-identical
		// to the per-row kernels, with independent accumulator chains in flight.
		matMulQ0Asm(t, out, 0, w, rowBytes, xq, 0, 1, r0, r1, nb)
	case Q4_K:
		for r := r0; r < r1; r++ {
			out[r] = dotQ4KQ8KAVX2(&w[r*rowBytes], &xq[0], nb)
		}
	case Q5_K:
		for r := r0; r < r1; r++ {
			out[r] = dotQ5KQ8KAVX2(&w[r*rowBytes], &xq[0], nb)
		}
	case Q6_K:
		for r := r0; r < r1; r++ {
			out[r] = dotQ6KQ8KAVX2(&w[r*rowBytes], &xq[0], nb)
		}
	}
}

// MatVecFloat is MatVec for float weight types (F32, F16, BF16, little-endian bytes) and
// float32 activations: out[r] = Σ_i w[r][i]·x[i] for r in [r0, r1), with n = len(x)
// elements per row and rowBytes ≥ n·size (rows may be padded).
func MatVecFloat(t Type, out []float32, w []byte, rowBytes int, x []float32, r0, r1 int) error {
	n := len(x)
	es := 0
	switch t {
	case F32:
		es = 4
	case F16, BF16:
		es = 2
	default:
		return fmt.Errorf("kernels: MatVecFloat: unsupported weight type %v", t)
	}
	if rowBytes <= 0 || rowBytes/es < n {
		return fmt.Errorf("kernels: MatVecFloat: row size %d bytes is too small for %d %v elements", rowBytes, n, t)
	}
	if err := checkRows(out, w, rowBytes, r0, r1); err != nil {
		return err
	}
	if n == 0 {
		for r := r0; r < r1; r++ {
			out[r] = 0
		}
		return nil
	}
	asm := useAsm()
	for r := r0; r < r1; r++ {
		row := w[r*rowBytes : r*rowBytes+n*es]
		switch {
		case t == F32 && asm:
			out[r] = dotF32AVX2(bytesAsFloat32(row), &x[0], n)
		case t == F32:
			out[r] = dotF32BytesGo(row, x)
		case t == F16 && asm:
			out[r] = dotF16F32AVX2(&row[0], &x[0], n)
		case t == F16:
			out[r] = dotF16F32Go(row, x)
		case asm:
			out[r] = dotBF16F32AVX2(&row[0], &x[0], n)
		default:
			out[r] = dotBF16F32Go(row, x)
		}
	}
	return nil
}
