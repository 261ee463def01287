package convert

import (
	"fmt"
	"path/filepath"

	"github.com/tq-project/tq/internal/safetensors"
)

// configImatrixPath resolves the imatrix named by a quantize_config.json (im, "" for none)
// against the config's folder. Like the shard names of a safetensors index, it must stay in
// that folder: a relative path without "..", or an absolute path inside the folder; after
// resolving symlinks the file must still be inside it (safetensors.Confine).
func configImatrixPath(cfgPath, im string) (string, error) {
	if im == "" || cfgPath == "" {
		return "", nil
	}
	dir := filepath.Dir(cfgPath)
	bad := func(err error) error {
		return fmt.Errorf("quantize config %s: imatrix %q (must be inside the config's folder %s): %v", cfgPath, im, dir, err)
	}
	rel := im
	if filepath.IsAbs(im) {
		rel = ""
		for _, d := range folderSpellings(dir) {
			if r, err := filepath.Rel(d, filepath.Clean(im)); err == nil && filepath.IsLocal(r) {
				rel = r
				break
			}
		}
		if rel == "" {
			return "", bad(fmt.Errorf("absolute path outside the folder"))
		}
	}
	p, err := safetensors.Confine(dir, rel)
	if err != nil {
		return "", bad(err)
	}
	return p, nil
}

// folderSpellings are the absolute forms of dir an absolute path inside it may start with:
// as given, and with symlinks resolved.
func folderSpellings(dir string) []string {
	var out []string
	if a, err := filepath.Abs(dir); err == nil {
		out = append(out, a)
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		if a, err := filepath.Abs(r); err == nil {
			out = append(out, a)
		}
	}
	return out
}
