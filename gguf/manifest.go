package gguf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tq-project/tq/internal/boundedread"
)

// maxManifestBytes bounds the size of a manifest we are willing to read.
const maxManifestBytes = 1 << 20

// ManifestEntry is one line of a SHA-256 manifest in `sha256sum` format:
// "<64 hex digits><space><space or '*'><file name>".
type ManifestEntry struct {
	Name   string // base name of the file, relative to the manifest's directory
	SHA256 string // lowercase hex
}

// ParseManifest parses a manifest in `sha256sum -c` format. Only plain base names are
// accepted (no directories, no "." or "..", no backslash-escaped names), so a manifest can
// only refer to files beside it. name is used in errors.
func ParseManifest(r io.Reader, name string) ([]ManifestEntry, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("gguf: manifest %s: %w", name, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("gguf: manifest %s: larger than %d bytes", name, maxManifestBytes)
	}
	var out []ManifestEntry
	seen := map[string]int{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		ln := i + 1
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			continue
		}
		if len(line) < 64+2+1 || line[64] != ' ' || (line[65] != ' ' && line[65] != '*') {
			return nil, fmt.Errorf("gguf: manifest %s line %d: not in sha256sum format (<64 hex> <space><space|*><name>)", name, ln)
		}
		sum := strings.ToLower(string(line[:64]))
		if _, err := hex.DecodeString(sum); err != nil {
			return nil, fmt.Errorf("gguf: manifest %s line %d: invalid hex digest", name, ln)
		}
		file := string(line[66:])
		switch {
		case line[0] == '\\' || strings.ContainsAny(file, "\\\x00"):
			return nil, fmt.Errorf("gguf: manifest %s line %d: escaped or NUL-containing file names are not supported", name, ln)
		case file == "." || file == ".." || strings.ContainsRune(file, '/') || filepath.Base(file) != file:
			return nil, fmt.Errorf("gguf: manifest %s line %d: file name %q is not a plain base name", name, ln, file)
		}
		if j, dup := seen[file]; dup {
			return nil, fmt.Errorf("gguf: manifest %s line %d: %q already listed on line %d", name, ln, file, j)
		}
		seen[file] = ln
		out = append(out, ManifestEntry{Name: file, SHA256: sum})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("gguf: manifest %s: no entries", name)
	}
	return out, nil
}

// ManifestResult is the outcome of checking one manifest entry.
type ManifestResult struct {
	ManifestEntry
	Path string // full path of the checked file
	Got  string // digest computed now ("" when the file could not be read)
	Err  error  // read error, or nil
}

// OK reports whether the file was read and its digest matches.
func (r ManifestResult) OK() bool { return r.Err == nil && r.Got == r.SHA256 }

// FindManifests returns the manifests that cover path: path itself when it is a manifest
// (a SHA256SUMS file or a "*.sha256" file); for a directory, its SHA256SUMS and every
// "*.sha256" file in it; for a GGUF file, its "X.gguf.sha256" or, failing that, the
// SHA256SUMS beside it.
func FindManifests(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	if st.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("gguf: %w", err)
		}
		var out []string
		for _, e := range ents {
			if e.Type().IsRegular() && (e.Name() == ManifestName || strings.HasSuffix(e.Name(), ManifestSuffix)) {
				out = append(out, filepath.Join(path, e.Name()))
			}
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("gguf: no %s or *%s manifest in directory %s", ManifestName, ManifestSuffix, path)
		}
		return out, nil
	}
	if filepath.Base(path) == ManifestName || strings.HasSuffix(path, ManifestSuffix) {
		return []string{path}, nil
	}
	for _, m := range []string{path + ManifestSuffix, filepath.Join(filepath.Dir(path), ManifestName)} {
		if _, err := os.Stat(m); err == nil {
			return []string{m}, nil
		}
	}
	return nil, fmt.Errorf("gguf: no manifest for %s (looked for %s and %s)", path, filepath.Base(path)+ManifestSuffix, ManifestName)
}

// VerifyManifest finds the manifests for path (see FindManifests), recomputes the SHA-256
// of every file they list and returns one result per entry. The error is non-nil when no
// manifest is found or one cannot be parsed, or when any listed file is missing or
// differs; when path is a GGUF file covered by a SHA256SUMS, an entry for it must exist.
func VerifyManifest(path string) ([]ManifestResult, error) {
	mans, err := FindManifests(path)
	if err != nil {
		return nil, err
	}
	var results []ManifestResult
	var bad []string
	buf := make([]byte, 1<<20)
	for _, man := range mans {
		f, _, err := boundedread.Open(man, "manifest")
		if err != nil {
			return nil, fmt.Errorf("gguf: %w", err)
		}
		entries, err := ParseManifest(f, man)
		f.Close()
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(path); err == nil && !st.IsDir() && man != path {
			base := filepath.Base(path)
			found := false
			for _, e := range entries {
				found = found || e.Name == base
			}
			if !found {
				return nil, fmt.Errorf("gguf: manifest %s does not list %s", man, base)
			}
		}
		dir := filepath.Dir(man)
		for _, e := range entries {
			r := ManifestResult{ManifestEntry: e, Path: filepath.Join(dir, e.Name)}
			r.Got, r.Err = hashFile(r.Path, buf)
			results = append(results, r)
			switch {
			case r.Err != nil:
				bad = append(bad, fmt.Sprintf("%s: %v", r.Path, r.Err))
			case !r.OK():
				bad = append(bad, fmt.Sprintf("%s: SHA-256 mismatch (manifest %s, file %s)", r.Path, e.SHA256, r.Got))
			}
		}
	}
	if len(bad) > 0 {
		return results, fmt.Errorf("gguf: %d of %d files failed manifest verification: %s", len(bad), len(results), strings.Join(bad, "; "))
	}
	return results, nil
}

func hashFile(path string, buf []byte) (string, error) {
	f, _, err := boundedread.Open(path, "listed file")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", errors.New("file is missing")
		}
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
