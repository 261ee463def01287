package infer

// Observer receives the activations a forward pass feeds into its linear layers (calibration
// statistics such as llama-imatrix's Σx² per column) and the router decisions of MoE layers.
// Slices passed to an Observer are only valid during the call.
type Observer interface {
	// Linear is called before a linear layer is applied with its input rows: n rows of
	// length cols, row-major in x. name is the weight's GGUF tensor name (for a tied LM head,
	// "token_embd.weight"). expert is the expert index for 3-D expert tensors (x then holds only
	// the rows routed to that expert) and -1 otherwise.
	Linear(name string, expert int, x []float32, n, cols int)
	// Route is called once per MoE layer and batch with the experts chosen for each of n
	// tokens (experts[t*k+j], in descending router probability) and their renormalised weights.
	Route(layer int, experts []int32, weights []float32, n, k int)
}

// DeltaNetObserver is an optional extension of Observer: an observer that implements it also
// receives, for every Gated DeltaNet block and batch, what the linearised effect of its input
// projections' errors on the block's output depends on (calib uses it for the value and gate
// rows' Hessians, docs/calibration.md "Gated DeltaNet").
type DeltaNetObserver interface {
	DeltaNet(layer int, tr *DeltaNetTrace)
}

// DeltaNetTrace is one batch of a Gated DeltaNet block's forward pass. Its slices are only
// valid during the call.
type DeltaNetTrace struct {
	T, Pos0 int // rows of this batch and the position of the first (0: a sequence starts)
	// X holds the T input rows of attn_qkv / attn_gate (NEmbd each).
	X []float32
	// QK holds per row the L2-normalised query heads then key heads (2·KeyDim values, row
	// stride QKStride).
	QK       []float32
	QKStride int
	// Beta and G hold per row and value head the write strength β and the log decay g.
	Beta, G []float32
	// O holds per row the delta rule's output before the gated norm (ValueDim values), Z the
	// gate projection before its SiLU (ValueDim values).
	O, Z []float32
	// Norm is ssm_norm (DState values, shared by the heads); Eps its epsilon.
	Norm []float32
	Eps  float32
	// NEmbd, DState, NKHeads, NVHeads describe the shapes; value head j reads key head j mod
	// NKHeads. Scale is the query scale 1/√DState.
	NEmbd, DState, NKHeads, NVHeads int
	Scale                           float32
}
