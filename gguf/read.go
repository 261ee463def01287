package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"unicode/utf8"
)

// Magic is the 4-byte GGUF file magic.
const Magic = "GGUF"

// Version is the GGUF version the writer emits. The reader accepts 2 and 3 (identical
// layout for little-endian files).
const Version = 3

// Limits beyond "must fit in the file", as llama.cpp's reader enforces them.
const (
	maxNesting   = 8        // depth of nested arrays (llama.cpp accepts none)
	maxStringLen = 1 << 30  // bytes in one string
	maxArrayLen  = 1 << 30  // elements in one array
	initialCap   = 4096     // header-count-driven slices start here and grow as data is read
	maxPrealloc  = 16 << 20 // bytes an array may allocate before its elements are read
)

// Minimum encoded sizes used to bound counts by the bytes left in the file.
const (
	minKVBytes     = 8 + 1 + 4 + 1 // key length, one key byte, value type, smallest value
	minTensorBytes = 8 + 1 + 4 + 4 + 8
	minStringBytes = 8
	minArrayBytes  = 4 + 8 // nested array: element type + count
)

// Problem describes one defect of a GGUF file: the file, where (byte offset, or -1), which
// field and what is wrong. ReadFile returns parse failures as *Problem; Check and the
// Check* functions return lists of them.
type Problem struct {
	File   string // file name as given to the reader
	Offset int64  // byte offset in the file the problem refers to, -1 when not positional
	Field  string // e.g. `header.n_tensors`, `kv[4] "tokenizer.ggml.tokens" element 17`, `tensor "x" offset`
	Msg    string
	Err    error // underlying I/O error, if any
}

// Error formats the problem as "gguf: FILE: FIELD: MESSAGE (at byte N)".
func (p *Problem) Error() string {
	s := "gguf: " + p.File + ": "
	if p.Field != "" {
		s += p.Field + ": "
	}
	s += p.Msg
	if p.Offset >= 0 {
		s += fmt.Sprintf(" (at byte %d)", p.Offset)
	}
	return s
}

// Unwrap returns the underlying I/O error, if any.
func (p *Problem) Unwrap() error { return p.Err }

// File is the parsed header of one GGUF file: everything except the tensor data.
type File struct {
	Path     string // name given to ReadFile / Open
	Version  uint32
	Metadata Metadata // in file order
	Tensors  []TensorInfo
	// Alignment is general.alignment or DefaultAlignment.
	Alignment uint64
	// HeaderSize is the offset just past the last tensor info (before alignment padding).
	HeaderSize uint64
	// DataOffset is the absolute file offset of the data section (HeaderSize rounded up to
	// Alignment when the file has tensors, as llama.cpp does).
	DataOffset uint64
	// Size is the file size in bytes.
	Size int64
}

// DataSize returns the size of the data section as llama.cpp computes it: the sum of the
// tensors' sizes, each padded to Alignment.
func (f *File) DataSize() uint64 {
	var n uint64
	for _, t := range f.Tensors {
		s, err := t.Size()
		if err != nil {
			continue
		}
		p, _ := alignUp(s, f.Alignment)
		n += p
	}
	return n
}

