package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"
)

// MaxHeaderSize is the largest JSON header accepted (the limit of the reference
// implementation, 100 MB).
const MaxHeaderSize = 100_000_000

// metadataKey is the reserved header key holding free-form string metadata.
const metadataKey = "__metadata__"

// HeaderError describes a malformed or hostile safetensors header.
type HeaderError struct {
	File   string // file the header came from
	Tensor string // tensor entry concerned, or ""
	Msg    string
}

func (e *HeaderError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("safetensors: %s: tensor %q: %s", e.File, e.Tensor, e.Msg)
	}
	return fmt.Sprintf("safetensors: %s: %s", e.File, e.Msg)
}

type header struct {
	tensors []TensorInfo // Offset relative to the start of the data section
	meta    map[string]string
}

// parseHeader validates the JSON header hdr of file, whose data section is dataLen bytes.
// The returned tensors are sorted by data offset. Every size is checked against dataLen
// before anything is allocated from it.
func parseHeader(file string, hdr []byte, dataLen int64) (*header, error) {
	fail := func(tensor, format string, args ...any) (*header, error) {
		return nil, &HeaderError{File: file, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
	}
	if !utf8.Valid(hdr) {
		return fail("", "header is not valid UTF-8")
	}
	trimmed := bytes.TrimLeft(hdr, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fail("", "header is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return fail("", "invalid header JSON: %v", err)
	}
	h := &header{}
	seen := make(map[string]struct{})
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail("", "invalid header JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return fail("", "invalid header JSON: expected a key, found %v", tok)
		}
		if _, dup := seen[name]; dup {
			return fail(name, "duplicate entry in header")
		}
		seen[name] = struct{}{}
		if name == metadataKey {
			m, err := decodeStringMap(dec)
			if err != nil {
				return fail("", "field %q: %v", metadataKey, err)
			}
			h.meta = m
			continue
		}
		var msg json.RawMessage
		if err := dec.Decode(&msg); err != nil {
			return fail(name, "invalid header JSON: %v", err)
		}
		var raw rawEntry
		if err := decodeEntry(msg, &raw); err != nil {
			return fail(name, "%v", err)
		}
		ti, err := raw.validate(name, dataLen)
		if err != nil {
			return fail(name, "%v", err)
		}
		h.tensors = append(h.tensors, ti)
	}
	if _, err := dec.Token(); err != nil {
		return fail("", "invalid header JSON: %v", err)
	}
	rest := hdr[dec.InputOffset():]
	if len(bytes.TrimRight(rest, " \t\r\n\x00")) != 0 {
		return fail("", "unexpected data after the header JSON object")
	}
	sort.SliceStable(h.tensors, func(i, j int) bool {
		a, b := h.tensors[i], h.tensors[j]
		if a.Offset != b.Offset {
			return a.Offset < b.Offset
		}
		return a.Size < b.Size
	})
	var prev *TensorInfo
	for i := range h.tensors {
		t := &h.tensors[i]
		if t.Size == 0 {
			continue
		}
		if prev != nil && t.Offset < prev.Offset+prev.Size {
			return fail(t.Name, "data_offsets [%d, %d] overlap tensor %q [%d, %d]",
				t.Offset, t.Offset+t.Size, prev.Name, prev.Offset, prev.Offset+prev.Size)
		}
		prev = t
	}
	return h, nil
}

type rawEntry struct {
	DType       *string           `json:"dtype"`
	Shape       []json.RawMessage `json:"shape"`
	DataOffsets []json.RawMessage `json:"data_offsets"`
}

func (r *rawEntry) validate(name string, dataLen int64) (TensorInfo, error) {
	ti := TensorInfo{Name: name}
	if name == "" {
		return ti, errors.New("empty tensor name")
	}
	if r.DType == nil {
		return ti, errors.New(`missing field "dtype"`)
	}
	dt, err := ParseDType(*r.DType)
	if err != nil {
		return ti, fmt.Errorf(`field "dtype": %v`, err)
	}
	ti.DType = dt
	if r.Shape == nil {
		return ti, errors.New(`missing field "shape"`)
	}
	if len(r.Shape) > MaxRank {
		return ti, fmt.Errorf(`field "shape": rank %d exceeds the maximum of %d`, len(r.Shape), MaxRank)
	}
	ti.Shape = make([]int64, len(r.Shape))
	for i, v := range r.Shape {
		d, err := parseJSONInt(v)
		if err != nil {
			return ti, fmt.Errorf(`field "shape"[%d]: %v`, i, err)
		}
		if d < 0 {
			return ti, fmt.Errorf(`field "shape"[%d]: negative dimension %d`, i, d)
		}
		ti.Shape[i] = d
	}
	size, err := ByteSize(dt, ti.Shape)
	if err != nil {
		return ti, fmt.Errorf(`field "shape": %v`, err)
	}
	if len(r.DataOffsets) != 2 {
		return ti, fmt.Errorf(`field "data_offsets": want 2 integers, found %d values`, len(r.DataOffsets))
	}
	begin, err := parseJSONInt(r.DataOffsets[0])
	if err != nil {
		return ti, fmt.Errorf(`field "data_offsets"[0]: %v`, err)
	}
	end, err := parseJSONInt(r.DataOffsets[1])
	if err != nil {
		return ti, fmt.Errorf(`field "data_offsets"[1]: %v`, err)
	}
	switch {
	case begin < 0 || end < begin:
		return ti, fmt.Errorf(`field "data_offsets": invalid range [%d, %d]`, begin, end)
	case end > dataLen:
		return ti, fmt.Errorf(`field "data_offsets": range [%d, %d] exceeds the %d-byte data section`, begin, end, dataLen)
	case end-begin != size:
		return ti, fmt.Errorf(`field "data_offsets": range [%d, %d] holds %d bytes but %v%v needs %d`,
			begin, end, end-begin, dt, ti.Shape, size)
	}
	ti.Offset = begin
	ti.Size = size
	return ti, nil
}

func decodeEntry(msg json.RawMessage, raw *rawEntry) error {
	if t := bytes.TrimSpace(msg); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("entry must be an object with dtype, shape and data_offsets, found %.40s", t)
	}
	if err := json.Unmarshal(msg, raw); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %q: expected %v, found JSON %s", te.Field, te.Type, te.Value)
		}
		return err
	}
	return nil
}

