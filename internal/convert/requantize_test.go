package convert

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/safetensors"
)

func sameTensors(t *testing.T, a, b string) {
	t.Helper()
	ma, err := gguf.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ma.Close()
	mb, err := gguf.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	ta, tb := ma.Tensors(), mb.Tensors()
	if len(ta) != len(tb) {
		t.Fatalf("%d vs %d tensors", len(ta), len(tb))
	}
	for i := range ta {
		if ta[i].Name != tb[i].Name || ta[i].Type != tb[i].Type {
			t.Fatalf("tensor %d: %s %s vs %s %s", i, ta[i].Name, ta[i].Type, tb[i].Name, tb[i].Type)
		}
		da, _ := ma.TensorData(ta[i].Name)
		db, _ := mb.TensorData(tb[i].Name)
		if !bytes.Equal(da, db) {
			t.Errorf("tensor %s: bytes differ", ta[i].Name)
		}
	}
}

// Requantizing an F16 GGUF gives the same tensors as converting the (F16) checkpoint straight
// to the preset: same names, order, types and bytes (with and without an imatrix).
func TestRequantizeMatchesDirect(t *testing.T) {
	o := fixtures.Preset("qwen3moe")
	o.DType = safetensors.F16
	dir := genModel(t, o)
	tmp := t.TempDir()
	f16 := filepath.Join(tmp, "f16.gguf")
	if _, err := Convert(context.Background(), dir, f16, Options{Types: TypeOptions{OutType: "f16"}}); err != nil {
		t.Fatal(err)
	}
	// an imatrix with entries for the expert and attention tensors
	entries := map[string][]float32{}
	for _, n := range []string{"blk.0.attn_q.weight", "blk.1.ffn_down_exps.weight", "blk.0.ffn_up_exps.weight"} {
		cols := 256
		nmat := 1
		if strings.Contains(n, "exps") {
			nmat = 4
		}
		v := make([]float32, cols*nmat)
		for i := range v {
			v[i] = float32(1 + i%7)
		}
		entries[n] = v
	}
	im := filepath.Join(tmp, "imatrix.dat")
	os.WriteFile(im, datBytes(entries, 1, "calib.txt"), 0o644)

	cases := []struct {
		typ, imatrix string
	}{{"q4_k_m", im}, {"q8_0", ""}}
	if fullTests() {
		cases = append(cases, struct{ typ, imatrix string }{"q4_k_m", ""}, struct{ typ, imatrix string }{"iq4_nl", im},
			struct{ typ, imatrix string }{"q5_k_s", im}, struct{ typ, imatrix string }{"q4_0", im})
	}
	for _, c := range cases {
		direct := filepath.Join(tmp, "direct-"+c.typ+".gguf")
		if _, err := Convert(context.Background(), dir, direct, Options{Types: TypeOptions{OutType: c.typ, IMatrixPath: c.imatrix}}); err != nil {
			t.Fatal(err)
		}
		req := filepath.Join(tmp, "req-"+c.typ+".gguf")
		res, err := Requantize(context.Background(), f16, req, RequantizeOptions{Options: Options{Types: TypeOptions{OutType: c.typ, IMatrixPath: c.imatrix}}})
		if err != nil {
			t.Fatal(err)
		}
		sameTensors(t, direct, req)
		m, _ := gguf.Open(req)
		md := m.Metadata()
		if c.imatrix != "" {
			if n, err := md.GetUint("quantize.imatrix.entries_count"); err != nil || n != 3 {
				t.Errorf("entries_count %d %v", n, err)
			}
			if s, _ := md.GetString("quantize.imatrix.dataset"); s != "calib.txt" {
				t.Errorf("dataset %q", s)
			}
			if res.Plan.Importance != 3 && c.typ != "q8_0" {
				t.Errorf("%d tensors used importance, want 3", res.Plan.Importance)
			}
		} else if md.Has("quantize.imatrix.file") {
			t.Error("imatrix keys without an imatrix")
		}
		if arch, _ := md.GetString("general.architecture"); arch != "qwen3moe" {
			t.Errorf("architecture %q", arch)
		}
		m.Close()
	}
	// overrides, --pure, copied tensors and requantize protection
	req := filepath.Join(tmp, "ovr.gguf")
	res, err := Requantize(context.Background(), f16, req, RequantizeOptions{Options: Options{Types: TypeOptions{OutType: "q4_k_m",
		Overrides: []string{"attn_q=q8_0", `exps=q5_k`}, Pure: true}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, pt := range res.Plan.Tensors {
		switch {
		case strings.Contains(pt.Name, "attn_q.weight") && pt.Type != "q8_0",
			strings.Contains(pt.Name, "_exps") && pt.Type != "q5_K",
			strings.Contains(pt.Name, "attn_k.weight") && pt.Type != "q4_K",
			strings.Contains(pt.Name, "norm") && (pt.Type != "f32" || !strings.Contains(pt.Rule, "copied")):
			t.Errorf("%s: %s (%s)", pt.Name, pt.Type, pt.Rule)
		}
	}
	if _, err := Requantize(context.Background(), req, filepath.Join(tmp, "again.gguf"), RequantizeOptions{Options: Options{Types: TypeOptions{OutType: "q2_k"}}}); err == nil ||
		!strings.Contains(err.Error(), "allow-requantize") {
		t.Errorf("requantizing quantized tensors without permission: %v", err)
	}
	if _, err := Requantize(context.Background(), req, filepath.Join(tmp, "again.gguf"), RequantizeOptions{Options: Options{Types: TypeOptions{OutType: "q2_k"}}, AllowRequantize: true}); err != nil {
		t.Errorf("with --allow-requantize: %v", err)
	}
}

// --split-max-size writes llama.cpp shards with a SHA256SUMS manifest; the shards together
// hold exactly the unsplit file's tensors.
func TestSplitOutput(t *testing.T) {
	dir := genModel(t, fixtures.Preset("llama"))
	tmp := t.TempDir()
	one := filepath.Join(tmp, "one.gguf")
	if _, err := Convert(context.Background(), dir, one, Options{Types: TypeOptions{OutType: "q8_0"}}); err != nil {
		t.Fatal(err)
	}
	split := filepath.Join(tmp, "split", "m.gguf")
	os.Mkdir(filepath.Dir(split), 0o755)
	res, err := Convert(context.Background(), dir, split, Options{Types: TypeOptions{OutType: "q8_0"}, Output: OutputOptions{SplitMaxSize: 400_000}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) < 3 {
		t.Fatalf("%d shards", len(res.Files))
	}
	if !strings.HasSuffix(res.Files[0].Path, "m-00001-of-"+pad5(len(res.Files))+".gguf") {
		t.Errorf("first shard %s", res.Files[0].Path)
	}
	if res.Manifest == "" {
		t.Fatal("no manifest")
	}
	results, err := gguf.VerifyManifest(res.Manifest)
	if err != nil || len(results) != len(res.Files) {
		t.Fatalf("manifest: %v %v", results, err)
	}
	for _, r := range results {
		if !r.OK() {
			t.Errorf("manifest entry %+v", r)
		}
	}
	sameTensors(t, one, res.Files[0].Path)
}

func pad5(n int) string {
	s := "0000" + string(rune('0'+n))
	return s[len(s)-5:]
}
