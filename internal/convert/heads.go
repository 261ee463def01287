package convert

import (
	"fmt"

	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/quant"
)

// HeadHessianSource is a HessianSource that also holds per-head matrices of a Gated DeltaNet
// block's projections (tq calibrate's hessians/, calib.HessianSet.HeadHessian): entry
// "attn_qkv.vheads" serves the value rows of attn_qkv, "attn_gate.heads" the rows of
// attn_gate, one n×n row-major matrix per group of consecutive value heads
// (docs/calibration.md, "Gated DeltaNet heads"). HeadGroups is their number (0: none);
// HeadGram's ok is false when a group has none (it saw no rows).
type HeadHessianSource interface {
	HeadGroups(layer int, entry string) int
	HeadGram(layer int, entry, tensor string, group int) (g []float64, n int, ok bool, err error)
}

// headEntries maps the Qwen3.5 roles that get per-head matrices to their entries.
var headEntries = map[string]string{"in_proj_qkv": "attn_qkv.vheads", "in_proj_z": "attn_gate.heads"}

// attachHeads makes a job whose rows include Gated DeltaNet value heads (attn_qkv's last
// ValueDim rows, all of attn_gate's) encode each head's rows with its own matrix, where the
// calibration holds one; the query and key rows keep the plain Gram matrix. ValueDim is
// attn_gate's row count; work items are gcd(rows per head group, 2·KeyDim) rows, so each lies
// within the query and key rows or within one head group.
func attachHeads(j *job, t policy.Tensor, all []policy.Tensor, src HeadHessianSource) {
	entry, ok := headEntries[policy.Role(t.Name)]
	if j.hessian == nil || src == nil || !ok || len(t.Shape) != 2 {
		return
	}
	il := policy.LayerOf(t.Name)
	if il < 0 {
		return
	}
	var vd int64 // ValueDim, from attn_gate's rows
	gate := fmt.Sprintf("blk.%d.attn_gate.weight", il)
	for _, g := range all {
		if g.Name == gate && len(g.Shape) == 2 {
			vd = g.Shape[1]
		}
	}
	rows := j.rowsPerMatrix
	if vd <= 0 || vd > rows || (rows-vd)%2 != 0 {
		return
	}
	groups := int64(src.HeadGroups(il, entry))
	if groups <= 0 || vd%groups != 0 {
		return
	}
	ds := vd / groups // rows per group
	j.headHessian = func(r0, n int64) (*quant.Hessian, error) {
		first := rows - vd // the first value row
		if r0+n <= first {
			return nil, nil
		}
		h := (r0 - first) / ds
		if r0 < first || (r0+n-1-first)/ds != h {
			return nil, fmt.Errorf("tensor %s: rows %d..%d are not within one value head group of %d rows", j.name, r0, r0+n-1, ds)
		}
		g, cols, ok, err := src.HeadGram(il, entry, t.Name, int(h))
		switch {
		case err != nil:
			return nil, fmt.Errorf("tensor %s: head group %d: %w", j.name, h, err)
		case !ok:
			return nil, nil
		case int64(cols) != j.cols:
			return nil, fmt.Errorf("tensor %s: head group %d's matrix is %d×%d, the rows have %d columns", j.name, h, cols, cols, j.cols)
		}
		hs, err := quant.AdoptGram(cols, g)
		if err != nil {
			return nil, fmt.Errorf("tensor %s: head group %d: %w", j.name, h, err)
		}
		return hs, nil
	}
	// items never straddle the first value row or a group boundary
	j.chunkRows = ds
	for a := rows - vd; a != 0; {
		j.chunkRows, a = a, j.chunkRows%a
	}
}
