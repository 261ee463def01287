package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/testenv"
)

func TestPTXEmbedsNonEmpty(t *testing.T) {
	for _, m := range modules {
		src, err := ptxSource(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(src) < 1000 {
			t.Errorf("%s.ptx: only %d bytes", m, len(src))
		}
		for _, want := range []string{".version ", ".target sm_75", ".address_size 64"} {
			if !strings.Contains(src, want) {
				t.Errorf("%s.ptx: no %q (must be compiled with -arch=compute_75)", m, want)
			}
		}
	}
}

// TestPTXKernelTable checks that the entries of the embedded PTX and the host's kernel table
// name the same kernels, module by module, with matching parameter layouts.
func TestPTXKernelTable(t *testing.T) {
	host := map[string]map[string]kernelSpec{}
	for _, k := range kernelTable {
		if host[k.module] == nil {
			host[k.module] = map[string]kernelSpec{}
		}
		if _, dup := host[k.module][k.name]; dup {
			t.Errorf("kernel %s listed twice", k.name)
		}
		host[k.module][k.name] = k
	}
	total := 0
	for _, m := range modules {
		src, _ := ptxSource(m)
		entries, err := parsePTX(src)
		if err != nil {
			t.Fatalf("%s.ptx: %v", m, err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.name)
			spec, ok := host[m][e.name]
			if !ok {
				t.Errorf("%s.ptx: entry %s is not in the host kernel table (dead kernel or wrong module)", m, e.name)
				continue
			}
			if err := checkEntry(e, spec); err != nil {
				t.Errorf("%s.ptx: %v", m, err)
			}
		}
		sort.Strings(names)
		for name := range host[m] {
			if i := sort.SearchStrings(names, name); i == len(names) || names[i] != name {
				t.Errorf("host kernel %s is missing from %s.ptx", name, m)
			}
		}
		total += len(entries)
	}
	if total != len(kernelTable) {
		t.Errorf("%d PTX entries, %d host kernels", total, len(kernelTable))
	}
	if err := checkKernelTable(); err != nil {
		t.Fatal(err)
	}
}

// TestPTXParamsMatchSources checks the parameter kinds against the C signatures in the .cu
// sources too (the PTX could be stale; the source-hash test catches that separately).
func TestPTXParamsMatchSources(t *testing.T) {
	root := testenv.RepoRoot(t)
	sig := regexp.MustCompile(`extern "C" __global__ void (tq_\w+)\(([^)]*)\)`)
	macro := regexp.MustCompile(`extern "C" __global__ void tq_mv_##name##(_t\d|_ids)\(([^)]*)\)`)
	found := map[string][]paramKind{}
	for _, m := range modules {
		b, err := os.ReadFile(filepath.Join(root, "infer", "cuda", "kernels", m+".cu"))
		if err != nil {
			t.Fatal(err)
		}
		src := strings.ReplaceAll(string(b), "\\\n", "\n")
		for _, mm := range sig.FindAllStringSubmatch(src, -1) {
			found[mm[1]] = cParams(t, mm[1], mm[2])
		}
		for _, mm := range macro.FindAllStringSubmatch(src, -1) {
			for _, n := range mvNames {
				found["tq_mv_"+n+mm[1]] = cParams(t, mm[1], mm[2])
			}
		}
	}
	for _, k := range kernelTable {
		got, ok := found[k.name]
		if !ok {
			t.Errorf("no C signature found for %s", k.name)
			continue
		}
		if len(got) != len(k.params) {
			t.Errorf("%s: C signature has %d parameters, host packs %d", k.name, len(got), len(k.params))
			continue
		}
		for i := range got {
			if got[i] != k.params[i] {
				t.Errorf("%s: parameter %d is %s in C, host packs %s", k.name, i, got[i], k.params[i])
			}
		}
	}
}

func cParams(t *testing.T, name, list string) []paramKind {
	var out []paramKind
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		switch {
		case strings.Contains(p, "*"):
			out = append(out, pPtr)
		case strings.HasPrefix(p, "int "):
			out = append(out, pI32)
		case strings.HasPrefix(p, "float "):
			out = append(out, pF32)
		default:
			t.Fatalf("%s: unhandled C parameter %q", name, p)
		}
	}
	return out
}

