// Package reflogits stores a reference model's next-token distributions compactly, so that a
// quantized model can be compared with the reference (KL divergence, top-1 agreement, Δp)
// without loading the reference again.
//
// For every scored position of every evaluation window the file keeps the k most likely
// tokens with their log-probabilities, the log of the probability mass of all other tokens
// ("rest"), and the exact log-probability of the token that actually follows. The token
// windows themselves are stored too, so a comparison evaluates exactly the same inputs.
//
// # File format (version 1)
//
// The whole file is one zstd stream. Decompressed, it is (all integers little-endian):
//
//	magic     8 bytes  "TQREFLOG"
//	version   uint32   1
//	hdr_len   uint32   length of the header JSON (at most 16 MiB)
//	header    hdr_len bytes of JSON, see Header
//	tokens    int32 × n_windows·n_ctx: the windows' original tokens (before BOS replacement)
//	records   n_windows · (n_ctx − 1 − n_ctx/2) records, window by window, position by position:
//	            float32        logp_tok   log p(next token)
//	            float32        log_rest   log of Σ p over the tokens not listed (−Inf when 0)
//	            int32 × k      ids        the k most likely tokens, most likely first
//	                                      (equal probabilities: lower id first)
//	            float32 × k    logp       their log-probabilities
//
// with k = top_k from the header. Scored position j of a window (j = n_ctx/2 … n_ctx−2) is the
// distribution after the window's tokens 0..j, predicting token j+1 — the positions
// llama-perplexity scores.
//
// Log-probabilities are computed in float64 from the logits (log p_i = l_i − max − log Σ exp(l −
// max)) and rounded to float32; "rest" is summed directly over the unlisted tokens, not as
// 1 − Σ listed, so it stays accurate when it is tiny.
package reflogits

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"

	"github.com/klauspost/compress/zstd"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/safeout"
)

// Magic starts every decompressed reference-logits file.
const Magic = "TQREFLOG"

// Version is the format version this package writes and reads.
const Version = 1

// Limits enforced when reading (a file beyond them is rejected before anything large is
// allocated).
const (
	MaxHeaderBytes = 16 << 20
	MaxCtx         = 1 << 20
	MaxVocab       = 1 << 24
	MaxTopK        = 4096
	MaxTokens      = 1 << 28 // n_windows · n_ctx
)

