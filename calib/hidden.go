package calib

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// hiddenStore keeps the residual stream of every calibration sequence between layers. Two
// files in the checkpoint directory take turns: layer i reads the stream from one and writes its
// output to the other, so the file holding the last finished layer's output is never modified
// while the next layer runs (an interrupted run resumes from it). Sequences whose streams fit
// the memory allowance are also held in RAM and read from there; the others are read back from
// the file (spilled).
type hiddenStore struct {
	dir   string
	width int     // floats per token (n_embd)
	lens  []int   // tokens per sequence
	offs  []int64 // byte offset of each sequence in the files
	size  int64
	ram   [][]float32
	files [2]*os.File
	cur   int // index of the file holding the current state
	buf   []byte
	ramN  int
}

func hiddenName(dir string, i int) string {
	return filepath.Join(dir, fmt.Sprintf("hidden-%d.bin", i))
}

// newHiddenStore creates (or, when resume is set, reopens) the store. ramBytes bounds the
// bytes kept in RAM.
func newHiddenStore(dir string, width int, lens []int, ramBytes int64, resume bool, cur int) (*hiddenStore, error) {
	h := &hiddenStore{dir: dir, width: width, lens: lens, cur: cur}
	h.offs = make([]int64, len(lens))
	var maxLen int
	for i, n := range lens {
		h.offs[i] = h.size
		h.size += int64(n) * int64(width) * 4
		maxLen = max(maxLen, n)
	}
	h.buf = make([]byte, maxLen*width*4)
	for i := range h.files {
		flag := os.O_RDWR | os.O_CREATE
		if !resume {
			flag |= os.O_TRUNC
		}
		f, err := os.OpenFile(hiddenName(dir, i), flag, 0o644)
		if err != nil {
			h.close()
			return nil, fmt.Errorf("calib: hidden states: %w", err)
		}
		h.files[i] = f
		if resume && i == cur {
			fi, err := f.Stat()
			if err != nil {
				h.close()
				return nil, fmt.Errorf("calib: checkpoint: %w", err)
			}
			if fi.Size() != h.size {
				h.close()
				return nil, fmt.Errorf("calib: checkpoint %s holds %d bytes, want %d: rerun with --restart to start over", f.Name(), fi.Size(), h.size)
			}
		} else if err := f.Truncate(h.size); err != nil {
			h.close()
			return nil, fmt.Errorf("calib: hidden states: %w", err)
		}
	}
	h.ram = make([][]float32, len(lens))
	var used int64
	for i, n := range lens {
		b := int64(n) * int64(width) * 4
		if used+b > ramBytes {
			break
		}
		used += b
		h.ram[i] = make([]float32, n*width)
		h.ramN++
		if resume {
			if err := h.readFile(h.cur, i, h.ram[i]); err != nil {
				h.close()
				return nil, err
			}
		}
	}
	return h, nil
}

// inRAM is the number of sequences held in RAM.
func (h *hiddenStore) inRAM() int { return h.ramN }

func (h *hiddenStore) readFile(fi, i int, dst []float32) error {
	b := h.buf[:len(dst)*4]
	if _, err := h.files[fi].ReadAt(b, h.offs[i]); err != nil {
		return fmt.Errorf("calib: reading hidden states of sequence %d: %w", i, err)
	}
	for j := range dst {
		dst[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
	}
	return nil
}

// get returns the current stream of sequence i: the RAM copy (modified in place by the caller)
// or scratch filled from the file.
func (h *hiddenStore) get(i int, scratch []float32) ([]float32, error) {
	if h.ram[i] != nil {
		return h.ram[i], nil
	}
	dst := scratch[:h.lens[i]*h.width]
	return dst, h.readFile(h.cur, i, dst)
}

// put records the next state of sequence i (written to the other file; the RAM copy updated).
func (h *hiddenStore) put(i int, x []float32) error {
	if r := h.ram[i]; r != nil && &r[0] != &x[0] {
		copy(r, x)
	}
	b := h.buf[:len(x)*4]
	for j, v := range x {
		binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(v))
	}
	if _, err := h.files[1-h.cur].WriteAt(b, h.offs[i]); err != nil {
		return fmt.Errorf("calib: writing hidden states of sequence %d: %w", i, err)
	}
	return nil
}

// commit makes the states written by put the current ones (after fsync).
func (h *hiddenStore) commit() error {
	if err := h.files[1-h.cur].Sync(); err != nil {
		return fmt.Errorf("calib: hidden states: %w", err)
	}
	h.cur = 1 - h.cur
	return nil
}

// releaseRAM drops the states kept in memory (after the last step nothing reads them), so
// that what follows has the memory budget they held.
func (h *hiddenStore) releaseRAM() {
	h.ram, h.buf = nil, nil
}

func (h *hiddenStore) close() {
	for _, f := range h.files {
		if f != nil {
			f.Close()
		}
	}
}

func (h *hiddenStore) remove() {
	h.close()
	for i := range h.files {
		os.Remove(hiddenName(h.dir, i))
	}
}