// sourceHash is the hash scripts/ptx.sh records: the .cu followed by each #include "..." header.
func sourceHash(t *testing.T, dir, cu string) string {
	b, err := os.ReadFile(filepath.Join(dir, cu))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(b)
	inc := regexp.MustCompile(`(?m)^#include "([^"]+)"[ \t]*$`)
	for _, m := range inc.FindAllStringSubmatch(string(b), -1) {
		hb, err := os.ReadFile(filepath.Join(dir, m[1]))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(hb)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestPTXSourcesInSync(t *testing.T) {
	dir := filepath.Join(testenv.RepoRoot(t), "infer", "cuda", "kernels")
	cus, _ := filepath.Glob(filepath.Join(dir, "*.cu"))
	if len(cus) != len(modules) {
		t.Fatalf("%d .cu files in %s, %d modules in the host table", len(cus), dir, len(modules))
	}
	for _, m := range modules {
		src, err := ptxSource(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := ptxSourceHash(src)
		if !ok {
			t.Fatalf("%s.ptx has no tq-source-sha256 header; regenerate with scripts/ptx.sh", m)
		}
		if want := sourceHash(t, dir, m+".cu"); got != want {
			t.Errorf("%s.ptx was generated from other sources (header %s, sources %s): run scripts/ptx.sh (make ptx)", m, got, want)
		}
		// The embedded copy is the committed file.
		onDisk, err := os.ReadFile(filepath.Join(dir, m+".ptx"))
		if err != nil || string(onDisk) != src {
			t.Errorf("%s.ptx on disk differs from the embedded copy", m)
		}
	}
}

// TestLaunchConstantsMatchSources checks the Go mirrors of the kernels' #define constants.
func TestLaunchConstantsMatchSources(t *testing.T) {
	dir := filepath.Join(testenv.RepoRoot(t), "infer", "cuda", "kernels")
	defs := map[string]int{}
	re := regexp.MustCompile(`(?m)^#define (\w+) (\d+)\s*$`)
	for _, m := range modules {
		b, err := os.ReadFile(filepath.Join(dir, m+".cu"))
		if err != nil {
			t.Fatal(err)
		}
		for _, mm := range re.FindAllStringSubmatch(string(b), -1) {
			v, _ := strconv.Atoi(mm[2])
			defs[mm[1]] = v
		}
	}
	for name, goVal := range map[string]int{
		"MV_WARPS": mvWarps, "MV_R": mvRows, "MV_MAX_T": mvMaxT, "ATTN_THREADS": attnThreads, "ATTN_MAX_HD": attnMaxHeadDim,
		"MOE_THREADS": moeThreads, "MOE_MAX_EXPERTS": moeMaxExperts, "MOE_MAX_K": moeMaxK, "DR_MAX_DS": drMaxDState, "DR_SPLIT": drSplit, "DR_CHUNK": drChunk,
		"KV_F16": int(kvTypeCode(gguf.TypeF16)), "KV_Q8_0": int(kvTypeCode(gguf.TypeQ8_0)),
		"TQ_F32": 0, "TQ_F16": 1, "TQ_Q4_0": 2, "TQ_Q8_0": 8, "TQ_Q4_K": 12, "TQ_Q5_K": 13, "TQ_Q6_K": 14, "TQ_BF16": 30,
	} {
		cVal, ok := defs[name]
		if !ok {
			t.Errorf("#define %s not found in the kernel sources", name)
		} else if cVal != goVal {
			t.Errorf("%s is %d in the sources, %d in Go", name, cVal, goVal)
		}
	}
	for i, ty := range mvTypes {
		if want := strings.ToLower(strings.ReplaceAll(ty.String(), "_K", "_k")); want != mvNames[i] {
			t.Errorf("mvNames[%d] = %q for %s", i, mvNames[i], ty)
		}
	}
}

func TestParsePTX(t *testing.T) {
	src := `// header
.version 7.8
.target sm_75
/* block
   comment .entry fake( */
.func (.param .b64 r) helper(.param .b64 a)
{ ret; }
.visible .entry k1(
	.param .u64 k1_param_0,   // a pointer
	.param .u32 k1_param_1,
	.param .f32 k1_param_2,
	.param .align 8 .b8 k1_param_3[24],
	.param .u64 .ptr .global .align 4 k1_param_4
)
{ ret; }
.entry k2()
{ ret; }
`
	got, err := parsePTX(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].name != "k1" || got[1].name != "k2" || len(got[1].params) != 0 {
		t.Fatalf("entries: %+v", got)
	}
	want := []ptxParam{{".u64", 8}, {".u32", 4}, {".f32", 4}, {".b8", 24}, {".u64", 8}}
	if len(got[0].params) != len(want) {
		t.Fatalf("params: %+v", got[0].params)
	}
	for i, p := range want {
		if got[0].params[i] != p {
			t.Errorf("param %d = %+v, want %+v", i, got[0].params[i], p)
		}
	}
	spec := kernelSpec{name: "k1", params: []paramKind{pPtr, pI32, pF32}}
	if err := checkEntry(got[0], spec); err == nil || !strings.Contains(err.Error(), "5 parameters, the host packs 3") {
		t.Errorf("count mismatch not reported: %v", err)
	}
	spec = kernelSpec{name: "k1", params: []paramKind{pPtr, pF32, pF32, pPtr, pPtr}}
	if err := checkEntry(got[0], spec); err == nil || !strings.Contains(err.Error(), "parameter 1 is .u32 in the PTX, the host packs f32") {
		t.Errorf("kind mismatch not reported: %v", err)
	}

	for _, bad := range []string{
		".entry k(",
		".entry (.param .u64 a)",
		".entry k(.param .u99 a)",
		".entry k(.param .u64)",
		".entry k(.param .u64 a[x])",
		".entry k(.param .u64 a) .entry k(.param .u64 a)",
		".entry k(.param .u64 .u32 a)",
	} {
		if _, err := parsePTX(bad); err == nil {
			t.Errorf("parsePTX(%q) accepted malformed input", bad)
		}
	}
}

func FuzzParsePTX(f *testing.F) {
	for _, m := range modules {
		src, _ := ptxSource(m)
		if len(src) > 20000 {
			src = src[:20000]
		}
		f.Add(src)
	}
	f.Add(".entry k(.param .u64 a, .param .align 4 .b8 b[8])")
	f.Add(".visible .entry x()\n.entry y(.param .f32 p)")
	f.Fuzz(func(t *testing.T, s string) {
		entries, err := parsePTX(s)
		if err != nil {
			return
		}
		for _, e := range entries {
			if !validIdent(e.name) || len(e.params) > maxPTXParams {
				t.Fatalf("invalid entry accepted: %+v", e)
			}
			for _, p := range e.params {
				if p.size <= 0 {
					t.Fatalf("parameter of size %d accepted", p.size)
				}
			}
		}
	})
}
