package infer

import (
	"fmt"

	"github.com/tq-project/tq/quant/kernels"
)

// ExpertActivations computes what an FFN's down projection sees for S input rows x (S×E):
// silu(x·gateᵀ) ⊙ (x·upᵀ) into g (S×F), with gate and up F×E row-major float32 weights and u
// (S×F) as scratch. It is the runner's own SwiGLU (ggml's order and exp); calibration uses it
// to run experts no calibration token was routed to.
func ExpertActivations(x []float32, S, E int, gate, up []float32, F int, g, u []float32) error {
	if len(x) < S*E || len(gate) < F*E || len(up) < F*E || len(g) < S*F || len(u) < S*F {
		return fmt.Errorf("infer: expert activations: buffers too small for %d rows of %d -> %d", S, E, F)
	}
	if err := kernels.Sgemm(S, F, E, x, E, gate, E, g, F, false); err != nil {
		return err
	}
	if err := kernels.Sgemm(S, F, E, x, E, up, E, u, F, false); err != nil {
		return err
	}
	swiglu(g[:S*F], u[:S*F], F)
	return nil
}

// RMSNorm writes y = x / sqrt(mean(x²) + eps) * w exactly as the runner does (w may be nil;
// y may alias x).
func RMSNorm(y, x, w []float32, eps float32) { rmsNorm(y, x, w, eps) }