// parseJSONInt accepts a plain JSON integer literal that fits in int64.
func parseJSONInt(raw json.RawMessage) (int64, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, fmt.Errorf("expected an integer, found %.40s", s)
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("expected an int64 integer, found %.40s", s)
	}
	return v, nil
}

// decodeStringMap reads one JSON object whose values are all strings, rejecting
// duplicate keys. null decodes to an empty map.
func decodeStringMap(dec *json.Decoder) (map[string]string, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonErr(err)
	}
	if tok == nil {
		return map[string]string{}, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("expected an object of strings, found %v", tok)
	}
	m := make(map[string]string)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonErr(err)
		}
		k, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("expected a key, found %v", tok)
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, fmt.Errorf("key %q: %v", k, jsonErr(err))
		}
		v, ok := tok.(string)
		if !ok {
			if d, isDelim := tok.(json.Delim); isDelim {
				return nil, fmt.Errorf("key %q: value must be a string, found %v", k, d)
			}
			return nil, fmt.Errorf("key %q: value must be a string, found %v", k, tok)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("duplicate key %q", k)
		}
		m[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, jsonErr(err)
	}
	return m, nil
}

// jsonErr turns decoder errors, including a bare io.EOF, into "invalid JSON" errors.
func jsonErr(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("invalid JSON: %v", err)
}

// readHeader reads and validates the header of a safetensors file of the given size
// through r, without touching the data section.
func readHeader(file string, r io.ReaderAt, size int64) (*header, int64, error) {
	if size < 8 {
		return nil, 0, &HeaderError{File: file, Msg: fmt.Sprintf("file is %d bytes, too small for the 8-byte header length", size)}
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, 0, fmt.Errorf("safetensors: %s: reading header length: %w", file, err)
	}
	n := uint64(lenBuf[0]) | uint64(lenBuf[1])<<8 | uint64(lenBuf[2])<<16 | uint64(lenBuf[3])<<24 |
		uint64(lenBuf[4])<<32 | uint64(lenBuf[5])<<40 | uint64(lenBuf[6])<<48 | uint64(lenBuf[7])<<56
	if n > MaxHeaderSize {
		return nil, 0, &HeaderError{File: file, Msg: fmt.Sprintf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize)}
	}
	if n > uint64(size-8) {
		return nil, 0, &HeaderError{File: file, Msg: fmt.Sprintf("header length %d exceeds the file (%d bytes after the length)", n, size-8)}
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, 0, fmt.Errorf("safetensors: %s: reading %d-byte header: %w", file, n, err)
	}
	dataStart := 8 + int64(n)
	h, err := parseHeader(file, hdr, size-dataStart)
	if err != nil {
		return nil, 0, err
	}
	return h, dataStart, nil
}
