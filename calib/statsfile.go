package calib

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/safeout"
)

// Statistics file format (docs/calibration.md, "Statistics file"): a zstd stream whose
// decompressed content is, little-endian throughout,
//
//	magic      "TQCSTATS"
//	version    uint32 (1)
//	meta_len   uint32, meta: JSON object (Meta)
//	n_tensors  uint32, then per tensor (sorted by name):
//	  name_len uint16, name (UTF-8)
//	  cols     uint32, nmat uint32
//	  flags    nmat × uint8 (bit 0: synthetic, from the uncovered-expert fallback)
//	  counts   nmat × int64
//	  sum_sq   nmat·cols × float64
//	  max_abs  nmat·cols × float32
//	n_routing  uint32, then per MoE layer (sorted by layer):
//	  layer uint32, n_expert uint32, k uint32, tokens int64
//	  counts n_expert × int64, top1 n_expert × int64, weight_sum n_expert × float64
//	end        "TQCEND\x00\x00"

// StatsMagic starts the decompressed content of a statistics file.
const StatsMagic = "TQCSTATS"

// StatsVersion is the format version written.
const StatsVersion = 1

const statsEnd = "TQCEND\x00\x00"

// Limits applied when decoding (hostile input).
const (
	maxStatsNameLen = 1024
	maxStatsCols    = 1 << 24
	maxStatsMat     = 1 << 16
	maxStatsTensors = 1 << 22
	maxStatsMeta    = 16 << 20
	maxRoutingLayer = 1 << 16
)

// WriteStats encodes s into w (zstd-compressed).
func WriteStats(w io.Writer, s *Stats) error {
	zw, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(zw, 1<<20)
	if err := encodeStats(bw, s); err != nil {
		zw.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		zw.Close()
		return err
	}
	return zw.Close()
}

func encodeStats(w *bufio.Writer, s *Stats) error {
	le := binary.LittleEndian
	var b8 [8]byte
	u32 := func(v uint32) { le.PutUint32(b8[:4], v); w.Write(b8[:4]) }
	u64 := func(v uint64) { le.PutUint64(b8[:], v); w.Write(b8[:]) }
	w.WriteString(StatsMagic)
	u32(StatsVersion)
	meta, err := json.Marshal(s.Meta)
	if err != nil {
		return err
	}
	u32(uint32(len(meta)))
	w.Write(meta)
	names := s.Names()
	u32(uint32(len(names)))
	for _, name := range names {
		t := s.Tensors[name]
		if err := t.check(); err != nil {
			return fmt.Errorf("calib: writing statistics: %w", err)
		}
		if len(name) > maxStatsNameLen || t.Cols > maxStatsCols || t.NMat > maxStatsMat {
			return fmt.Errorf("calib: writing statistics: tensor %s exceeds the format's limits", name)
		}
		var b2 [2]byte
		le.PutUint16(b2[:], uint16(len(name)))
		w.Write(b2[:])
		w.WriteString(name)
		u32(uint32(t.Cols))
		u32(uint32(t.NMat))
		for _, syn := range t.Synthetic {
			f := byte(0)
			if syn {
				f = 1
			}
			w.WriteByte(f)
		}
		for _, c := range t.Counts {
			u64(uint64(c))
		}
		for _, v := range t.SumSq {
			u64(math.Float64bits(v))
		}
		for _, v := range t.MaxAbs {
			u32(math.Float32bits(v))
		}
	}
	u32(uint32(len(s.Routing)))
	for _, r := range s.Routing {
		if err := r.check(); err != nil {
			return fmt.Errorf("calib: writing statistics: %w", err)
		}
		u32(uint32(r.Layer))
		u32(uint32(r.NExpert))
		u32(uint32(r.K))
		u64(uint64(r.Tokens))
		for _, c := range r.Counts {
			u64(uint64(c))
		}
		for _, c := range r.Top1 {
			u64(uint64(c))
		}
		for _, v := range r.WeightSum {
			u64(math.Float64bits(v))
		}
	}
	_, err = w.WriteString(statsEnd)
	return err
}

// SaveStats writes s to path atomically (temporary file, fsync, rename).
func SaveStats(path string, s *Stats) error {
	return writeAtomic(path, func(w io.Writer) error { return WriteStats(w, s) })
}

