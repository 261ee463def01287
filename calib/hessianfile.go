package calib

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/tq-project/tq/quant/kernels"
)

// Gram file format (docs/calibration.md, "Input Gram matrices"): one file per step
// (hessians/blk.N.gram, hessians/output.gram), little-endian throughout:
//
//	magic      "TQGRAM\x00\x00"
//	version    uint32 (3; versions 1 and 2 are read too)
//	layer      int32 (-1: the LM head's input)
//	run        32 bytes (the run id, shared by every file of one calibration)
//	n_weights  uint32, n_inputs uint32
//	weights    n_weights × { name_len uint16, name, input uint32, experts uint32 }
//	           (indices into the inputs; gramNone when the weight has none)
//	inputs     n_inputs × {
//	             id_len uint16, id
//	             kind uint8 (0: full upper triangle of G, 1: diagonal), reason uint8
//	             cols uint32, nmat uint32, counts nmat × int64
//	             values: nmat × cols·(cols+1)/2 (full: per matrix, row i holds
//	               G[i][i..cols-1]; nmat > 1 for routed experts, one matrix per expert) or
//	               nmat·cols (diagonal: Σx² per matrix), each stored as the top 3 bytes of
//	               its float32 rounded to nearest even at bit 8 (version 3; versions 1 and
//	               2: all 4 bytes), as chunks of
//	               { raw uint32 (bytes), comp uint32, comp bytes: a zstd frame of the
//	                 chunk's bytes split into planes (stored byte k of every value in plane k) }
//	             until raw bytes add up to the stored bytes of the values; a chunk of a full
//	             input never spans two matrices, so one expert's matrix reads alone }
//	end        "TQGEND\x00\x00" (the last bytes of the file)
//
// The values are sums (G = Σ_t x_t x_tᵀ, or Σx²); H = G / count.

// GramMagic starts every Gram file.
const GramMagic = "TQGRAM\x00\x00"

// GramVersion is the format version written. Version 3 stores each value in 3 bytes (its
// float32 rounded to 15 mantissa bits, a relative change of at most 2⁻¹⁶, below the
// accumulation's own rounding over a long calibration and far below what the matrices are
// used for); versions 1 and 2 store 4.
const GramVersion = 3

// minGramVersion is the oldest version read: version 1 differs only in allowing one matrix
// per full input.
const minGramVersion = 1

const gramEnd = "TQGEND\x00\x00"

// gramNone marks a weight without a full input or without per-expert diagonals.
const gramNone = math.MaxUint32

// Kinds of an input's values.
const (
	GramFull     = 0 // the upper triangle of G
	GramDiagonal = 1 // Σx² per column (per matrix)
)

// Reasons recorded with an input (why it is diagonal-only).
const (
	GramReasonNone    = 0 // a full matrix
	GramReasonExperts = 1 // routed experts: per-expert diagonals (the full matrix is the layer's shared input)
	GramReasonCols    = 2 // more columns than the limit (Options.HessianMaxCols)
	GramReasonBudget  = 3 // the full matrix did not fit the memory budget
	GramReasonDisk    = 4 // per-expert matrices over Options.ExpertHessianBytes (version 2)
)

// GramReasonText names a reason for messages and the record.
func GramReasonText(r int) string {
	switch r {
	case GramReasonNone:
		return "full"
	case GramReasonExperts:
		return "routed experts (diagonal per expert)"
	case GramReasonCols:
		return "more columns than the limit"
	case GramReasonBudget:
		return "memory budget"
	case GramReasonDisk:
		return "per-expert matrices over the size limit"
	}
	return fmt.Sprintf("reason %d", r)
}

// Limits of the reader (hostile input) and the writer.
const (
	// MaxGramCols is the most columns of a full matrix a Gram file may hold (its float64
	// SymDense takes 8·cols² bytes: 8 GiB at the limit).
	MaxGramCols     = 1 << 15
	maxGramDiagCols = 1 << 20
	maxGramMat      = 1 << 16
	maxGramValues   = 1 << 29 // of one input
	maxGramName     = 1024
	maxGramEntries  = 1 << 12 // weights or inputs of one file
	gramChunkBytes  = 4 << 20 // raw bytes per compressed chunk
	maxGramComp     = gramChunkBytes + 1<<20
)