// Header describes a reference-logits file. It is stored as JSON.
type Header struct {
	NCtx     int `json:"n_ctx"`     // window length in tokens
	NVocab   int `json:"n_vocab"`   // size of the distributions
	NWindows int `json:"n_windows"` // number of windows
	TopK     int `json:"top_k"`     // tokens listed per position
	// AddBOS and BOS record whether the first token of every window was replaced by BOS
	// when the reference was evaluated (llama-perplexity's rule).
	AddBOS bool  `json:"add_bos"`
	BOS    int32 `json:"bos"`
	// TokenizerHash identifies the reference tokenizer (tokenizer.Tokenizer.Hash).
	TokenizerHash string `json:"tokenizer_hash,omitempty"`
	// TextSHA256 is the SHA-256 of the evaluation text the windows were cut from.
	TextSHA256 string `json:"text_sha256,omitempty"`
	// Reference describes the reference model (path or name).
	Reference string `json:"reference,omitempty"`
	// TQVersion is the version of tq that wrote the file.
	TQVersion string `json:"tq_version,omitempty"`
	// Extra carries additional reference results (verify stores the reference's chat
	// template, template renderings and tool-call outputs here). Opaque to this package.
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Scored returns the number of scored positions per window: n_ctx − 1 − n_ctx/2.
func (h *Header) Scored() int { return h.NCtx - 1 - h.NCtx/2 }

// Validate checks the header fields against the format's limits.
func (h *Header) Validate() error {
	switch {
	case h.NCtx < 4 || h.NCtx > MaxCtx:
		return fmt.Errorf("n_ctx %d out of range [4, %d]", h.NCtx, MaxCtx)
	case h.NVocab < 2 || h.NVocab > MaxVocab:
		return fmt.Errorf("n_vocab %d out of range [2, %d]", h.NVocab, MaxVocab)
	case h.NWindows < 1 || int64(h.NWindows)*int64(h.NCtx) > MaxTokens:
		return fmt.Errorf("n_windows %d out of range (n_windows·n_ctx at most %d)", h.NWindows, MaxTokens)
	case h.TopK < 1 || h.TopK > MaxTopK || h.TopK > h.NVocab:
		return fmt.Errorf("top_k %d out of range [1, min(n_vocab, %d)]", h.TopK, MaxTopK)
	case h.AddBOS && (h.BOS < 0 || int(h.BOS) >= h.NVocab):
		return fmt.Errorf("bos %d out of range for n_vocab %d", h.BOS, h.NVocab)
	}
	return nil
}

// Record is the stored reference distribution at one scored position.
type Record struct {
	LogPTok float32   // log-probability of the token that follows
	LogRest float32   // log of the total probability of the tokens not in IDs (−Inf when none)
	IDs     []int32   // the TopK most likely tokens, most likely first
	LogP    []float32 // their log-probabilities
}

// File is a whole reference-logits file in memory.
type File struct {
	Header Header
	// Tokens holds the windows one after the other (n_windows·n_ctx tokens).
	Tokens []int32
	// Records holds n_windows·Scored() records, window-major.
	Records []Record
}

// Window returns the original tokens of window w.
func (f *File) Window(w int) []int32 {
	n := f.Header.NCtx
	return f.Tokens[w*n : (w+1)*n]
}

// Record returns the record of scored position j (0-based, position n_ctx/2+j) of window w.
func (f *File) Record(w, j int) *Record {
	return &f.Records[w*f.Header.Scored()+j]
}

// NewRecord computes the record of a logits row whose next token is next, keeping the k most
// likely tokens. It panics if next is out of range or k < 1 (programming errors).
func NewRecord(logits []float32, next int32, k int) Record {
	if int(next) < 0 || int(next) >= len(logits) || k < 1 {
		panic("reflogits: NewRecord: bad token or k")
	}
	k = min(k, len(logits))
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := math.Log(sum)
	ids := topK(logits, k)
	in := make(map[int32]struct{}, k)
	for _, id := range ids {
		in[id] = struct{}{}
	}
	var rest float64
	for i, v := range logits {
		if _, ok := in[int32(i)]; !ok {
			rest += math.Exp(float64(v) - mx)
		}
	}
	r := Record{
		LogPTok: float32(float64(logits[next]) - mx - lse),
		LogRest: float32(math.Log(rest) - lse),
		IDs:     ids,
		LogP:    make([]float32, k),
	}
	if rest == 0 {
		r.LogRest = float32(math.Inf(-1))
	}
	for i, id := range ids {
		r.LogP[i] = float32(float64(logits[id]) - mx - lse)
	}
	return r
}

// topK returns the ids of the k largest values, largest first, ties broken by lower id.
func topK(v []float32, k int) []int32 {
	// a min-heap of the best k seen so far; "worse" = smaller value, or equal value and
	// higher id
	worse := func(a, b int32) bool {
		if v[a] != v[b] {
			return v[a] < v[b]
		}
		return a > b
	}
	h := make([]int32, 0, k)
	down := func(i int) {
		for {
			l, m := 2*i+1, i
			if l < len(h) && worse(h[l], h[m]) {
				m = l
			}
			if r := l + 1; r < len(h) && worse(h[r], h[m]) {
				m = r
			}
			if m == i {
				return
			}
			h[i], h[m] = h[m], h[i]
			i = m
		}
	}
	for i := range v {
		id := int32(i)
		if math.IsNaN(float64(v[i])) {
			continue
		}
		if len(h) < k {
			h = append(h, id)
			for j := len(h) - 1; j > 0; {
				p := (j - 1) / 2
				if !worse(h[j], h[p]) {
					break
				}
				h[j], h[p] = h[p], h[j]
				j = p
			}
			continue
		}
		if worse(h[0], id) {
			h[0] = id
			down(0)
		}
	}
	sort.Slice(h, func(a, b int) bool { return worse(h[b], h[a]) })
	return h
}

// Write writes f (zstd-compressed) to w.
func Write(w io.Writer, f *File) error {
	if err := f.Header.Validate(); err != nil {
		return fmt.Errorf("reflogits: %w", err)
	}
	h := &f.Header
	if len(f.Tokens) != h.NWindows*h.NCtx {
		return fmt.Errorf("reflogits: %d tokens for %d windows of %d", len(f.Tokens), h.NWindows, h.NCtx)
	}
	if len(f.Records) != h.NWindows*h.Scored() {
		return fmt.Errorf("reflogits: %d records, want %d", len(f.Records), h.NWindows*h.Scored())
	}
	hdr, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("reflogits: header: %w", err)
	}
	if len(hdr) > MaxHeaderBytes {
		return fmt.Errorf("reflogits: header of %d bytes exceeds %d", len(hdr), MaxHeaderBytes)
	}
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(zw, 1<<16)
	var b4 [4]byte
	put := func(u uint32) {
		binary.LittleEndian.PutUint32(b4[:], u)
		bw.Write(b4[:])
	}
	bw.WriteString(Magic)
	put(Version)
	put(uint32(len(hdr)))
	bw.Write(hdr)
	for _, t := range f.Tokens {
		put(uint32(t))
	}
	for i := range f.Records {
		r := &f.Records[i]
		if len(r.IDs) != h.TopK || len(r.LogP) != h.TopK {
			zw.Close()
			return fmt.Errorf("reflogits: record %d has %d ids and %d log-probs, want %d", i, len(r.IDs), len(r.LogP), h.TopK)
		}
		put(math.Float32bits(r.LogPTok))
		put(math.Float32bits(r.LogRest))
		for _, id := range r.IDs {
			put(uint32(id))
		}
		for _, p := range r.LogP {
			put(math.Float32bits(p))
		}
	}
	if err := bw.Flush(); err != nil {
		zw.Close()
		return err
	}
	return zw.Close()
}

