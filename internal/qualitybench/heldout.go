package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// maxHeldoutBytes bounds the held-out token file read into memory.
const maxHeldoutBytes = 64 << 20

// heldout is testdata/trained/data/heldout-tokens.json: the token ids of the held-out
// documents (prepare_data.py) and the end-of-text id that separates them.
type heldout struct {
	EOT       int32 `json:"eot"`
	Documents []struct {
		Path string  `json:"path"`
		IDs  []int32 `json:"ids"`
	} `json:"documents"`
}

// readRegular reads a regular file of at most limit bytes.
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d this reader accepts", path, st.Size(), limit)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: grew past %d bytes while read", path, limit)
	}
	return b, nil
}

// loadWindows reads the held-out token file and cuts it into windows of ctx tokens: every
// document's ids preceded by the end-of-text id, the documents concatenated in file order,
// consecutive windows, the tail dropped (as train.py's heldout_windows). n > 0 keeps the
// first n windows. Every id must be below vocab.
func loadWindows(path string, ctx, n, vocab int) ([][]int32, error) {
	b, err := readRegular(path, maxHeldoutBytes)
	if err != nil {
		return nil, err
	}
	var h heldout
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return windows(path, &h, ctx, n, vocab)
}

func windows(path string, h *heldout, ctx, n, vocab int) ([][]int32, error) {
	if ctx < 2 || ctx > 1<<16 {
		return nil, fmt.Errorf("context %d: want 2..65536 tokens", ctx)
	}
	if len(h.Documents) == 0 {
		return nil, fmt.Errorf("%s: no documents", path)
	}
	check := func(id int32, where string) error {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("%s: %s: token id %d outside the model's vocabulary of %d", path, where, id, vocab)
		}
		return nil
	}
	if err := check(h.EOT, "eot"); err != nil {
		return nil, err
	}
	var ids []int32
	for i, d := range h.Documents {
		ids = append(ids, h.EOT)
		for _, id := range d.IDs {
			if err := check(id, fmt.Sprintf("document %d (%s)", i, d.Path)); err != nil {
				return nil, err
			}
		}
		ids = append(ids, d.IDs...)
	}
	var out [][]int32
	for i := 0; i+ctx <= len(ids); i += ctx {
		if n > 0 && len(out) == n {
			break
		}
		out = append(out, ids[i:i+ctx])
	}
	if len(out) == 0 || (n > 0 && len(out) < n) {
		return nil, fmt.Errorf("%s: %d tokens give %d windows of %d, want %d", path, len(ids), len(out), ctx, max(n, 1))
	}
	return out, nil
}