// gramInput is one input of a Gram file as written.
type gramInput struct {
	id     string
	kind   int
	reason int
	cols   int
	counts []int64
	// values produces the float32 values [i0, i1) (in file order) into dst.
	values func(i0, i1 int, dst []float32)
	nvals  int
}

// gramWeight ties a weight to its inputs (indices, or -1).
type gramWeight struct {
	name           string
	input, experts int
}

// gramFileData is the content of one Gram file as written.
type gramFileData struct {
	layer   int
	run     [32]byte
	weights []gramWeight
	inputs  []*gramInput
}

// gramValueBytes is the bytes a value takes in a file of version ver.
func gramValueBytes(ver uint32) int {
	if ver >= 3 {
		return 3
	}
	return 4
}

// writeGram encodes f into w, compressing up to workers chunks at a time. Each chunk is an
// independent zstd frame, so the bytes do not depend on workers; each takes gramWriterBytes.
func writeGram(w io.Writer, f *gramFileData, workers int) error {
	return writeGramVersion(w, f, workers, GramVersion)
}

// writeGramVersion is writeGram for format version ver (2 or 3; the tests write version 2 to
// check that it is still read).
func writeGramVersion(w io.Writer, f *gramFileData, workers int, ver uint32) error {
	if ver != 2 && ver != 3 {
		return fmt.Errorf("cannot write Gram file version %d", ver)
	}
	vb := gramValueBytes(ver)
	if len(f.weights) > maxGramEntries || len(f.inputs) > maxGramEntries {
		return fmt.Errorf("%d weights and %d inputs exceed the format's limit", len(f.weights), len(f.inputs))
	}
	workers = max(1, workers)
	// the fastest level: on the 196 M benchmark model's 262 MB of Gram files it took 1.24
	// CPU-seconds against the default level's 2.32, for 0.6 % more bytes (the byte planes
	// leave little for a longer match search to find)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(workers))
	if err != nil {
		return err
	}
	defer enc.Close()
	bw := bufio.NewWriterSize(w, 1<<20)
	le := binary.LittleEndian
	var b [8]byte
	u16 := func(v int) { le.PutUint16(b[:2], uint16(v)); bw.Write(b[:2]) }
	u32 := func(v uint32) { le.PutUint32(b[:4], v); bw.Write(b[:4]) }
	str := func(s string) error {
		if err := checkGramName(s); err != nil {
			return err
		}
		u16(len(s))
		bw.WriteString(s)
		return nil
	}
	idx := func(i int) uint32 {
		if i < 0 {
			return gramNone
		}
		return uint32(i)
	}
	bw.WriteString(GramMagic)
	u32(ver)
	u32(uint32(int32(f.layer)))
	bw.Write(f.run[:])
	u32(uint32(len(f.weights)))
	u32(uint32(len(f.inputs)))
	for _, wt := range f.weights {
		if wt.input >= len(f.inputs) || wt.experts >= len(f.inputs) {
			return fmt.Errorf("weight %s refers to a missing input", wt.name)
		}
		if err := str(wt.name); err != nil {
			return err
		}
		u32(idx(wt.input))
		u32(idx(wt.experts))
	}
	// every input's chunks, in file order; an input's header goes out before its first chunk
	type chunkJob struct{ in, i0, i1 int }
	var jobs []chunkJob
	chunk := 1 // values per chunk: buffers no larger than the largest input needs
	for _, in := range f.inputs {
		chunk = max(chunk, min(in.nvals/max(1, len(in.counts)), gramChunkBytes/4))
	}
	// segment returns the values per segment of an input (chunks never span two segments)
	// after checking its size against the format's limits.
	segment := func(in *gramInput) (int, error) {
		nmat := len(in.counts)
		seg := nmat * in.cols
		if in.kind == GramFull {
			seg = packedLen(in.cols)
		}
		want := seg
		if in.kind == GramFull {
			want = nmat * seg
		}
		if in.cols <= 0 || nmat == 0 || nmat > maxGramMat || in.nvals != want || seg > maxGramValues ||
			(in.kind == GramFull && in.cols > MaxGramCols) || (in.kind == GramDiagonal && in.cols > maxGramDiagCols) {
			return 0, fmt.Errorf("input %s: %d values of %d matrices × %d columns (kind %d) exceed the format's limits", in.id, in.nvals, nmat, in.cols, in.kind)
		}
		return seg, checkGramName(in.id)
	}
	for k, in := range f.inputs {
		seg, err := segment(in)
		if err != nil {
			return err
		}
		for i0 := 0; i0 < in.nvals; {
			i1 := min((i0/seg+1)*seg, i0+chunk)
			jobs = append(jobs, chunkJob{k, i0, i1})
			i0 = i1
		}
	}
	header := func(in *gramInput) {
		str(in.id) // checked by segment: cannot fail
		bw.WriteByte(byte(in.kind))
		bw.WriteByte(byte(in.reason))
		u32(uint32(in.cols))
		u32(uint32(len(in.counts)))
		for _, c := range in.counts {
			le.PutUint64(b[:], uint64(c))
			bw.Write(b[:])
		}
	}
	// one set of buffers per worker
	type slot struct {
		vals        []float32
		plane, comp []byte
		err         error
	}
	slots := make([]slot, min(workers, len(jobs)))
	encode := func(s *slot, j chunkJob) {
		in := f.inputs[j.in]
		if s.vals == nil {
			s.vals = make([]float32, chunk)
			s.plane = make([]byte, vb*chunk)
		}
		v := s.vals[:j.i1-j.i0]
		in.values(j.i0, j.i1, v)
		if i := kernels.FirstNonFinite(v); i >= 0 {
			s.err = fmt.Errorf("input %s: value %d is %v", in.id, j.i0+i, v[i])
			return
		}
		if vb == 3 {
			shuffle3(s.plane[:3*len(v)], v)
		} else {
			shuffle(s.plane[:4*len(v)], v)
		}
		s.comp = enc.EncodeAll(s.plane[:vb*len(v)], s.comp[:0])
	}
	for b0 := 0; b0 < len(jobs); b0 += len(slots) {
		batch := jobs[b0:min(b0+len(slots), len(jobs))]
		var wg sync.WaitGroup
		for k, j := range batch {
			s := &slots[k]
			s.err = nil
			if k == len(batch)-1 {
				encode(s, j)
				continue
			}
			wg.Add(1)
			go func() { defer wg.Done(); encode(s, j) }()
		}
		wg.Wait()
		for k, j := range batch {
			if j.i0 == 0 {
				header(f.inputs[j.in])
			}
			s := &slots[k]
			if s.err != nil {
				return s.err
			}
			if len(s.comp) > maxGramComp {
				return fmt.Errorf("input %s: a compressed chunk of %d bytes exceeds the format's limit", f.inputs[j.in].id, len(s.comp))
			}
			u32(uint32(vb * (j.i1 - j.i0)))
			u32(uint32(len(s.comp)))
			bw.Write(s.comp)
		}
	}
	bw.WriteString(gramEnd)
	return bw.Flush()
}

