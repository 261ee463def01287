package calib

import (
	"runtime"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/quant/kernels"
)

// estimate is the memory accounted besides the hidden states kept in RAM.
func (r *run) estimate() int64 {
	c := r.cfg
	var wmax int64
	for il := 0; il < c.NLayer; il++ {
		wmax = max(wmax, layerBytes(r.src, il))
	}
	B := int64(min(512, r.maxLen))
	E, T := int64(c.NEmbd), int64(r.maxLen)
	nff := int64(max(c.NFF, c.NFFExp))
	act := B * (3*E + 2*int64(c.QDim()) + 2*int64(c.KVDim()) + 2*nff)
	if c.NExpert > 0 {
		k := int64(max(c.NExpertUse, 1))
		act += B*int64(c.NExpert) + B*k*E + 2*B*E + 2*B*int64(c.NFFExp)
		s := int64(max(r.opts.UncoveredSample, 0))
		act += s*E + 2*s*int64(c.NFFExp)
	}
	kv := 2 * T * int64(c.KVDim())
	threads := int64(r.threadCount())
	maxRow := max(E, nff, int64(c.QDim()), T)
	pool := threads * (maxRow + 64*max(E, nff))
	hiddenBufs := 2 * T * E                          // scratch floats + byte buffer
	search := 3 * 256 * max(E, nff, int64(c.QDim())) // chunk, reconstruction, codes
	var stats int64
	for _, d := range layerDescs(r.src, 0) {
		nm := int64(1)
		if len(d.Shape) > 2 {
			nm = d.Shape[2]
		}
		stats += 12 * d.Shape[0] * nm
	}
	if kernels.UsingAMX() || bf16Rounded(r.opts.ExactForward) {
		// the AMX or AVX512-BF16 GEMM of bf16 weights (infer's matmulAMX): a batch's activation
		// rows split into three bf16 pieces or rounded to bf16, and per worker a packed tile of
		// up to 512 weight rows (on AMX the pieces are counted even where the products are
		// rounded: the MoE sensitivity pass runs the exact pieces there)
		maxIn := max(E, nff, int64(c.QDim()))
		if kernels.UsingAMX() {
			act += kernels.SplitRowsBytes(int(B), int(maxIn)) / 4
		} else {
			act += kernels.RoundedRowsBytes(int(B), int(maxIn)) / 4
		}
		pool += threads * 256 * maxIn
	}
	floats := act + kv + pool + hiddenBufs + search
	const runtimeBase = 80 << 20 // Go runtime, binary, tokenizer metadata
	// loadLayer's readers: per thread a float32 chunk and the reader's buffer of it in the
	// checkpoint's dtype (at most as large)
	load := 2 * threads * readChunkBytes
	return wmax + 4*floats + stats + load + runtimeBase + metadataBytes(r.md)
}

// packMaxUnbudgeted is the most memory packed weights take without --memory-budget.
const packMaxUnbudgeted = 1 << 30

// packBytes is the most memory infer's PackWeights takes for one block: every 16-bit matrix
// widened to float32 and packed (infer.PackedWeightBytes), except bf16 ones on the AMX or the
// AVX512-BF16 path, which infer multiplies without keeping them packed.
func (r *run) packBytes() int64 {
	var most int64
	for il := 0; il < r.cfg.NLayer; il++ {
		var n int64
		for _, d := range layerDescs(r.src, il) {
			if ht := halfType(d); ht == gguf.TypeF16 || ht == gguf.TypeBF16 && !kernels.UsingAMX() && !bf16Rounded(r.opts.ExactForward) {
				n += infer.PackedWeightBytes(d.Shape)
			}
		}
		most = max(most, n)
	}
	return most
}

// gramWriteBytes is the memory of writing a Gram file with threads workers (chunk buffers
// and a zstd encoder per writer, gramWriters of them), accounted once when any input gets a
// full Gram matrix. The accumulators themselves (gramAccBytes per full input of the largest
// step) are added by planHessians, which keeps them within the budget left by estimate.
func gramWriteBytes(threads int) int64 { return int64(gramWriters(threads)) * gramWriterBytes }

// gramWriterBytes bounds the memory of one Gram-file writer: a chunk's values and their byte
// planes (gramChunkBytes each), the compressed chunk and the zstd encoder's state.
const gramWriterBytes = 32 << 20

// gramWriters is the number of chunks a Gram file compresses at a time with threads workers.
// Compression is a small part of a step, so a few writers remove the time it kept one core
// busy with the others idle; more would only add memory.
func gramWriters(threads int) int { return min(max(threads, 1), 4) }

func (r *run) threadCount() int {
	if r.opts.Threads > 0 {
		return r.opts.Threads
	}
	return runtime.NumCPU()
}

// metadataBytes approximates the memory of the model's metadata (tokenizer arrays).
func metadataBytes(md gguf.Metadata) int64 {
	var n int64
	for _, kv := range md {
		v := kv.Value
		if v.Type() == gguf.ValueArray {
			if ss, ok := v.AsStrings(); ok {
				for _, s := range ss {
					n += int64(len(s)) + 16
				}
				continue
			}
			n += int64(v.Len()) * 8
		}
	}
	return 2 * n
}
