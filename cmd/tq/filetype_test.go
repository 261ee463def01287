package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
)

// TestConvertSummaryShowsMix converts with --target-bpw 5: the summary must not call the
// mixture BF16, and must list every type the written file holds with its tensor count, as
// tq inspect reads them back from the file; inspect names general.file_type and the
// quantized type holding the most weights.
func TestConvertSummaryShowsMix(t *testing.T) {
	dir := t.TempDir()
	hfDir := hfFixture(t, dir, "qwen3")
	model := filepath.Join(dir, "m.gguf")
	out := tqCmd(t, "convert", hfDir, "--target-bpw", "5", "-o", model)
	if strings.Contains(out, "file type BF16") || strings.Contains(out, "file type F16") || !strings.Contains(out, "file type Q") {
		t.Errorf("summary names a float file type for a 5 bpw mixture:\n%s", out)
	}

	var rep inspectReport
	if err := json.Unmarshal([]byte(tqCmd(t, "inspect", model, "--json", "--no-tensors")), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Types) < 3 {
		t.Fatalf("a 5 bpw budget should mix several types, inspect found %+v", rep.Types)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 2 {
			lines[f[0]] = l
		}
	}
	var mostType string
	var mostID gguf.GGMLType
	var most uint64
	for _, ty := range rep.Types {
		l, ok := lines[ty.Type]
		if !ok {
			t.Errorf("summary does not list %s:\n%s", ty.Type, out)
			continue
		}
		if f := strings.Fields(l); f[1] != fmt.Sprint(ty.Tensors) || !strings.HasSuffix(l, fmt.Sprintf("%.3f", ty.BPW)) {
			t.Errorf("summary line %q, inspect: %d tensors, %.3f bpw", l, ty.Tensors, ty.BPW)
		}
		typ, err := gguf.ParseType(ty.Type)
		if err != nil {
			t.Fatal(err)
		}
		if tr, _ := typ.Traits(); tr.Quantized && (ty.Params > most || ty.Params == most && typ < mostID) {
			mostType, mostID, most = ty.Type, typ, ty.Params
		}
	}
	if rep.FileType == "" || !strings.Contains(out, "file type "+rep.FileType+":") {
		t.Errorf("inspect file type %q, summary:\n%s", rep.FileType, out)
	}
	if rep.MostlyType != mostType {
		t.Errorf("inspect: mostly %q, its types table says %q", rep.MostlyType, mostType)
	}
	if want := 100 * float64(most) / float64(rep.TotalParams); rep.MostlyPercent < want-1e-9 || rep.MostlyPercent > want+1e-9 {
		t.Errorf("inspect: mostly %.3f%%, want %.3f%%", rep.MostlyPercent, want)
	}
	text := tqCmd(t, "inspect", model, "--no-tensors")
	if !strings.Contains(text, "file type: "+rep.FileType+"; most weights are "+mostType) {
		t.Errorf("inspect text lacks the file type line:\n%s", text)
	}
}
