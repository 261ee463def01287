// Package llamacppref is test support: it locates the repository's llama.cpp reference harness
// (testdata/llamacpp: node-llama-cpp 3.21.1 driven by llama.mjs, llama.cpp's source tree) and
// runs requests against it. A missing reference skips the calling test, or fails it when
// TQ_REQUIRE_REFS=1 (as in CI), so nothing is silently skipped there.
package llamacppref

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/tq-project/tq/internal/testenv"
)

// VariantEnv names the environment variable that forces llama.cpp's CPU variant (for example
// TQ_LLAMACPP_CPU=haswell). node-llama-cpp ships one libggml-cpu-<variant>.so per x86-64 level
// and ggml loads the best-scoring one the CPU can run from the package's bins folder
// (ggml-backend-reg.cpp, ggml_backend_load_best). To force one, Run starts llama.mjs from an
// overlay of node_modules made of symbolic links in which that folder holds only the forced
// variant, with node's --preserve-symlinks so the package resolves its bins folder inside the
// overlay. An AVX-512 machine then runs llama.cpp exactly as an AVX2-only one does.
const VariantEnv = "TQ_LLAMACPP_CPU"

var variantName = regexp.MustCompile(`^[a-z0-9_]+$`)

// ForcedVariant returns the CPU variant named by TQ_LLAMACPP_CPU, or "" when llama.cpp picks
// its best one for this CPU.
func ForcedVariant() string { return os.Getenv(VariantEnv) }

// HaswellBuild reports whether llama.cpp runs its AVX2 "haswell" CPU variant here: forced with
// TQ_LLAMACPP_CPU=haswell on a CPU that can run it, or chosen by ggml because the CPU has
// AVX2+FMA+F16C+BMI2 but neither AVX-512 nor AVX-VNNI (which would select a later variant).
// tq's kernels reproduce that variant's float orders bit for bit.
func HaswellBuild() bool {
	x := cpu.X86
	avx2 := x.HasAVX2 && x.HasFMA && x.HasF16C && x.HasBMI2
	switch ForcedVariant() {
	case "":
		return avx2 && !x.HasAVX512F && !x.HasAVXVNNI
	case "haswell":
		return avx2
	}
	return false
}

// AMXBuild reports whether llama.cpp runs its "sapphirerapids" CPU variant here: chosen by ggml
// when the CPU has AMX-INT8 besides AVX-512 F/CD/VL/DQ/BW, VBMI, BF16 and VNNI (the features
// that variant's score requires, ggml-cpu/arch/x86/cpu-feats.cpp), or forced with
// TQ_LLAMACPP_CPU=sapphirerapids. That build loads F16 and most quantized weights into its AMX
// buffer type (ggml-cpu/amx), whose products do not compute what ggml's generic CPU kernels do:
// an F16 product takes the float32 activations as they are, without rounding them to f16 first
// (ggml_backend_amx_mul_mat, its F16 branch), and the quantized products run AMX/VNNI tiles that
// sum each block's products in their own order. Tests compare against it with tolerances that
// say so.
func AMXBuild() bool {
	x := cpu.X86
	switch ForcedVariant() {
	case "":
		return x.HasAMXInt8 && x.HasAVX512F && x.HasAVX512CD && x.HasAVX512VL && x.HasAVX512DQ &&
			x.HasAVX512BW && x.HasAVX512VBMI && x.HasAVX512BF16 && x.HasAVX512VNNI
	case "sapphirerapids":
		return true
	}
	return false
}

// RepoRoot returns the repository root (testenv.RepoRoot, for the callers of this package).
func RepoRoot(t testing.TB) string {
	t.Helper()
	return testenv.RepoRoot(t)
}

// Missing skips t (or fails it under TQ_REQUIRE_REFS=1) because the named reference is absent.
func Missing(t testing.TB, what string) {
	t.Helper()
	if os.Getenv("TQ_REQUIRE_REFS") == "1" {
		t.Fatalf("llama.cpp reference required (TQ_REQUIRE_REFS=1) but %s is missing", what)
	}
	t.Skipf("llama.cpp reference not installed: %s is missing (run make refs)", what)
}

// Path returns testdata/llamacpp/rel, calling Missing when it does not exist.
func Path(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(t), "testdata", "llamacpp", rel)
	if _, err := os.Stat(p); err != nil {
		Missing(t, p)
	}
	return p
}

// Bridge returns the path of llama.mjs once node and node-llama-cpp are present.
func Bridge(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(RepoRoot(t), "testdata", "llamacpp")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "node-llama-cpp")); err != nil {
		Missing(t, "testdata/llamacpp/node_modules/node-llama-cpp")
	} else if _, err := exec.LookPath("node"); err != nil {
		Missing(t, "node")
	}
	return filepath.Join(dir, "llama.mjs")
}

