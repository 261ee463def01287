// Package tokfile reads and writes calibration token files: tokenized,
// padded calibration sequences in a small little-endian binary format
// (docs/formats-tokfile.md).
//
// Layout (all integers little-endian):
//
//	offset  size  field
//	0       6     magic "TQTOK\x00"
//	6       4     version (uint32) = 1
//	10      4     count: number of sequences (uint32)
//	14      32    vocab hash (SHA-256 supplied by the caller)
//	46      4     pad id (int32)
//	50      4     pad multiple (uint32, 0 or 1 = none)
//	54      4     max length (uint32, 0 = unlimited)
//	58            count records:
//	                total length T (uint32, padded length)
//	                attention length A (uint32, A <= T)
//	                T token ids (int32); ids[A:] are all the pad id
//	end-32  32    SHA-256 of every preceding byte
package tokfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/tq-project/tq/internal/boundedread"
	"github.com/tq-project/tq/internal/safeout"
)

// Magic starts every token file.
const Magic = "TQTOK\x00"

// Version is the format version written and accepted.
const Version = 1

// HeaderSize is the size of the fixed header in bytes.
const HeaderSize = 58

// TrailerSize is the size of the SHA-256 trailer.
const TrailerSize = sha256.Size

// Header holds the file-wide fields.
type Header struct {
	// VocabHash identifies the tokenizer vocabulary the ids refer to
	// (SHA-256 computed by the caller).
	VocabHash [32]byte
	// PadID is the token id used for padding.
	PadID int32
	// PadMultiple: every padded length is a multiple of it (or equals
	// MaxLen). 0 and 1 mean no rounding.
	PadMultiple uint32
	// MaxLen is the longest allowed padded length; 0 means unlimited.
	MaxLen uint32
}

// Sequence is one calibration sequence.
type Sequence struct {
	// IDs are the padded token ids (length = total length).
	IDs []int32
	// AttnLen is the number of real tokens; IDs[AttnLen:] are padding.
	AttnLen int
}

// File is a decoded token file.
type File struct {
	Header
	Seqs []Sequence
}

// Pad truncates ids to maxLen (when maxLen > 0) and pads them with padID up
// to the next multiple of multiple, but never beyond maxLen. It returns the
// padded ids (a new slice) and the number of real tokens. multiple <= 1
// means no rounding; maxLen <= 0 means no limit.
func Pad(ids []int32, multiple, maxLen int, padID int32) (padded []int32, attnLen int) {
	attnLen = len(ids)
	if maxLen > 0 && attnLen > maxLen {
		attnLen = maxLen
	}
	total := attnLen
	if multiple > 1 && total%multiple != 0 {
		total += multiple - total%multiple
	}
	if maxLen > 0 && total > maxLen {
		total = maxLen
	}
	padded = make([]int32, total)
	copy(padded, ids[:attnLen])
	for i := attnLen; i < total; i++ {
		padded[i] = padID
	}
	return padded, attnLen
}

// check validates one sequence against the header.
func (h *Header) check(i int, s Sequence) error {
	t := len(s.IDs)
	if t > 1<<31-1 {
		return fmt.Errorf("sequence %d: %d tokens is too long", i, t)
	}
	if s.AttnLen < 0 || s.AttnLen > t {
		return fmt.Errorf("sequence %d: attention length %d outside 0..%d", i, s.AttnLen, t)
	}
	if h.MaxLen > 0 && uint64(t) > uint64(h.MaxLen) {
		return fmt.Errorf("sequence %d: padded length %d exceeds max length %d", i, t, h.MaxLen)
	}
	if h.PadMultiple > 1 && uint64(t)%uint64(h.PadMultiple) != 0 && !(h.MaxLen > 0 && uint64(t) == uint64(h.MaxLen)) {
		return fmt.Errorf("sequence %d: padded length %d is not a multiple of %d", i, t, h.PadMultiple)
	}
	for j := s.AttnLen; j < t; j++ {
		if s.IDs[j] != h.PadID {
			return fmt.Errorf("sequence %d: token %d in the padding is %d, not the pad id %d", i, j, s.IDs[j], h.PadID)
		}
	}
	for j := 0; j < s.AttnLen; j++ {
		if s.IDs[j] < 0 {
			return fmt.Errorf("sequence %d: token %d has negative id %d", i, j, s.IDs[j])
		}
	}
	return nil
}