// WriteFile writes f to path atomically as internal/safeout does (temporary file in the
// same directory, fsync, rename; a device or FIFO is written directly).
func WriteFile(path string, f *File) error {
	return safeout.Write(path, safeout.Options{}, func(w io.Writer) error { return Write(w, f) })
}

// ReadFile reads the reference-logits file at path.
func ReadFile(path string) (*File, error) {
	fh, _, err := boundedread.Open(path, "reference logits")
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return Read(fh, path)
}

// FormatError reports a malformed file; Field says where.
type FormatError struct {
	Name  string
	Field string
	Msg   string
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("%s: reference logits: %s: %s", e.Name, e.Field, e.Msg)
}

// Read parses a reference-logits file from r; name is used in errors. Every record is
// checked: ids in range and distinct, log-probabilities finite, ≤ 0 and non-increasing, and the
// listed probabilities plus the rest summing to 1 within 1e-3. Memory grows only with data
// actually read, whatever the header claims.
func Read(r io.Reader, name string) (*File, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(1<<30), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, &FormatError{name, "zstd", "decompressing: " + err.Error()}
	}
	defer zr.Close()
	br := bufio.NewReaderSize(zr, 1<<16)
	bad := func(field, format string, a ...any) error {
		return &FormatError{name, field, fmt.Sprintf(format, a...)}
	}
	readFull := func(field string, b []byte) error {
		if _, err := io.ReadFull(br, b); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return bad(field, "file is truncated")
			}
			return bad(field, "decompressing: %v", err)
		}
		return nil
	}
	var pre [16]byte
	if err := readFull("magic", pre[:]); err != nil {
		return nil, err
	}
	if string(pre[:8]) != Magic {
		return nil, bad("magic", "not a reference-logits file (magic %q)", pre[:8])
	}
	if v := binary.LittleEndian.Uint32(pre[8:]); v != Version {
		return nil, bad("version", "unsupported version %d (this tq reads %d)", v, Version)
	}
	hlen := binary.LittleEndian.Uint32(pre[12:])
	if hlen > MaxHeaderBytes {
		return nil, bad("header", "length %d exceeds %d", hlen, MaxHeaderBytes)
	}
	hb := make([]byte, 0, min(int(hlen), 1<<16))
	for len(hb) < int(hlen) {
		chunk := make([]byte, min(int(hlen)-len(hb), 1<<16))
		if err := readFull("header", chunk); err != nil {
			return nil, err
		}
		hb = append(hb, chunk...)
	}
	f := &File{}
	if err := json.Unmarshal(hb, &f.Header); err != nil {
		return nil, bad("header", "invalid JSON: %v", err)
	}
	h := &f.Header
	if err := h.Validate(); err != nil {
		return nil, bad("header", "%v", err)
	}
	nTok := h.NWindows * h.NCtx
	buf := make([]byte, 4*4096)
	for done := 0; done < nTok; {
		n := min(nTok-done, 4096)
		if err := readFull(fmt.Sprintf("tokens[%d]", done), buf[:4*n]); err != nil {
			return nil, err
		}
		for i := range n {
			t := int32(binary.LittleEndian.Uint32(buf[4*i:]))
			if t < 0 || int(t) >= h.NVocab {
				return nil, bad(fmt.Sprintf("tokens[%d]", done+i), "token %d out of range [0, %d)", t, h.NVocab)
			}
			f.Tokens = append(f.Tokens, t)
		}
		done += n
	}
	nRec := h.NWindows * h.Scored()
	k := h.TopK
	rb := make([]byte, 8+8*k)
	sorted := make([]int32, k)
	for i := range nRec {
		field := fmt.Sprintf("record %d (window %d, position %d)", i, i/h.Scored(), h.NCtx/2+i%h.Scored())
		if err := readFull(field, rb); err != nil {
			return nil, err
		}
		rec := Record{
			LogPTok: math.Float32frombits(binary.LittleEndian.Uint32(rb[0:])),
			LogRest: math.Float32frombits(binary.LittleEndian.Uint32(rb[4:])),
			IDs:     make([]int32, k),
			LogP:    make([]float32, k),
		}
		for j := range k {
			rec.IDs[j] = int32(binary.LittleEndian.Uint32(rb[8+4*j:]))
			rec.LogP[j] = math.Float32frombits(binary.LittleEndian.Uint32(rb[8+4*k+4*j:]))
		}
		if err := checkRecord(&rec, h.NVocab, sorted); err != nil {
			return nil, bad(field, "%v", err)
		}
		f.Records = append(f.Records, rec)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		if err == nil {
			return nil, bad("end", "unexpected data after the last record")
		}
		return nil, bad("end", "%v", err)
	}
	return f, nil
}

