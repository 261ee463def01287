package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/tq-project/tq/internal/safeout"
)

// WriteTensor is one tensor to be written by WriteFile. Write must write exactly
// ByteSize(DType, Shape) bytes (little-endian elements, row-major) to w; it is called once,
// in order, so tensor data can be produced on the fly instead of held in memory.
type WriteTensor struct {
	Name  string
	DType DType
	Shape []int64
	Write func(w io.Writer) error
}

// BytesWriter returns a Write function that writes b.
func BytesWriter(b []byte) func(io.Writer) error {
	return func(w io.Writer) error { _, err := w.Write(b); return err }
}

// WriteFile writes a safetensors file atomically: data goes to a temporary file in the
// same folder, which is fsynced and renamed over path. Tensors are laid out in the given
// order; meta becomes the "__metadata__" map (keys sorted).
func WriteFile(path string, tensors []WriteTensor, meta map[string]string) error {
	hdr, sizes, err := buildHeader(tensors, meta)
	if err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	return writeAtomic(path, func(w io.Writer) error { return writeBody(w, hdr, sizes, tensors) })
}

// Write streams a safetensors file to w (no atomicity or fsync; see WriteFile).
func Write(w io.Writer, tensors []WriteTensor, meta map[string]string) error {
	hdr, sizes, err := buildHeader(tensors, meta)
	if err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	if err := writeBody(bw, hdr, sizes, tensors); err != nil {
		return fmt.Errorf("safetensors: %w", err)
	}
	return bw.Flush()
}

func writeBody(w io.Writer, hdr []byte, sizes []int64, tensors []WriteTensor) error {
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	for i, t := range tensors {
		cw := &exactWriter{w: w, left: sizes[i]}
		if err := t.Write(cw); err != nil {
			return fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		if cw.left != 0 {
			return fmt.Errorf("tensor %q: wrote %d bytes, want %d", t.Name, sizes[i]-cw.left, sizes[i])
		}
	}
	return nil
}

func buildHeader(tensors []WriteTensor, meta map[string]string) ([]byte, []int64, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	str := func(s string) {
		_ = enc.Encode(s) // strings always encode
		b.Truncate(b.Len() - 1)
	}
	b.WriteByte('{')
	first := true
	if len(meta) > 0 {
		b.WriteString(`"__metadata__":{`)
		keys := make([]string, 0, len(meta))
		for k := range meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			str(k)
			b.WriteByte(':')
			str(meta[k])
		}
		b.WriteByte('}')
		first = false
	}
	sizes := make([]int64, len(tensors))
	seen := make(map[string]bool, len(tensors))
	var off int64
	for i, t := range tensors {
		switch {
		case t.Name == "" || t.Name == metadataKey:
			return nil, nil, fmt.Errorf("invalid tensor name %q", t.Name)
		case seen[t.Name]:
			return nil, nil, fmt.Errorf("duplicate tensor %q", t.Name)
		case t.Write == nil:
			return nil, nil, fmt.Errorf("tensor %q: nil Write function", t.Name)
		}
		seen[t.Name] = true
		size, err := ByteSize(t.DType, t.Shape)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %w", t.Name, err)
		}
		sizes[i] = size
		if !first {
			b.WriteByte(',')
		}
		first = false
		str(t.Name)
		b.WriteString(`:{"dtype":"`)
		b.WriteString(t.DType.String())
		b.WriteString(`","shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
		b.WriteString(`],"data_offsets":[`)
		b.WriteString(strconv.FormatInt(off, 10))
		b.WriteByte(',')
		if off > 1<<62-size {
			return nil, nil, errors.New("total data size overflows")
		}
		off += size
		b.WriteString(strconv.FormatInt(off, 10))
		b.WriteString("]}")
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 { // pad so that the data section is 8-byte aligned
		b.WriteByte(' ')
	}
	if b.Len() > MaxHeaderSize {
		return nil, nil, fmt.Errorf("header of %d bytes exceeds the %d-byte limit", b.Len(), MaxHeaderSize)
	}
	return b.Bytes(), sizes, nil
}

type exactWriter struct {
	w    io.Writer
	left int64
}

func (e *exactWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > e.left {
		return 0, fmt.Errorf("tensor data longer than its dtype and shape allow (%d bytes left, %d offered)", e.left, len(p))
	}
	n, err := e.w.Write(p)
	e.left -= int64(n)
	return n, err
}

// WriteIndex writes a model.safetensors.index.json-style file atomically: weightMap maps
// tensor names to shard file names (relative to the index's folder) and totalSize is the
// sum of the tensors' data sizes.
func WriteIndex(path string, weightMap map[string]string, totalSize int64) error {
	for name, sh := range weightMap {
		if err := checkShardName(sh); err != nil {
			return fmt.Errorf("safetensors: writing %s: tensor %q: shard %q: %v", path, name, sh, err)
		}
	}
	doc := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": totalSize}, weightMap}
	data, err := json.MarshalIndent(doc, "", "  ") // map keys are sorted
	if err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	data = append(data, '\n')
	return writeAtomic(path, func(w io.Writer) error { _, err := w.Write(data); return err })
}

// writeAtomic writes a file as internal/safeout does: through a temporary file in the same
// folder, fsynced, renamed over path, folder fsynced (a device or FIFO is written directly).
func writeAtomic(path string, fill func(io.Writer) error) error {
	if err := safeout.Write(path, safeout.Options{}, fill); err != nil {
		return fmt.Errorf("safetensors: writing %s: %w", path, err)
	}
	return nil
}
