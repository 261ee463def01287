package kernels

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGeneratedFilesUpToDate regenerates the register-tiled kernels (ktile_gen.go,
// q0tile_gen.go), the AMX kernel (amx_gen.go) and the AVX512-BF16 kernel (dpbf16_gen.go) in a scratch folder and requires the committed files to be byte for byte what
// the generators write, so an edit to a generator, or to its output by hand, cannot go
// unnoticed.
func TestGeneratedFilesUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the Go toolchain twice")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to run the generators: %v", err)
	}
	for gen, outs := range map[string][]string{
		"ktile_gen.go":  {"ktile_amd64.s", "ktile_kern_amd64.go"},
		"q0tile_gen.go": {"q0tile_amd64.s", "q0tile_kern_amd64.go"},
		"amx_gen.go":    {"amx_amd64.s"},
		"dpbf16_gen.go": {"dpbf16_amd64.s"},
	} {
		t.Run(gen, func(t *testing.T) {
			dir := t.TempDir()
			src, err := os.ReadFile(gen)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, gen), src, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(gobin, "run", gen)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOFLAGS=", "GO111MODULE=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go run %s: %v\n%s", gen, err, out)
			}
			for _, f := range outs {
				want, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				got, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from what %s generates: run `go generate ./quant/kernels` and commit the result", f, gen)
				}
			}
		})
	}
}
