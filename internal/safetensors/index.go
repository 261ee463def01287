package safetensors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// IndexFileName is the name of the shard index written next to sharded checkpoints.
const IndexFileName = "model.safetensors.index.json"

// MaxIndexSize bounds the size of an index file read into memory.
const MaxIndexSize = 100_000_000

// IndexError describes a malformed or hostile shard index.
type IndexError struct {
	File   string // the index file
	Tensor string // tensor concerned, or ""
	Msg    string
}

func (e *IndexError) Error() string {
	if e.Tensor != "" {
		return fmt.Sprintf("safetensors: index %s: tensor %q: %s", e.File, e.Tensor, e.Msg)
	}
	return fmt.Sprintf("safetensors: index %s: %s", e.File, e.Msg)
}

// parseIndex validates the JSON of an index file and returns its weight_map. Shard names
// are checked lexically here (relative, no "..", no NUL); symlinks are checked on open.
func parseIndex(file string, data []byte) (map[string]string, error) {
	fail := func(tensor, format string, args ...any) (map[string]string, error) {
		return nil, &IndexError{File: file, Tensor: tensor, Msg: fmt.Sprintf(format, args...)}
	}
	if !utf8.Valid(data) {
		return fail("", "not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return fail("", "invalid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fail("", "not a JSON object")
	}
	var wm map[string]string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail("", "invalid JSON: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return fail("", "invalid JSON: expected a key, found %v", tok)
		}
		if seen[key] {
			return fail("", "duplicate field %q", key)
		}
		seen[key] = true
		if key == "weight_map" {
			wm, err = decodeStringMap(dec)
			if err != nil {
				return fail("", `field "weight_map": %v`, err)
			}
			continue
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fail("", "field %q: invalid JSON: %v", key, err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return fail("", "invalid JSON: %v", err)
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return fail("", "unexpected data after the JSON object")
	}
	if wm == nil {
		return fail("", `missing field "weight_map"`)
	}
	if len(wm) == 0 {
		return fail("", `field "weight_map" is empty`)
	}
	for name, shard := range wm {
		if name == "" {
			return fail("", `field "weight_map": empty tensor name`)
		}
		if err := checkShardName(shard); err != nil {
			return fail(name, "shard %q: %v", shard, err)
		}
	}
	return wm, nil
}

// checkShardName rejects names that could point outside the model folder.
func checkShardName(shard string) error {
	switch {
	case shard == "":
		return fmt.Errorf("empty shard file name")
	case strings.ContainsRune(shard, 0):
		return fmt.Errorf("shard file name contains a NUL byte")
	case filepath.IsAbs(shard) || strings.HasPrefix(shard, "/") || strings.HasPrefix(shard, `\`):
		return fmt.Errorf("absolute path not allowed")
	case !filepath.IsLocal(shard):
		return fmt.Errorf("path escapes the model folder")
	}
	for _, c := range strings.FieldsFunc(shard, func(r rune) bool { return r == '/' || r == '\\' }) {
		if c == ".." {
			return fmt.Errorf("path escapes the model folder")
		}
	}
	if strings.HasSuffix(shard, "/") || strings.HasSuffix(shard, `\`) || filepath.Clean(shard) != shard {
		return fmt.Errorf("not a clean relative file path")
	}
	return nil
}
