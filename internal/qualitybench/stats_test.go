package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func logs(p ...float64) []float64 {
	out := make([]float64, len(p))
	for i, v := range p {
		out[i] = math.Log(v)
	}
	return out
}

func TestKLD(t *testing.T) {
	p := logs(0.5, 0.25, 0.25)
	if k, _ := kld(p, p); k != 0 {
		t.Errorf("KL(p||p) = %g, want 0", k)
	}
	q := logs(0.25, 0.25, 0.5)
	want := 0.5*math.Log(2) + 0.25*math.Log(0.5) // 0.5 ln(0.5/0.25) + 0.25 ln(0.25/0.5)
	if k, _ := kld(p, q); math.Abs(k-want) > 1e-15 {
		t.Errorf("KL = %.17g, want %.17g", k, want)
	}
	// q = 0 where p > 0: floored, counted, finite
	z := []float64{0, math.Inf(-1)}
	k, n := kld([]float64{math.Log(0.5), math.Log(0.5)}, z)
	if n != 1 || math.IsInf(k, 0) || k < 40 {
		t.Errorf("floored KL = %g (%d floored), want a large finite value and 1", k, n)
	}
	// p = 0 entries contribute nothing
	if k, _ := kld([]float64{0, math.Inf(-1)}, []float64{0, math.Inf(-1)}); k != 0 {
		t.Errorf("KL with p = 0 entries = %g", k)
	}
}

func TestCompare(t *testing.T) {
	// two windows of two positions over a 3-token vocabulary
	p := [][][]float64{{logs(0.7, 0.2, 0.1), logs(0.1, 0.8, 0.1)}, {logs(0.6, 0.3, 0.1), logs(0.2, 0.2, 0.6)}}
	q := [][][]float64{{logs(0.6, 0.3, 0.1), logs(0.1, 0.8, 0.1)}, {logs(0.3, 0.6, 0.1), logs(0.2, 0.2, 0.6)}}
	wins := [][]int32{{0, 1}, {2, 2}}
	r, err := compare(p, q, wins)
	if err != nil {
		t.Fatal(err)
	}
	k00, _ := kld(p[0][0], q[0][0])
	k10, _ := kld(p[1][0], q[1][0])
	if math.Abs(r.MeanKLD-(k00+k10)/4) > 1e-15 {
		t.Errorf("mean KLD %g, want %g", r.MeanKLD, (k00+k10)/4)
	}
	if r.SameTop1 != 0.75 { // window 1 position 0: argmax 0 vs 1
		t.Errorf("same top-1 %g, want 0.75", r.SameTop1)
	}
	// targets: window 0 position 0 -> token 1 (q 0.3); window 1 position 0 -> token 2 (q 0.1)
	if want := math.Exp(-(math.Log(0.3) + math.Log(0.1)) / 2); math.Abs(r.PPL-want) > 1e-12 {
		t.Errorf("PPL %g, want %g", r.PPL, want)
	}
	if !(r.KLDLow <= r.MeanKLD && r.MeanKLD <= r.KLDHigh) || r.KLDHigh-r.KLDLow <= 0 {
		t.Errorf("interval [%g, %g] does not bracket %g", r.KLDLow, r.KLDHigh, r.MeanKLD)
	}
	self, err := compare(p, p, wins)
	if err != nil || self.MeanKLD != 0 || self.SameTop1 != 1 || self.KLDHigh != 0 {
		t.Errorf("self comparison: %+v, %v", self, err)
	}
	if _, err := compare(p, q[:1], wins); err == nil {
		t.Error("mismatched window counts accepted")
	}
}

func TestIntervals(t *testing.T) {
	if got := tQuantile975(10); got != 2.228 {
		t.Errorf("t(0.975, 10) = %g", got)
	}
	// Cornish-Fisher beyond the table: t(0.975, 40) = 2.0211, t(0.975, 120) = 1.9799
	for df, want := range map[int]float64{40: 2.0211, 120: 1.9799, 31: 2.0395} {
		if got := tQuantile975(df); math.Abs(got-want) > 2e-4 {
			t.Errorf("t(0.975, %d) = %.4f, want %.4f", df, got, want)
		}
	}
	m, h := meanCI([]float64{1, 2, 3, 4})
	if m != 2.5 || math.Abs(h-3.182*math.Sqrt(5.0/3)/2) > 1e-12 {
		t.Errorf("meanCI = %g ± %g", m, h)
	}
	// identical series: ratio 1, no spread
	a := []float64{0.1, 0.2, 0.3}
	if r, h := ratioCI(a, a); math.Abs(r-1) > 1e-15 || h > 1e-12 {
		t.Errorf("ratioCI(a, a) = %g ± %g", r, h)
	}
	b := []float64{0.2, 0.4, 0.6}
	if r, h := ratioCI(b, a); math.Abs(r-2) > 1e-15 || h > 1e-12 {
		t.Errorf("ratioCI(2a, a) = %g ± %g", r, h)
	}
}

func TestWindows(t *testing.T) {
	h := &heldout{EOT: 9}
	h.Documents = append(h.Documents, struct {
		Path string  `json:"path"`
		IDs  []int32 `json:"ids"`
	}{"a", []int32{1, 2, 3}}, struct {
		Path string  `json:"path"`
		IDs  []int32 `json:"ids"`
	}{"b", []int32{4, 5}})
	w, err := windows("x", h, 3, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int32{{9, 1, 2}, {3, 9, 4}} // the tail {5} is dropped
	if len(w) != len(want) {
		t.Fatalf("windows %v, want %v", w, want)
	}
	for i := range want {
		for j := range want[i] {
			if w[i][j] != want[i][j] {
				t.Fatalf("windows %v, want %v", w, want)
			}
		}
	}
	if _, err := windows("x", h, 3, 3, 10); err == nil {
		t.Error("3 windows accepted from text that gives 2")
	}
	h.Documents[1].IDs[1] = 10
	if _, err := windows("x", h, 3, 0, 10); err == nil || !strings.Contains(err.Error(), "document 1 (b)") {
		t.Errorf("out-of-vocabulary id: %v", err)
	}
	if _, err := windows("x", h, 1, 0, 10); err == nil {
		t.Error("context 1 accepted")
	}
}

func TestLoadWindowsHostile(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"notjson.json": "{\"eot\": 1, \"documents\": [",
		"empty.json":   `{"eot": 1, "documents": []}`,
		"neg.json":     `{"eot": -1, "documents": [{"path": "a", "ids": [1, 2, 3, 4]}]}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := loadWindows(p, 2, 0, 10); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v does not name the file", name, err)
		}
	}
	if _, err := loadWindows(dir, 2, 0, 10); err == nil {
		t.Error("a directory was read as the held-out file")
	}
}

func TestCommittedHeldout(t *testing.T) {
	w, err := loadWindows("../../testdata/trained/data/heldout-tokens.json", 256, 10, 1536)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 10 || len(w[0]) != 256 || w[0][0] != 1500 {
		t.Fatalf("committed held-out text gives %d windows, first starts with %d", len(w), w[0][0])
	}
}