// Tensor returns the info of the named tensor.
func (f *File) Tensor(name string) (TensorInfo, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// ReadFile parses the header (metadata and tensor infos) of the GGUF file readable through
// r, whose size is size; name is used in errors. Only the header is read, through a small
// buffer; every count and length is checked against the bytes left in the file before
// anything is allocated. It rejects what would make tensor access unsafe or that llama.cpp
// rejects outright: truncation, unknown versions/types, invalid or duplicate keys and
// tensor names, bad general.alignment, tensor data out of range, misaligned or
// overlapping. Errors are *Problem values naming the file and field.
//
// Tolerated (reported by Check instead): gaps between tensors, a missing trailing padding,
// names longer than llama.cpp's limit, nested arrays.
func ReadFile(r io.ReaderAt, size int64, name string) (*File, error) {
	f, _, err := parse(r, size, name, false)
	return f, err
}

type decoder struct {
	name     string
	br       *bufio.Reader
	pos      int64
	size     int64
	scratch  [8]byte
	lenient  bool
	problems []Problem
}

// errTruncated is returned by the low-level readers; callers wrap it with the field.
type errTruncated struct {
	need uint64
	pos  int64
	size int64
}

func (e errTruncated) Error() string {
	return fmt.Sprintf("file is truncated: need %d bytes at offset %d but the file has %d", e.need, e.pos, e.size)
}

func (d *decoder) remaining() uint64 { return uint64(d.size - d.pos) }

// fail wraps err (or a message) as a fatal *Problem for field at offset off.
func (d *decoder) fail(off int64, field string, err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		if p.Field == "" {
			p.Field = field
		}
		return p
	}
	var tr errTruncated
	if errors.As(err, &tr) {
		return &Problem{File: d.name, Offset: off, Field: field, Msg: tr.Error()}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return &Problem{File: d.name, Offset: off, Field: field,
			Msg: fmt.Sprintf("unexpected end of data (file size given as %d)", d.size), Err: err}
	}
	return &Problem{File: d.name, Offset: off, Field: field, Msg: err.Error(), Err: err}
}