// checkGramName reports whether a weight or input name fits the format.
func checkGramName(s string) error {
	if s == "" || len(s) > maxGramName || !utf8.ValidString(s) {
		return fmt.Errorf("name %q exceeds the format's limits", s)
	}
	return nil
}

// shuffle writes the little-endian bytes of the float32 values src to dst by plane: byte k
// of value i goes to dst[k·n+i]. The exponent and high mantissa bytes of nearby values
// repeat, which zstd finds once they are contiguous.
func shuffle(dst []byte, src []float32) {
	n := len(src)
	dst = dst[:4*n]
	for i, v := range src {
		b := math.Float32bits(v)
		dst[i] = byte(b)
		dst[n+i] = byte(b >> 8)
		dst[2*n+i] = byte(b >> 16)
		dst[3*n+i] = byte(b >> 24)
	}
}

// round24 is the top 3 bytes of v's bits rounded to nearest even at bit 8; a finite v that
// would round to infinity is truncated instead.
func round24(v float32) uint32 {
	b := math.Float32bits(v)
	r := (b + 0x7f + (b>>8)&1) >> 8
	if r&0x7f8000 == 0x7f8000 && b&0x7f800000 != 0x7f800000 {
		return b >> 8
	}
	return r
}

// shuffle3 is shuffle for version 3: the 3 bytes of round24 of each value, by plane.
func shuffle3(dst []byte, src []float32) {
	n := len(src)
	dst = dst[:3*n]
	for i, v := range src {
		b := round24(v)
		dst[i] = byte(b)
		dst[n+i] = byte(b >> 8)
		dst[2*n+i] = byte(b >> 16)
	}
}