func (h *Header) encode(count uint32) []byte {
	b := make([]byte, HeaderSize)
	copy(b, Magic)
	binary.LittleEndian.PutUint32(b[6:], Version)
	binary.LittleEndian.PutUint32(b[10:], count)
	copy(b[14:46], h.VocabHash[:])
	binary.LittleEndian.PutUint32(b[46:], uint32(h.PadID))
	binary.LittleEndian.PutUint32(b[50:], h.PadMultiple)
	binary.LittleEndian.PutUint32(b[54:], h.MaxLen)
	return b
}

func encodeSeq(w io.Writer, s Sequence) error {
	buf := make([]byte, 8+4*len(s.IDs))
	binary.LittleEndian.PutUint32(buf[0:], uint32(len(s.IDs)))
	binary.LittleEndian.PutUint32(buf[4:], uint32(s.AttnLen))
	for i, id := range s.IDs {
		binary.LittleEndian.PutUint32(buf[8+4*i:], uint32(id))
	}
	_, err := w.Write(buf)
	return err
}

// Encode returns the complete file image.
func Encode(h Header, seqs []Sequence) ([]byte, error) {
	if uint64(len(seqs)) > 1<<32-1 {
		return nil, fmt.Errorf("tokfile: %d sequences is too many", len(seqs))
	}
	var buf bytes.Buffer
	buf.Write(h.encode(uint32(len(seqs))))
	for i, s := range seqs {
		if err := h.check(i, s); err != nil {
			return nil, fmt.Errorf("tokfile: %w", err)
		}
		if err := encodeSeq(&buf, s); err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256(buf.Bytes())
	buf.Write(sum[:])
	return buf.Bytes(), nil
}

// WriteFile writes a token file atomically (temporary file in the same
// directory, fsync, rename).
func WriteFile(path string, h Header, seqs []Sequence) error {
	w, err := Create(path, h)
	if err != nil {
		return err
	}
	for _, s := range seqs {
		if err := w.Append(s); err != nil {
			w.Abort()
			return err
		}
	}
	return w.Close()
}

// Writer streams sequences into a token file. The file appears at its
// final path only when Close succeeds.
type Writer struct {
	path  string
	tmp   *safeout.File
	hdr   Header
	count uint64
	err   error
}

// Create starts a token file at path. The file is written as internal/safeout rules
// say; it must be a regular file (the header is rewritten at the end).
func Create(path string, h Header) (*Writer, error) {
	tmp, err := safeout.Create(path, safeout.Options{RegularOnly: true})
	if err != nil {
		return nil, fmt.Errorf("tokfile: %w", err)
	}
	w := &Writer{path: path, tmp: tmp, hdr: h}
	if _, err := tmp.Write(h.encode(0)); err != nil {
		w.Abort()
		return nil, fmt.Errorf("tokfile: %s: %w", path, err)
	}
	return w, nil
}

// Append writes one sequence.
func (w *Writer) Append(s Sequence) error {
	if w.err != nil {
		return w.err
	}
	if err := w.hdr.check(int(w.count), s); err != nil {
		return fmt.Errorf("tokfile: %s: %w", w.path, err)
	}
	if w.count == 1<<32-1 {
		return fmt.Errorf("tokfile: %s: too many sequences", w.path)
	}
	if err := encodeSeq(w.tmp, s); err != nil {
		w.err = fmt.Errorf("tokfile: %s: %w", w.path, err)
		return w.err
	}
	w.count++
	return nil
}

// Close finalizes the header count, appends the SHA-256 trailer, syncs and
// renames the file into place.
func (w *Writer) Close() error {
	if w.err != nil {
		w.Abort()
		return w.err
	}
	fail := func(err error) error {
		w.Abort()
		return fmt.Errorf("tokfile: %s: %w", w.path, err)
	}
	if _, err := w.tmp.WriteAt(w.hdr.encode(uint32(w.count)), 0); err != nil {
		return fail(err)
	}
	if _, err := w.tmp.Seek(0, io.SeekStart); err != nil {
		return fail(err)
	}
	hs := sha256.New()
	if _, err := io.Copy(hs, w.tmp); err != nil {
		return fail(err)
	}
	if _, err := w.tmp.Write(hs.Sum(nil)); err != nil {
		return fail(err)
	}
	err := w.tmp.Commit()
	w.tmp = nil
	if err != nil {
		w.err = fmt.Errorf("tokfile: %w", err)
		return w.err
	}
	w.err = errors.New("tokfile: writer closed")
	return nil
}

// Abort discards the temporary file.
func (w *Writer) Abort() {
	if w.tmp != nil {
		w.tmp.Abort()
		w.tmp = nil
	}
	if w.err == nil {
		w.err = errors.New("tokfile: writer aborted")
	}
}

// MaxFileSize bounds the token files ReadFile reads (512M tokens: far more than any
// calibration uses).
const MaxFileSize = 2 << 30

// ReadFile reads and verifies a token file. Memory use is bounded by the
// file size, at most MaxFileSize.
func ReadFile(path string) (*File, error) {
	data, err := boundedread.ReadFile(path, "token file", MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("tokfile: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokfile: %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes and verifies a token file image. Every length is checked
// against the bytes actually present before anything is allocated.
func Parse(data []byte) (*File, error) {
	if len(data) < HeaderSize+TrailerSize {
		return nil, fmt.Errorf("file is %d bytes, shorter than header and checksum (%d)", len(data), HeaderSize+TrailerSize)
	}
	if string(data[:6]) != Magic {
		return nil, fmt.Errorf("bad magic %q (not a token file)", data[:6])
	}
	if v := binary.LittleEndian.Uint32(data[6:]); v != Version {
		return nil, fmt.Errorf("unsupported version %d (want %d)", v, Version)
	}
	body := data[:len(data)-TrailerSize]
	sum := sha256.Sum256(body)
	if !bytes.Equal(sum[:], data[len(body):]) {
		return nil, errors.New("checksum mismatch: file is corrupt or truncated")
	}
	f := &File{}
	count := binary.LittleEndian.Uint32(data[10:])
	copy(f.VocabHash[:], data[14:46])
	f.PadID = int32(binary.LittleEndian.Uint32(data[46:]))
	f.PadMultiple = binary.LittleEndian.Uint32(data[50:])
	f.MaxLen = binary.LittleEndian.Uint32(data[54:])
	rest := body[HeaderSize:]
	if uint64(count) > uint64(len(rest))/8 {
		return nil, fmt.Errorf("count %d needs at least %d bytes of records, have %d", count, uint64(count)*8, len(rest))
	}
	f.Seqs = make([]Sequence, 0, count)
	for i := 0; i < int(count); i++ {
		if len(rest) < 8 {
			return nil, fmt.Errorf("sequence %d: record header truncated", i)
		}
		total := binary.LittleEndian.Uint32(rest[0:])
		attn := binary.LittleEndian.Uint32(rest[4:])
		rest = rest[8:]
		if uint64(total) > uint64(len(rest))/4 {
			return nil, fmt.Errorf("sequence %d: length %d needs %d bytes, have %d", i, total, uint64(total)*4, len(rest))
		}
		s := Sequence{IDs: make([]int32, total), AttnLen: int(attn)}
		if attn > total {
			return nil, fmt.Errorf("sequence %d: attention length %d exceeds length %d", i, attn, total)
		}
		for j := range s.IDs {
			s.IDs[j] = int32(binary.LittleEndian.Uint32(rest[4*j:]))
		}
		rest = rest[4*int(total):]
		if err := f.Header.check(i, s); err != nil {
			return nil, err
		}
		f.Seqs = append(f.Seqs, s)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%d unexpected bytes after the last sequence", len(rest))
	}
	return f, nil
}
