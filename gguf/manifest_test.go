package gguf

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sha256sumCheck runs `sha256sum -c manifest` in dir; ok reports success. It skips when
// the tool is absent (it is a system tool, not a llama.cpp reference).
func sha256sumCheck(t *testing.T, dir, manifest string) (string, bool) {
	t.Helper()
	if _, err := exec.LookPath("sha256sum"); err != nil {
		t.Skip("sha256sum not installed; our VerifyManifest is still tested by TestVerifyManifestDetectsDamage")
	}
	cmd := exec.Command("sha256sum", "-c", "--strict", manifest)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

func TestManifestWithSha256sum(t *testing.T) {
	tensors := makeTensors(11)
	md := Metadata{{"general.architecture", String("llama")}}
	for _, c := range []struct {
		name string
		opts WriterOptions
	}{{"single", WriterOptions{}}, {"split", WriterOptions{MaxShardTensors: 5}}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			w := writeModel(t, filepath.Join(dir, "m.gguf"), md, tensors, c.opts)
			man := w.ManifestPath()
			// The digests were computed while writing; they must equal a fresh read.
			for _, f := range w.Files() {
				b, _ := os.ReadFile(f.Path)
				sum := sha256.Sum256(b)
				if hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(b)) != f.Size {
					t.Fatalf("%s: streamed digest %s differs from file digest", f.Path, f.SHA256)
				}
			}
			out, ok := sha256sumCheck(t, dir, filepath.Base(man))
			if !ok || strings.Count(out, ": OK") != len(w.Files()) {
				t.Fatalf("sha256sum -c failed:\n%s", out)
			}
			if res, err := VerifyManifest(w.Files()[0].Path); err != nil || len(res) != len(w.Files()) {
				t.Fatalf("VerifyManifest: %v %v", res, err)
			}
			// Flip one byte of the last file: both checkers must now fail.
			last := w.Files()[len(w.Files())-1].Path
			b, _ := os.ReadFile(last)
			b[len(b)/2] ^= 1
			os.WriteFile(last, b, 0o644)
			if out, ok := sha256sumCheck(t, dir, filepath.Base(man)); ok {
				t.Fatalf("sha256sum -c passed a damaged file:\n%s", out)
			}
			_, err := VerifyManifest(dir)
			if err == nil || !strings.Contains(err.Error(), filepath.Base(last)) || !strings.Contains(err.Error(), "mismatch") {
				t.Fatalf("VerifyManifest: %v", err)
			}
		})
	}
}

func TestVerifyManifestDetectsDamage(t *testing.T) {
	dir := t.TempDir()
	w := writeModel(t, filepath.Join(dir, "m.gguf"), nil, makeTensors(1), WriterOptions{MaxShardTensors: 6})
	paths := w.Paths()
	if _, err := VerifyManifest(dir); err != nil {
		t.Fatal(err)
	}
	os.Remove(paths[1])
	res, err := VerifyManifest(filepath.Join(dir, ManifestName))
	if err == nil || !strings.Contains(err.Error(), "missing") || len(res) != 2 || res[0].OK() == false || res[1].OK() {
		t.Fatalf("%v %+v", err, res)
	}
	// A GGUF not listed by the SHA256SUMS beside it.
	other := filepath.Join(dir, "other.gguf")
	os.WriteFile(other, []byte("x"), 0o644)
	if _, err := VerifyManifest(other); err == nil || !strings.Contains(err.Error(), "does not list") {
		t.Fatal(err)
	}
	if _, err := VerifyManifest(t.TempDir()); err == nil {
		t.Fatal("empty directory verified")
	}
}

func TestParseManifestHostile(t *testing.T) {
	h := strings.Repeat("ab", 32)
	good := h + "  a.gguf\n" + strings.ToUpper(h) + " *b.gguf\r\n\n"
	es, err := ParseManifest(strings.NewReader(good), "m")
	if err != nil || len(es) != 2 || es[1].Name != "b.gguf" || es[1].SHA256 != h {
		t.Fatal(es, err)
	}
	for _, bad := range []string{
		"",
		h + " a.gguf\n",
		h[:63] + "  a.gguf\n",
		strings.Repeat("zz", 32) + "  a.gguf\n",
		h + "  ../a.gguf\n",
		h + "  /etc/passwd\n",
		h + "  d/a.gguf\n",
		h + "  ..\n",
		"\\" + h + "  a\\nb\n",
		h + "  a.gguf\n" + h + "  a.gguf\n",
		strings.Repeat("x", maxManifestBytes+1),
	} {
		if _, err := ParseManifest(strings.NewReader(bad), "m"); err == nil {
			t.Errorf("accepted %.80q", bad)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	h := strings.Repeat("0f", 32)
	f.Add(h + "  a.gguf\n")
	f.Add(h + " *b\r\n")
	f.Add("garbage")
	f.Fuzz(func(t *testing.T, s string) {
		es, err := ParseManifest(strings.NewReader(s), "m")
		if err != nil {
			return
		}
		for _, e := range es {
			if len(e.SHA256) != 64 || e.Name == "" || strings.ContainsAny(e.Name, "/\\\n") {
				t.Fatalf("bad entry %+v", e)
			}
		}
	})
}