func (d *decoder) failf(off int64, field, format string, args ...any) *Problem {
	return &Problem{File: d.name, Offset: off, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// report records a non-fatal defect: fatal in strict mode, collected in lenient mode.
func (d *decoder) report(off int64, field, format string, args ...any) error {
	p := Problem{File: d.name, Offset: off, Field: field, Msg: fmt.Sprintf(format, args...)}
	if !d.lenient {
		return &p
	}
	d.problems = append(d.problems, p)
	return nil
}

func (d *decoder) readFull(b []byte) error {
	if uint64(len(b)) > d.remaining() {
		return errTruncated{uint64(len(b)), d.pos, d.size}
	}
	if _, err := io.ReadFull(d.br, b); err != nil {
		return err
	}
	d.pos += int64(len(b))
	return nil
}

// peek returns the next n bytes (n no larger than the buffer) without consuming them.
func (d *decoder) peek(n int) ([]byte, error) {
	if uint64(n) > d.remaining() {
		return nil, errTruncated{uint64(n), d.pos, d.size}
	}
	b, err := d.br.Peek(n)
	if len(b) < n {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

func (d *decoder) skip(n int) {
	d.br.Discard(n)
	d.pos += int64(n)
}

func (d *decoder) u32() (uint32, error) {
	b, err := d.peek(4)
	if err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(b)
	d.skip(4)
	return v, nil
}

func (d *decoder) u64() (uint64, error) {
	b, err := d.peek(8)
	if err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(b)
	d.skip(8)
	return v, nil
}

func (d *decoder) str() (string, error) {
	start := d.pos
	n, err := d.u64()
	if err != nil {
		return "", err
	}
	if n > d.remaining() {
		return "", &Problem{File: d.name, Offset: start,
			Msg: fmt.Sprintf("string length %d exceeds the %d bytes left in the file", n, d.remaining())}
	}
	if n > maxStringLen {
		return "", &Problem{File: d.name, Offset: start,
			Msg: fmt.Sprintf("string length %d exceeds llama.cpp's limit of %d bytes", n, maxStringLen)}
	}
	if n <= uint64(d.br.Size()) {
		b, err := d.peek(int(n))
		if err != nil {
			return "", err
		}
		s := string(b)
		d.skip(int(n))
		return s, nil
	}
	// Long string: grow with the bytes actually read, never by the declared length.
	b := make([]byte, 0, d.br.Size())
	for uint64(len(b)) < n {
		k := int(min(n-uint64(len(b)), uint64(d.br.Size())))
		p, err := d.peek(k)
		if err != nil {
			return "", err
		}
		b = append(b, p...)
		d.skip(k)
	}
	return string(b), nil
}

// value decodes one value of type t (the type id has been consumed).
func (d *decoder) value(t ValueType, field string) (Value, error) {
	start := d.pos
	switch t {
	case ValueString:
		s, err := d.str()
		if err != nil {
			return Value{}, d.fail(start, field, err)
		}
		return String(s), nil
	case ValueArray:
		et, err := d.u32()
		if err != nil {
			return Value{}, d.fail(start, field+" element type", err)
		}
		n, err := d.u64()
		if err != nil {
			return Value{}, d.fail(start, field+" length", err)
		}
		return d.array(ValueType(et), n, 1, start, field)
	}
	sz := t.scalarSize()
	if sz == 0 {
		return Value{}, d.failf(start, field, "unknown value type %d", uint32(t))
	}
	b := d.scratch[:sz]
	if err := d.readFull(b); err != nil {
		return Value{}, d.fail(start, field, err)
	}
	var bits uint64
	switch sz {
	case 1:
		bits = uint64(b[0])
		switch t {
		case ValueInt8:
			bits = uint64(int64(int8(b[0])))
		case ValueBool:
			if b[0] != 0 {
				bits = 1
			}
		}
	case 2:
		bits = uint64(binary.LittleEndian.Uint16(b))
		if t == ValueInt16 {
			bits = uint64(int64(int16(bits)))
		}
	case 4:
		bits = uint64(binary.LittleEndian.Uint32(b))
		if t == ValueInt32 {
			bits = uint64(int64(int32(bits)))
		}
	case 8:
		bits = binary.LittleEndian.Uint64(b)
	}
	return scalar(t, bits), nil
}

// array decodes n elements of type et at nesting depth depth.
func (d *decoder) array(et ValueType, n uint64, depth int, start int64, field string) (Value, error) {
	if !et.Valid() {
		return Value{}, d.failf(start, field, "unknown array element type %d", uint32(et))
	}
	if depth > maxNesting {
		return Value{}, d.failf(start, field, "arrays nested deeper than %d levels", maxNesting)
	}
	minSize := uint64(et.scalarSize())
	switch et {
	case ValueString:
		minSize = minStringBytes
	case ValueArray:
		minSize = minArrayBytes
	}
	if n > d.remaining()/minSize {
		return Value{}, d.failf(start, field, "array of %d %s elements needs at least %d bytes per element but only %d bytes are left in the file",
			n, et, minSize, d.remaining())
	}
	if n > maxArrayLen {
		return Value{}, d.failf(start, field, "array of %d elements exceeds llama.cpp's limit of %d", n, maxArrayLen)
	}
	switch et {
	case ValueString:
		out := make([]string, 0, min(n, maxPrealloc/16))
		for i := uint64(0); i < n; i++ {
			at := d.pos
			s, err := d.str()
			if err != nil {
				return Value{}, d.fail(at, fmt.Sprintf("%s element %d", field, i), err)
			}
			out = append(out, s)
		}
		return Array(out), nil
	case ValueArray:
		out := make([]Value, 0, min(n, maxPrealloc/64))
		for i := uint64(0); i < n; i++ {
			at := d.pos
			ef := fmt.Sprintf("%s element %d", field, i)
			sub, err := d.u32()
			if err != nil {
				return Value{}, d.fail(at, ef, err)
			}
			cnt, err := d.u64()
			if err != nil {
				return Value{}, d.fail(at, ef, err)
			}
			v, err := d.array(ValueType(sub), cnt, depth+1, at, ef)
			if err != nil {
				return Value{}, err
			}
			out = append(out, v)
		}
		return Array(out), nil
	}
	v, err := d.numericArray(et, int(n))
	if err != nil {
		return Value{}, d.fail(start, field, err)
	}
	return v, nil
}

// numericArray reads n fixed-size elements through a bounded chunk buffer; the result
// grows with the bytes actually read.
func (d *decoder) numericArray(et ValueType, n int) (Value, error) {
	le := binary.LittleEndian
	var out any
	var err error
	switch et {
	case ValueUint8:
		out, err = readNumeric(d, n, 1, func(b []byte) uint8 { return b[0] })
	case ValueInt8:
		out, err = readNumeric(d, n, 1, func(b []byte) int8 { return int8(b[0]) })
	case ValueBool:
		out, err = readNumeric(d, n, 1, func(b []byte) bool { return b[0] != 0 })
	case ValueUint16:
		out, err = readNumeric(d, n, 2, le.Uint16)
	case ValueInt16:
		out, err = readNumeric(d, n, 2, func(b []byte) int16 { return int16(le.Uint16(b)) })
	case ValueUint32:
		out, err = readNumeric(d, n, 4, le.Uint32)
	case ValueInt32:
		out, err = readNumeric(d, n, 4, func(b []byte) int32 { return int32(le.Uint32(b)) })
	case ValueFloat32:
		out, err = readNumeric(d, n, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	case ValueUint64:
		out, err = readNumeric(d, n, 8, le.Uint64)
	case ValueInt64:
		out, err = readNumeric(d, n, 8, func(b []byte) int64 { return int64(le.Uint64(b)) })
	case ValueFloat64:
		out, err = readNumeric(d, n, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
	default:
		return Value{}, fmt.Errorf("unknown array element type %d", uint32(et))
	}
	if err != nil {
		return Value{}, err
	}
	return Value{typ: ValueArray, elem: et, valid: true, arr: out}, nil
}

// readNumeric decodes n little-endian elements of sz bytes each.
func readNumeric[T any](d *decoder, n, sz int, dec func([]byte) T) ([]T, error) {
	out := make([]T, 0, min(n, maxPrealloc/sz))
	chunk := max(min(64<<10, d.br.Size())/sz, 1)
	for len(out) < n {
		k := min(n-len(out), chunk)
		b, err := d.peek(k * sz)
		if err != nil {
			return nil, err
		}
		for j := 0; j < len(b); j += sz {
			out = append(out, dec(b[j:j+sz]))
		}
		d.skip(k * sz)
	}
	return out, nil
}

// parse reads the header. In lenient mode, defects that do not prevent parsing are
// collected and returned instead of failing.
func parse(r io.ReaderAt, size int64, name string, lenient bool) (*File, []Problem, error) {
	if size < 0 {
		return nil, nil, &Problem{File: name, Offset: -1, Msg: fmt.Sprintf("negative file size %d", size)}
	}
	d := &decoder{name: name, size: size, lenient: lenient,
		br: bufio.NewReaderSize(io.NewSectionReader(r, 0, size), int(min(max(size, 64), 256<<10)))}
	f := &File{Path: name, Size: size, Alignment: DefaultAlignment}

	// Magic and version.
	var magic [4]byte
	if err := d.readFull(magic[:]); err != nil {
		return nil, nil, d.fail(0, "magic", err)
	}
	switch string(magic[:]) {
	case Magic:
	case "FUGG":
		return nil, nil, d.failf(0, "magic", "big-endian GGUF files are not supported")
	default:
		return nil, nil, d.failf(0, "magic", "not a GGUF file: magic %q, want %q", magic[:], Magic)
	}
	ver, err := d.u32()
	if err != nil {
		return nil, nil, d.fail(4, "header.version", err)
	}
	switch {
	case ver == 2 || ver == 3:
	case ver != 0 && ver&0xFFFF == 0:
		return nil, nil, d.failf(4, "header.version", "version 0x%08x looks byte-swapped: big-endian GGUF files are not supported", ver)
	case ver == 1:
		return nil, nil, d.failf(4, "header.version", "GGUF v1 is not supported (only v2 and v3)")
	default:
		return nil, nil, d.failf(4, "header.version", "unsupported GGUF version %d (only v2 and v3)", ver)
	}
	f.Version = ver

	nTensors, err := d.u64()
	if err != nil {
		return nil, nil, d.fail(8, "header.n_tensors", err)
	}
	nKV, err := d.u64()
	if err != nil {
		return nil, nil, d.fail(16, "header.n_kv", err)
	}
	rem := d.remaining()
	if nTensors > rem/minTensorBytes {
		return nil, nil, d.failf(8, "header.n_tensors", "%d tensors cannot fit in the %d bytes left in the file", nTensors, rem)
	}
	if nKV > rem/minKVBytes {
		return nil, nil, d.failf(16, "header.n_kv", "%d key/value pairs cannot fit in the %d bytes left in the file", nKV, rem)
	}
	if nTensors*minTensorBytes+nKV*minKVBytes > rem {
		return nil, nil, d.failf(8, "header", "%d tensors and %d key/value pairs cannot fit in the %d bytes left in the file", nTensors, nKV, rem)
	}

	// Key/value pairs.
	f.Metadata = make(Metadata, 0, min(nKV, initialCap))
	seen := make(map[string]int, min(nKV, initialCap))
	for i := uint64(0); i < nKV; i++ {
		at := d.pos
		field := fmt.Sprintf("kv[%d] key", i)
		key, err := d.str()
		if err != nil {
			return nil, nil, d.fail(at, field, err)
		}
		field = fmt.Sprintf("kv[%d] %q", i, key)
		switch j, dup := seen[key]; {
		case key == "":
			err = d.report(at, field, "empty key")
		case !utf8.ValidString(key):
			err = d.report(at, field, "key is not valid UTF-8")
		case dup:
			err = d.report(at, field, "duplicate key (first defined as kv[%d])", j)
		}
		if err != nil {
			return nil, nil, err
		}
		seen[key] = int(i)
		tat := d.pos
		t, err := d.u32()
		if err != nil {
			return nil, nil, d.fail(tat, field+" type", err)
		}
		if !ValueType(t).Valid() {
			return nil, nil, d.failf(tat, field+" type", "unknown value type %d", t)
		}
		v, err := d.value(ValueType(t), field)
		if err != nil {
			return nil, nil, err
		}
		f.Metadata = append(f.Metadata, KV{key, v})
	}

	// general.alignment.
	if v, ok := f.Metadata.Get(KeyAlignment); ok {
		a, _ := v.AsUint()
		var err error
		switch {
		case v.Type() != ValueUint32:
			err = d.report(-1, KeyAlignment, "has type %s, must be uint32", v.Type())
		case a == 0 || a&(a-1) != 0:
			err = d.report(-1, KeyAlignment, "alignment %d is not a power of two", a)
		default:
			f.Alignment = a
		}
		if err != nil {
			return nil, nil, err
		}
	}

	// Tensor infos.
	f.Tensors = make([]TensorInfo, 0, min(nTensors, initialCap))
	names := make(map[string]int, min(nTensors, initialCap))
	sizes := make([]uint64, 0, min(nTensors, initialCap))
	valid := make([]bool, 0, min(nTensors, initialCap))
	for i := uint64(0); i < nTensors; i++ {
		at := d.pos
		field := fmt.Sprintf("tensor[%d] name", i)
		tname, err := d.str()
		if err != nil {
			return nil, nil, d.fail(at, field, err)
		}
		field = fmt.Sprintf("tensor[%d] %q", i, tname)
		switch j, dup := names[tname]; {
		case tname == "":
			err = d.report(at, field, "empty tensor name")
		case !utf8.ValidString(tname):
			err = d.report(at, field, "tensor name is not valid UTF-8")
		case dup:
			err = d.report(at, field, "duplicate tensor name (first defined as tensor[%d])", j)
		}
		if err != nil {
			return nil, nil, err
		}
		names[tname] = int(i)
		nat := d.pos
		nd, err := d.u32()
		if err != nil {
			return nil, nil, d.fail(nat, field+" n_dims", err)
		}
		if nd > MaxDims {
			return nil, nil, d.failf(nat, field+" n_dims", "%d dimensions, at most %d allowed", nd, MaxDims)
		}
		dims := make([]uint64, nd)
		for j := range dims {
			dat := d.pos
			if dims[j], err = d.u64(); err != nil {
				return nil, nil, d.fail(dat, fmt.Sprintf("%s ne[%d]", field, j), err)
			}
			if dims[j] > math.MaxInt64 {
				return nil, nil, d.failf(dat, fmt.Sprintf("%s ne[%d]", field, j), "dimension %d is negative as int64", dims[j])
			}
		}
		tat := d.pos
		typ, err := d.u32()
		if err != nil {
			return nil, nil, d.fail(tat, field+" type", err)
		}
		oat := d.pos
		off, err := d.u64()
		if err != nil {
			return nil, nil, d.fail(oat, field+" offset", err)
		}
		ti := TensorInfo{Name: tname, Dims: dims, Type: GGMLType(typ), Offset: off}
		nb, serr := ti.Size()
		ok := serr == nil
		if !ok {
			if err := d.report(tat, field+" type/dims", "%v", serr); err != nil {
				return nil, nil, err
			}
		}
		f.Tensors = append(f.Tensors, ti)
		sizes = append(sizes, nb)
		valid = append(valid, ok)
	}
	f.HeaderSize = uint64(d.pos)
	f.DataOffset = f.HeaderSize
	if nTensors > 0 {
		f.DataOffset, _ = alignUp(f.HeaderSize, f.Alignment) // alignment ≤ 2^32, no overflow
	}

	if err := checkLayout(d, f, sizes, valid); err != nil {
		return nil, nil, err
	}
	return f, d.problems, nil
}

// checkLayout verifies that each tensor's data is aligned, inside the file and does not
// overlap another tensor.
func checkLayout(d *decoder, f *File, sizes []uint64, valid []bool) error {
	if len(f.Tensors) == 0 {
		return nil
	}
	if f.DataOffset > uint64(f.Size) {
		if err := d.report(int64(f.HeaderSize), "data section",
			"data section starts at byte %d, past the end of the file (%d bytes)", f.DataOffset, f.Size); err != nil {
			return err
		}
	}
	var avail uint64
	if uint64(f.Size) > f.DataOffset {
		avail = uint64(f.Size) - f.DataOffset
	}
	type span struct {
		start, end uint64
		idx        int
	}
	spans := make([]span, 0, len(f.Tensors))
	for i, t := range f.Tensors {
		if !valid[i] {
			continue
		}
		field := fmt.Sprintf("tensor[%d] %q offset", i, t.Name)
		if t.Offset%f.Alignment != 0 {
			if err := d.report(-1, field, "offset %d is not a multiple of the alignment %d", t.Offset, f.Alignment); err != nil {
				return err
			}
		}
		end := t.Offset + sizes[i]
		if end < t.Offset || end > avail {
			if err := d.report(-1, field, "data [%d, +%d bytes) lies outside the %d-byte data section (file %d bytes, data at %d)",
				t.Offset, sizes[i], avail, f.Size, f.DataOffset); err != nil {
				return err
			}
			continue
		}
		if sizes[i] > 0 {
			spans = append(spans, span{t.Offset, end, i})
		}
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].start < spans[b].start })
	last := -1 // span with the largest end so far
	for k, c := range spans {
		if last >= 0 && c.start < spans[last].end {
			p := spans[last]
			if err := d.report(-1, fmt.Sprintf("tensor[%d] %q offset", c.idx, f.Tensors[c.idx].Name),
				"data [%d, %d) overlaps tensor %q [%d, %d)", c.start, c.end, f.Tensors[p.idx].Name, p.start, p.end); err != nil {
				return err
			}
		}
		if last < 0 || c.end > spans[last].end {
			last = k
		}
	}
	return nil
}