// unshuffle3 rebuilds the float32 bits (low byte 0) of version 3's planes into dst (4 bytes
// per value).
func unshuffle3(dst, src []byte) {
	n := len(src) / 3
	for i := 0; i < n; i++ {
		dst[4*i] = 0
		dst[4*i+1] = src[i]
		dst[4*i+2] = src[n+i]
		dst[4*i+3] = src[2*n+i]
	}
}

func unshuffle(dst, src []byte) {
	n := len(src) / 4
	for i := 0; i < n; i++ {
		dst[4*i] = src[i]
		dst[4*i+1] = src[n+i]
		dst[4*i+2] = src[2*n+i]
		dst[4*i+3] = src[3*n+i]
	}
}

// gramChunk locates one compressed chunk.
type gramChunk struct {
	off  int64 // of the compressed bytes
	raw  int
	comp int
}

// gramIndexInput is an input of a parsed Gram file: its header and where its values are.
type gramIndexInput struct {
	id     string
	kind   int
	reason int
	cols   int
	counts []int64
	nvals  int // all matrices
	chunks []gramChunk
	// matChunk[m] is the first chunk of matrix m of a full input (len nmat+1)
	matChunk []int
}

// matValues is the number of values of one matrix of a full input (all of a diagonal one).
func (in *gramIndexInput) matValues() int {
	if in.kind == GramFull {
		return packedLen(in.cols)
	}
	return in.nvals
}

// gramIndex is the parsed structure of a Gram file (values not read).
type gramIndex struct {
	path    string
	size    int64
	version uint32
	layer   int
	run     [32]byte
	weights []gramWeight
	inputs  []*gramIndexInput
}

// gramParser reads the structure of a Gram file through ReadAt, bounding every field by the
// file size and the format's limits.
type gramParser struct {
	r       io.ReaderAt
	size    int64
	off     int64
	version uint32
	buf     [8]byte
}

func (p *gramParser) errf(format string, a ...any) error {
	return fmt.Errorf("offset %d: %s", p.off, fmt.Sprintf(format, a...))
}

func (p *gramParser) read(b []byte, what string) error {
	if int64(len(b)) > p.size-p.off {
		return p.errf("truncated %s", what)
	}
	n, err := p.r.ReadAt(b, p.off)
	if n < len(b) {
		if err == nil || errors.Is(err, io.EOF) {
			return p.errf("truncated %s", what)
		}
		return p.errf("reading %s: %v", what, err)
	}
	p.off += int64(n)
	return nil
}

func (p *gramParser) u32(what string) (uint32, error) {
	if err := p.read(p.buf[:4], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(p.buf[:4]), nil
}

func (p *gramParser) u8(what string) (int, error) {
	if err := p.read(p.buf[:1], what); err != nil {
		return 0, err
	}
	return int(p.buf[0]), nil
}

func (p *gramParser) str(what string) (string, error) {
	if err := p.read(p.buf[:2], what+" length"); err != nil {
		return "", err
	}
	n := int(binary.LittleEndian.Uint16(p.buf[:2]))
	if n == 0 || n > maxGramName {
		return "", p.errf("%s length %d out of range (1..%d)", what, n, maxGramName)
	}
	b := make([]byte, n)
	if err := p.read(b, what); err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", p.errf("%s is not UTF-8", what)
	}
	for _, c := range b {
		if c < 0x20 {
			return "", p.errf("%s %q has a control character", what, b)
		}
	}
	return string(b), nil
}

