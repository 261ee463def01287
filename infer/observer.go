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