// LoadStats reads a statistics file.
func LoadStats(path string) (*Stats, error) {
	f, _, err := boundedread.Open(path, "statistics file")
	if err != nil {
		return nil, fmt.Errorf("calib: %w", err)
	}
	defer f.Close()
	s, err := ReadStats(f)
	if err != nil {
		return nil, fmt.Errorf("calib: statistics file %s: %w", path, err)
	}
	return s, nil
}

// ReadStats decodes a statistics stream. Every count and length is bounded before use and
// arrays grow only as data actually arrives, so hostile input cannot force large allocations.
func ReadStats(r io.Reader) (*Stats, error) {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30), zstd.WithDecoderMaxWindow(64<<20))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	d := &statsDecoder{r: bufio.NewReaderSize(zr, 1<<20)}
	s, err := d.decode()
	if err != nil {
		return nil, err
	}
	return s, nil
}

type statsDecoder struct {
	r   *bufio.Reader
	off int64
	buf [8]byte
}

func (d *statsDecoder) errf(format string, a ...any) error {
	return fmt.Errorf("offset %d: %s", d.off, fmt.Sprintf(format, a...))
}

func (d *statsDecoder) read(p []byte, what string) error {
	n, err := io.ReadFull(d.r, p)
	d.off += int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return d.errf("truncated %s", what)
		}
		return d.errf("reading %s: %v", what, err)
	}
	return nil
}