// parseGram reads the structure of a Gram file of size bytes: header, weights, inputs and the
// location of every compressed chunk (the values themselves are read by readGramValues).
func parseGram(r io.ReaderAt, size int64, path string) (*gramIndex, error) {
	p := &gramParser{r: r, size: size}
	ix, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("calib: Gram file %s: %w", path, err)
	}
	ix.path, ix.size = path, size
	return ix, nil
}

func (p *gramParser) parse() (*gramIndex, error) {
	var magic [8]byte
	if err := p.read(magic[:], "magic"); err != nil {
		return nil, err
	}
	if string(magic[:]) != GramMagic {
		return nil, p.errf("bad magic %q (not a tq Gram file)", magic[:])
	}
	ver, err := p.u32("version")
	if err != nil {
		return nil, err
	}
	if ver < minGramVersion || ver > GramVersion {
		return nil, p.errf("unsupported version %d (this tq reads %d to %d)", ver, minGramVersion, GramVersion)
	}
	p.version = ver
	layer, err := p.u32("layer")
	if err != nil {
		return nil, err
	}
	ix := &gramIndex{layer: int(int32(layer)), version: ver}
	if ix.layer < -1 || ix.layer >= maxRoutingLayer {
		return nil, p.errf("layer %d out of range", ix.layer)
	}
	if err := p.read(ix.run[:], "run id"); err != nil {
		return nil, err
	}
	nw, err := p.u32("weight count")
	if err != nil {
		return nil, err
	}
	ni, err := p.u32("input count")
	if err != nil {
		return nil, err
	}
	if nw > maxGramEntries || ni > maxGramEntries {
		return nil, p.errf("%d weights / %d inputs exceed the limit of %d", nw, ni, maxGramEntries)
	}
	seen := map[string]bool{}
	for i := uint32(0); i < nw; i++ {
		name, err := p.str(fmt.Sprintf("weight %d name", i))
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, p.errf("weight %s listed twice", name)
		}
		seen[name] = true
		in, err := p.u32("input of " + name)
		if err != nil {
			return nil, err
		}
		ex, err := p.u32("expert input of " + name)
		if err != nil {
			return nil, err
		}
		ref := func(v uint32) (int, error) {
			if v == gramNone {
				return -1, nil
			}
			if v >= ni {
				return 0, p.errf("weight %s refers to input %d of %d", name, v, ni)
			}
			return int(v), nil
		}
		w := gramWeight{name: name}
		if w.input, err = ref(in); err != nil {
			return nil, err
		}
		if w.experts, err = ref(ex); err != nil {
			return nil, err
		}
		if w.input < 0 && w.experts < 0 {
			return nil, p.errf("weight %s refers to no input", name)
		}
		ix.weights = append(ix.weights, w)
	}
	ids := map[string]bool{}
	for i := uint32(0); i < ni; i++ {
		in, err := p.input(i)
		if err != nil {
			return nil, err
		}
		if ids[in.id] {
			return nil, p.errf("input %s listed twice", in.id)
		}
		ids[in.id] = true
		ix.inputs = append(ix.inputs, in)
	}
	for _, w := range ix.weights {
		if w.input >= 0 && len(ix.inputs[w.input].counts) != 1 {
			return nil, p.errf("weight %s: its input %s has %d matrices", w.name, ix.inputs[w.input].id, len(ix.inputs[w.input].counts))
		}
		if w.experts >= 0 {
			ex := ix.inputs[w.experts]
			if w.input >= 0 && ix.inputs[w.input].cols != ex.cols {
				return nil, p.errf("weight %s: input %s has %d columns, expert input %s %d", w.name, ix.inputs[w.input].id,
					ix.inputs[w.input].cols, ex.id, ex.cols)
			}
		}
	}
	var end [8]byte
	if err := p.read(end[:], "end marker"); err != nil {
		return nil, err
	}
	if string(end[:]) != gramEnd {
		return nil, p.errf("bad end marker %q", end[:])
	}
	if p.off != p.size {
		return nil, p.errf("%d bytes after the end marker", p.size-p.off)
	}
	return ix, nil
}