// Run sends one JSON request (op "batch" for several) to llama.mjs and decodes its reply into
// resp.
func Run(t testing.TB, req, resp any) {
	t.Helper()
	script := Bridge(t)
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if v := ForcedVariant(); v != "" {
		script = variantOverlay(t, filepath.Dir(script), v)
	}
	cmd := exec.CommandContext(ctx, "node", "--preserve-symlinks", "--preserve-symlinks-main", script)
	cmd.Dir = filepath.Dir(script)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llama.mjs: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(out, resp); err != nil {
		t.Fatalf("llama.mjs reply: %v", err)
	}
}

// variantOverlay builds, in a fresh temporary folder, a copy of the harness made of symbolic
// links whose node-llama-cpp binaries folder holds only llama.cpp's CPU variant v (see
// VariantEnv), and returns the path of llama.mjs in it.
func variantOverlay(t testing.TB, harness, v string) string {
	t.Helper()
	if !variantName.MatchString(v) {
		t.Fatalf("%s=%q is not a CPU variant name (for example haswell)", VariantEnv, v)
	}
	const pkg = "@node-llama-cpp/linux-x64"
	bins := filepath.Join("bins", "linux-x64")
	lib := "libggml-cpu-" + v + ".so"
	if _, err := os.Stat(filepath.Join(harness, "node_modules", pkg, bins, lib)); err != nil {
		t.Fatalf("%s=%s: %v", VariantEnv, v, err)
	}
	dir := t.TempDir()
	// link every entry of from into to, except the one named keep (made a real folder) and,
	// where skip says so, the entries left out.
	link := func(from, to, keep string, skip func(string) bool) {
		ents, err := os.ReadDir(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(to, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() == keep || (skip != nil && skip(e.Name())) {
				continue
			}
			if err := os.Symlink(filepath.Join(from, e.Name()), filepath.Join(to, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
	nm, onm := filepath.Join(harness, "node_modules"), filepath.Join(dir, "node_modules")
	link(harness, dir, "node_modules", nil)
	link(nm, onm, "@node-llama-cpp", nil)
	link(filepath.Join(nm, "@node-llama-cpp"), filepath.Join(onm, "@node-llama-cpp"), "linux-x64", nil)
	link(filepath.Join(nm, pkg), filepath.Join(onm, pkg), "bins", nil)
	link(filepath.Join(nm, pkg, bins), filepath.Join(onm, pkg, bins), "", func(name string) bool {
		return strings.HasPrefix(name, "libggml-cpu-") && name != lib
	})
	return filepath.Join(dir, "llama.mjs")
}

// ProbsRequest asks FullProbs for llama.cpp's next-token distribution after every prefix of
// Tokens, in a context of Ctx slots (more than len(Tokens)) with KV cache type KVType ("" for
// node-llama-cpp's F16).
type ProbsRequest struct {
	Model  string
	Tokens []int32
	Ctx    int
	KVType string
}

// FullProbs runs reqs in one llama.mjs process ("probs" with topk 0 at every position) and
// returns, per request and position i, the probability of every token id after
// Tokens[0..i], indexed by id (the vocabulary is the largest id returned, plus one).
func FullProbs(t testing.TB, threads int, reqs []ProbsRequest) [][][]float64 {
	t.Helper()
	var items []map[string]any
	for _, r := range reqs {
		pos := make([]int, len(r.Tokens))
		for i := range pos {
			pos[i] = i
		}
		it := map[string]any{"op": "probs", "model": r.Model, "tokens": r.Tokens, "positions": pos, "topk": 0,
			"threads": threads, "ctx": r.Ctx}
		if r.KVType != "" {
			it["kvType"] = r.KVType
		}
		items = append(items, it)
	}
	var resp struct {
		Results []struct {
			Probs []struct {
				Pos int          `json:"pos"`
				Top [][2]float64 `json:"top"`
			} `json:"probs"`
		} `json:"results"`
	}
	Run(t, map[string]any{"op": "batch", "threads": threads, "requests": items}, &resp)
	if len(resp.Results) != len(reqs) {
		t.Fatalf("llama.mjs returned %d results for %d requests", len(resp.Results), len(reqs))
	}
	out := make([][][]float64, len(reqs))
	for i, res := range resp.Results {
		out[i] = make([][]float64, len(reqs[i].Tokens))
		for _, d := range res.Probs {
			if d.Pos < 0 || d.Pos >= len(out[i]) {
				t.Fatalf("llama.mjs: position %d of a %d-token request", d.Pos, len(out[i]))
			}
			vocab := 0
			for _, e := range d.Top {
				vocab = max(vocab, int(e[0])+1)
			}
			p := make([]float64, vocab)
			for _, e := range d.Top {
				if id := int(e[0]); id >= 0 {
					p[id] = e[1]
				}
			}
			out[i][d.Pos] = p
		}
		for pos, p := range out[i] {
			if p == nil {
				t.Fatalf("%s: llama.cpp returned no distribution for position %d", reqs[i].Model, pos)
			}
		}
	}
	return out
}