func (d *statsDecoder) u32(what string) (uint32, error) {
	if err := d.read(d.buf[:4], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(d.buf[:4]), nil
}

func (d *statsDecoder) u64(what string) (uint64, error) {
	if err := d.read(d.buf[:8], what); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(d.buf[:8]), nil
}

// chunk is the most elements allocated ahead of the data that fills them.
const chunk = 1 << 16

func (d *statsDecoder) i64s(n int, what string) ([]int64, error) {
	out := make([]int64, 0, min(n, chunk))
	for len(out) < n {
		v, err := d.u64(what)
		if err != nil {
			return nil, err
		}
		if int64(v) < 0 {
			return nil, d.errf("%s: negative value %d", what, int64(v))
		}
		out = append(out, int64(v))
	}
	return out, nil
}

func (d *statsDecoder) f64s(n int, what string) ([]float64, error) {
	out := make([]float64, 0, min(n, chunk))
	for len(out) < n {
		v, err := d.u64(what)
		if err != nil {
			return nil, err
		}
		out = append(out, math.Float64frombits(v))
	}
	return out, nil
}

func (d *statsDecoder) f32s(n int, what string) ([]float32, error) {
	out := make([]float32, 0, min(n, chunk))
	for len(out) < n {
		v, err := d.u32(what)
		if err != nil {
			return nil, err
		}
		out = append(out, math.Float32frombits(v))
	}
	return out, nil
}

func (d *statsDecoder) decode() (*Stats, error) {
	var magic [8]byte
	if err := d.read(magic[:], "magic"); err != nil {
		return nil, err
	}
	if string(magic[:]) != StatsMagic {
		return nil, d.errf("bad magic %q (not a tq statistics file)", magic[:])
	}
	ver, err := d.u32("version")
	if err != nil {
		return nil, err
	}
	if ver != StatsVersion {
		return nil, d.errf("unsupported version %d (this tq reads %d)", ver, StatsVersion)
	}
	ml, err := d.u32("metadata length")
	if err != nil {
		return nil, err
	}
	if ml > maxStatsMeta {
		return nil, d.errf("metadata length %d is too large", ml)
	}
	var mb bytes.Buffer
	if n, err := io.CopyN(&mb, d.r, int64(ml)); err != nil {
		d.off += n
		return nil, d.errf("truncated metadata")
	}
	d.off += int64(ml)
	s := NewStats()
	if err := json.Unmarshal(mb.Bytes(), &s.Meta); err != nil {
		return nil, d.errf("metadata: %v", err)
	}
	nt, err := d.u32("tensor count")
	if err != nil {
		return nil, err
	}
	if nt > maxStatsTensors {
		return nil, d.errf("tensor count %d is too large", nt)
	}
	prev := ""
	for i := uint32(0); i < nt; i++ {
		var b2 [2]byte
		if err := d.read(b2[:], "name length"); err != nil {
			return nil, err
		}
		nl := int(binary.LittleEndian.Uint16(b2[:]))
		if nl == 0 || nl > maxStatsNameLen {
			return nil, d.errf("tensor %d: name length %d out of range", i, nl)
		}
		nb := make([]byte, nl)
		if err := d.read(nb, "tensor name"); err != nil {
			return nil, err
		}
		if !utf8.Valid(nb) {
			return nil, d.errf("tensor %d: name is not UTF-8", i)
		}
		name := string(nb)
		if name <= prev && i > 0 {
			return nil, d.errf("tensor %q: names are not sorted or repeat", name)
		}
		prev = name
		cols, err := d.u32("columns of " + name)
		if err != nil {
			return nil, err
		}
		nmat, err := d.u32("matrices of " + name)
		if err != nil {
			return nil, err
		}
		if cols == 0 || cols > maxStatsCols || nmat == 0 || nmat > maxStatsMat {
			return nil, d.errf("tensor %s: shape %d matrices × %d columns out of range", name, nmat, cols)
		}
		t := &TensorStats{Name: name, Cols: int(cols), NMat: int(nmat)}
		flags := make([]byte, nmat)
		if err := d.read(flags, "flags of "+name); err != nil {
			return nil, err
		}
		t.Synthetic = make([]bool, nmat)
		for e, f := range flags {
			if f&^1 != 0 {
				return nil, d.errf("tensor %s: unknown flags %#x for matrix %d", name, f, e)
			}
			t.Synthetic[e] = f&1 != 0
		}
		if t.Counts, err = d.i64s(int(nmat), "counts of "+name); err != nil {
			return nil, err
		}
		n := int(nmat) * int(cols)
		if t.SumSq, err = d.f64s(n, "sums of squares of "+name); err != nil {
			return nil, err
		}
		if t.MaxAbs, err = d.f32s(n, "max |x| of "+name); err != nil {
			return nil, err
		}
		if err := t.check(); err != nil {
			return nil, d.errf("%v", err)
		}
		s.Tensors[name] = t
	}
	nr, err := d.u32("routing count")
	if err != nil {
		return nil, err
	}
	if nr > maxRoutingLayer {
		return nil, d.errf("routing layer count %d is too large", nr)
	}
	for i := uint32(0); i < nr; i++ {
		var h [3]uint32
		for j, what := range []string{"routing layer", "routing expert count", "routing k"} {
			if h[j], err = d.u32(what); err != nil {
				return nil, err
			}
		}
		if h[0] >= maxRoutingLayer || h[1] == 0 || h[1] > maxStatsMat || h[2] == 0 || h[2] > h[1] {
			return nil, d.errf("routing entry %d: layer %d, %d of %d experts out of range", i, h[0], h[2], h[1])
		}
		tok, err := d.u64("routing tokens")
		if err != nil {
			return nil, err
		}
		r := &LayerRouting{Layer: int(h[0]), NExpert: int(h[1]), K: int(h[2]), Tokens: int64(tok)}
		if r.Counts, err = d.i64s(r.NExpert, "routing counts"); err != nil {
			return nil, err
		}
		if r.Top1, err = d.i64s(r.NExpert, "routing top-1 counts"); err != nil {
			return nil, err
		}
		if r.WeightSum, err = d.f64s(r.NExpert, "routing weight sums"); err != nil {
			return nil, err
		}
		if err := r.check(); err != nil {
			return nil, d.errf("%v", err)
		}
		if len(s.Routing) > 0 && s.Routing[len(s.Routing)-1].Layer >= r.Layer {
			return nil, d.errf("routing layers are not sorted or repeat (layer %d)", r.Layer)
		}
		s.Routing = append(s.Routing, r)
	}
	var end [8]byte
	if err := d.read(end[:], "end marker"); err != nil {
		return nil, err
	}
	if string(end[:]) != statsEnd {
		return nil, d.errf("bad end marker %q", end[:])
	}
	if _, err := d.r.ReadByte(); err != io.EOF {
		if err == nil {
			return nil, d.errf("trailing data after the end marker")
		}
		return nil, d.errf("%v", err)
	}
	return s, nil
}

// writeAtomic writes a file as internal/safeout does: through a temporary file in the same
// directory, fsynced and renamed into place (a device or FIFO is written directly).
func writeAtomic(path string, fill func(io.Writer) error) error {
	if err := safeout.Write(path, safeout.Options{}, fill); err != nil {
		return fmt.Errorf("calib: writing %s: %w", path, err)
	}
	return nil
}