func (p *gramParser) input(i uint32) (*gramIndexInput, error) {
	id, err := p.str(fmt.Sprintf("input %d id", i))
	if err != nil {
		return nil, err
	}
	in := &gramIndexInput{id: id}
	if in.kind, err = p.u8("kind of " + id); err != nil {
		return nil, err
	}
	if in.reason, err = p.u8("reason of " + id); err != nil {
		return nil, err
	}
	if in.kind != GramFull && in.kind != GramDiagonal {
		return nil, p.errf("input %s: unknown kind %d", id, in.kind)
	}
	if in.reason > GramReasonDisk || (in.kind == GramFull) != (in.reason == GramReasonNone) {
		return nil, p.errf("input %s: reason %d does not go with kind %d", id, in.reason, in.kind)
	}
	cols, err := p.u32("columns of " + id)
	if err != nil {
		return nil, err
	}
	nmat, err := p.u32("matrices of " + id)
	if err != nil {
		return nil, err
	}
	switch {
	case cols == 0 || nmat == 0 || nmat > maxGramMat:
		return nil, p.errf("input %s: %d matrices of %d columns out of range", id, nmat, cols)
	case in.kind == GramFull && cols > MaxGramCols:
		return nil, p.errf("input %s: full matrices of %d columns: at most %d", id, cols, MaxGramCols)
	case in.kind == GramDiagonal && (cols > maxGramDiagCols || uint64(cols)*uint64(nmat) > maxGramValues):
		return nil, p.errf("input %s: %d diagonals of %d columns exceed the limits", id, nmat, cols)
	}
	in.cols = int(cols)
	in.nvals = int(nmat) * in.cols
	if in.kind == GramFull {
		in.nvals = int(nmat) * packedLen(in.cols)
	}
	if int64(nmat)*8 > p.size-p.off {
		return nil, p.errf("truncated counts of %s", id)
	}
	cb := make([]byte, 8*nmat)
	if err := p.read(cb, "counts of "+id); err != nil {
		return nil, err
	}
	in.counts = make([]int64, nmat)
	for e := range in.counts {
		c := int64(binary.LittleEndian.Uint64(cb[8*e:]))
		if c < 0 {
			return nil, p.errf("input %s: matrix %d has a negative count %d", id, e, c)
		}
		in.counts[e] = c
	}
	vb := int64(gramValueBytes(p.version))
	segs, segBytes := 1, int64(in.nvals)*vb // chunks never span two segments (full: matrices)
	if in.kind == GramFull {
		segs, segBytes = int(nmat), int64(packedLen(in.cols))*vb
		in.matChunk = make([]int, 0, nmat+1)
	}
	for m := 0; m < segs; m++ {
		if in.matChunk != nil {
			in.matChunk = append(in.matChunk, len(in.chunks))
		}
		if err := p.chunks(in, segBytes); err != nil {
			return nil, err
		}
	}
	if in.matChunk != nil {
		in.matChunk = append(in.matChunk, len(in.chunks))
	}
	return in, nil
}

// chunks reads the chunk headers of segBytes raw bytes of input in.
func (p *gramParser) chunks(in *gramIndexInput, segBytes int64) error {
	id := in.id
	left := segBytes
	for left > 0 {
		raw, err := p.u32("chunk size of " + id)
		if err != nil {
			return err
		}
		comp, err := p.u32("compressed chunk size of " + id)
		if err != nil {
			return err
		}
		vb := uint32(gramValueBytes(p.version))
		if raw == 0 || raw%vb != 0 || raw > gramChunkBytes || int64(raw) > left {
			return p.errf("input %s: chunk of %d bytes (%d left, at most %d, a multiple of %d)", id, raw, left, gramChunkBytes, vb)
		}
		if comp == 0 || comp > maxGramComp || int64(comp) > p.size-p.off {
			return p.errf("input %s: compressed chunk of %d bytes does not fit the file", id, comp)
		}
		if len(in.chunks) >= maxGramValues/1024 {
			return p.errf("input %s: too many chunks", id)
		}
		in.chunks = append(in.chunks, gramChunk{off: p.off, raw: int(raw), comp: int(comp)})
		p.off += int64(comp)
		left -= int64(raw)
	}
	return nil
}