func checkRecord(r *Record, nVocab int, scratch []int32) error {
	okLog := func(v float32) bool { return !math.IsNaN(float64(v)) && v <= 1e-4 }
	if !okLog(r.LogPTok) || math.IsInf(float64(r.LogPTok), -1) {
		return fmt.Errorf("logp_tok %v is not a finite log-probability", r.LogPTok)
	}
	if !okLog(r.LogRest) {
		return fmt.Errorf("log_rest %v is not a log-probability", r.LogRest)
	}
	mass := math.Exp(float64(r.LogRest))
	for j, id := range r.IDs {
		if id < 0 || int(id) >= nVocab {
			return fmt.Errorf("id %d out of range [0, %d)", id, nVocab)
		}
		p := r.LogP[j]
		if !okLog(p) {
			return fmt.Errorf("logp[%d] %v is not a log-probability", j, p)
		}
		if j > 0 && p > r.LogP[j-1] {
			return fmt.Errorf("logp[%d] %v exceeds logp[%d] %v (not sorted)", j, p, j-1, r.LogP[j-1])
		}
		mass += math.Exp(float64(p))
	}
	if math.Abs(mass-1) > 1e-3 {
		return fmt.Errorf("probabilities sum to %v, not 1", mass)
	}
	copy(scratch, r.IDs)
	slices.Sort(scratch)
	for j := 1; j < len(scratch); j++ {
		if scratch[j] == scratch[j-1] {
			return fmt.Errorf("id %d listed twice", scratch[j])
		}
	}
	return nil
}