// gramDecoder decompresses chunks (at most gramChunkBytes each).
func newGramDecoder() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(gramChunkBytes),
		zstd.WithDecoderMaxWindow(gramChunkBytes))
}

// readGramValues reads and checks the values of matrix m of input in of file r into dst (len
// in.matValues()); m is ignored for a diagonal input (all its diagonals are read). Every value
// must be finite, diagonals (and the diagonal of a full matrix) non-negative.
func readGramValues(r io.ReaderAt, ix *gramIndex, in *gramIndexInput, m int, dst []float32) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("calib: Gram file %s: input %s: %s", ix.path, in.id, fmt.Sprintf(format, a...))
	}
	dec, err := newGramDecoder()
	if err != nil {
		return err
	}
	defer dec.Close()
	chunks := in.chunks
	if in.kind == GramFull {
		if m < 0 || m+1 >= len(in.matChunk) {
			return fail("matrix %d of %d", m, len(in.counts))
		}
		chunks = chunks[in.matChunk[m]:in.matChunk[m+1]]
	}
	maxRaw := 0
	for _, ch := range chunks {
		maxRaw = max(maxRaw, ch.raw) // ≤ gramChunkBytes (parseGram)
	}
	var comp []byte
	vb := gramValueBytes(ix.version)
	raw := make([]byte, maxRaw/vb*4)
	plane := make([]byte, maxRaw)
	pos := 0
	for ci, ch := range chunks {
		if cap(comp) < ch.comp {
			comp = make([]byte, ch.comp)
		}
		comp = comp[:ch.comp]
		if n, err := r.ReadAt(comp, ch.off); n < ch.comp {
			return fail("reading chunk %d: %v", ci, err)
		}
		out, err := dec.DecodeAll(comp, plane[:0])
		if err != nil {
			return fail("chunk %d: %v", ci, err)
		}
		if len(out) != ch.raw {
			return fail("chunk %d holds %d bytes, its header says %d", ci, len(out), ch.raw)
		}
		n := ch.raw / vb
		raw = raw[:4*n]
		if vb == 3 {
			unshuffle3(raw, out)
		} else {
			unshuffle(raw, out)
		}
		if pos+n > len(dst) {
			return fail("more values than %d", len(dst))
		}
		for i := 0; i < n; i++ {
			dst[pos+i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		pos += n
	}
	if pos != len(dst) {
		return fail("%d values, want %d", pos, len(dst))
	}
	for i, v := range dst {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fail("value %d is %v", i, v)
		}
	}
	if in.kind == GramDiagonal {
		for i, v := range dst {
			if v < 0 {
				return fail("diagonal value %d is negative (%v)", i, v)
			}
		}
	} else {
		for i := 0; i < in.cols; i++ {
			if v := dst[packedRow(in.cols, i)]; v < 0 {
				return fail("diagonal entry %d is negative (%v)", i, v)
			}
		}
	}
	return nil
}

// openHessianFile opens a Gram file for reading: only regular files (stat before open, so a
// FIFO cannot block), and the opened file must be the one stat'ed. This is the only place Gram
// files are opened.
func openHessianFile(path string) (*os.File, int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, 0, fmt.Errorf("calib: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("calib: %s: not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("calib: %w", err)
	}
	st2, err := f.Stat()
	if err != nil || !os.SameFile(st, st2) || !st2.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("calib: %s changed while being opened", path)
	}
	return f, st2.Size(), nil
}

// saveHessianFile writes a Gram file atomically (temporary file, fsync, rename). This is the
// only place Gram files are written.
func saveHessianFile(path string, f *gramFileData, workers int) error {
	return writeAtomic(path, func(w io.Writer) error { return writeGram(w, f, workers) })
}
