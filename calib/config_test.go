package calib

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/convert"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/fixtures"
)

// TestConfigAcceptedByConvert calibrates a model and has internal/convert plan a turboquant
// conversion from the written quantize_config.json: the config must parse, the imatrix it
// names must load, and the tensors of layers_to_quantize must get the int4 container with the
// group size and importance weights, the skipped ones F16.
func TestConfigAcceptedByConvert(t *testing.T) {
	o := fixtures.Preset("qwen3moe")
	o.Layers = 1
	dir := genModel(t, o)
	seqs := randSeqs(9, 3, vocabOf(t, dir), 30, 100, 64)
	var warned []string
	res := calibrate(t, dir, Options{Sequences: seqs, Threads: 2, KVCacheDType: "q4_0", Version: "test",
		Warn: func(s string) { warned = append(warned, s) }})
	if len(warned) == 0 || !strings.Contains(warned[0], "q4_0") {
		t.Errorf("no warning for kv_cache_dtype q4_0: %v", warned)
	}
	b, err := os.ReadFile(res.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := policy.ParseTurboConfig(b)
	if err != nil {
		t.Fatalf("convert rejects our config: %v", err)
	}
	if len(tc.Unknown) != 0 {
		t.Errorf("keys convert does not know: %v", tc.Unknown)
	}
	if tc.GroupSize != 128 || !*tc.Symmetric || tc.WeightDType != "int4" || tc.KVCacheDType != "q4_0" ||
		tc.CalibrationMethod != "mse" || tc.NumPrompts != 3 || !strings.HasPrefix(tc.CalibrationHash, "sha256:") ||
		tc.Imatrix != IMatrixFile || tc.TQVersion != "test" {
		t.Errorf("config fields: %+v", tc)
	}
	if !slices.Equal(tc.SkipLayers, DefaultSkipLayers) || !slices.Equal(tc.LayersToQuantize, DefaultLayersToQuantize) {
		t.Errorf("layer lists %v / %v", tc.LayersToQuantize, tc.SkipLayers)
	}
	back, err := LoadConfig(res.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if back.Calibration == nil || back.Calibration.Tokens <= 0 || back.Calibration.TokenHash != tc.CalibrationHash || len(back.Tensors) == 0 {
		t.Fatalf("calibration record %+v", back.Calibration)
	}

	plan, err := convert.PlanConvert(dir, convert.Options{Types: convert.TypeOptions{TurboQuant: true, ConfigPath: res.ConfigPath}})
	if err != nil {
		t.Fatalf("convert cannot plan from our config: %v", err)
	}
	searched := 0
	for _, pt := range plan.Tensors {
		ch, ok := res.Config.Tensors[pt.Name]
		role := policy.Role(pt.Name)
		switch {
		case ok:
			searched++
			if pt.Type != ch.Type || !pt.Importance {
				t.Errorf("%s: convert plans %s importance %v; calibration chose %s",
					pt.Name, pt.Type, pt.Importance, ch.Type)
			}
			if !ch.Weighted || ch.WeightedRMSE <= 0 || ch.Sensitivity <= 0 || ch.SNRdB <= 0 || ch.AltType != "q8_0" {
				t.Errorf("%s: incomplete search record %+v", pt.Name, ch)
			}
			if ch.UnweightedWeightedRMSE < ch.WeightedRMSE*(1-1e-9) {
				t.Errorf("%s: the unweighted search reached a lower weighted error (%g < %g)", pt.Name, ch.UnweightedWeightedRMSE, ch.WeightedRMSE)
			}
		case role == "o_proj" || role == "down_proj":
			if !strings.EqualFold(pt.Type, "q8_0") {
				t.Errorf("%s (skipped: not int4) planned as %s, want Q8_0", pt.Name, pt.Type)
			}
		}
	}
	if searched != len(res.Config.Tensors) || searched == 0 {
		t.Errorf("convert planned %d of the %d searched tensors", searched, len(res.Config.Tensors))
	}
	for _, w := range plan.Warnings {
		t.Errorf("convert warns: %s", w)
	}
	if math.IsNaN(res.Config.Calibration.TokensPerSecond) || res.Config.Calibration.TokensPerSecond <= 0 {
		t.Errorf("tokens/s %v", res.Config.Calibration.TokensPerSecond)
	}
}

func TestOptionErrors(t *testing.T) {
	seqs := []Sequence{{Tokens: []int32{1, 2}, Valid: 2}}
	_, err := Calibrate(context.Background(), t.TempDir(), Options{Sequences: seqs, Method: "kl"})
	if !errors.Is(err, ErrKLMethod) || !strings.Contains(err.Error(), "weighted MSE") {
		t.Errorf("kl: %v", err)
	}
	for _, o := range []Options{
		{Sequences: seqs, WeightDType: "int3"},
		{Sequences: seqs, GroupSize: 100},
		{Sequences: seqs, KVCacheDType: "q2_k"},
		{},
		{Sequences: []Sequence{{Tokens: []int32{1}, Valid: 2}}},
	} {
		if _, err := Calibrate(context.Background(), t.TempDir(), o); err == nil {
			t.Errorf("options %+v accepted", o)
		}
	}
	if v, w, err := NormalizeKVCacheDType("FP16"); v != "f16" || w != "" || err != nil {
		t.Errorf("fp16 -> %q %q %v", v, w, err)
	}
}

// TestImportedIMatrixSearch exports a calibration as llama.cpp imatrix files (GGUF and
// legacy .dat), imports them, and runs the search from the imported statistics alone: the
// choices must match the original run's (importance equal up to float32 rounding: weighted
// errors within 1e-2 relative; measured up to 3.1e-3, since a choice made on the container
// probe has figures over 64 rows, where a few codes chosen differently under the rounded
// importance show more than over the 256 sampled rows, up to 6e-4, before 2026-12-06).
func TestImportedIMatrixSearch(t *testing.T) {
	o := fixtures.Preset("qwen3moe")
	o.Layers = 1
	dir := genModel(t, o)
	seqs := randSeqs(19, 3, vocabOf(t, dir), 40, 120, 64)
	ref := calibrate(t, dir, Options{Sequences: seqs, Threads: 2, NoBaseline: true})
	datPath := filepath.Join(t.TempDir(), "im.dat")
	if err := SaveIMatrix(datPath, ref.Stats, &IMatrixOptions{ChunkSize: 64}); err != nil {
		t.Fatal(err)
	}
	shape := func(name string) (int, int, bool) {
		ts := ref.Stats.Tensors[name]
		if ts == nil {
			return 0, 0, false
		}
		return ts.Cols, ts.NMat, true
	}
	for _, path := range []string{ref.IMatrixPath, datPath} {
		im, err := LoadIMatrix(path, &ImportOptions{ChunkSize: 64, Shape: shape})
		if err != nil {
			t.Fatal(err)
		}
		res := calibrate(t, dir, Options{Import: im, ImportHash: "sha256:x", Threads: 2, NoBaseline: true})
		if len(res.Config.Tensors) != len(ref.Config.Tensors) || res.Config.CalibrationHash != "sha256:x" {
			t.Fatalf("%s: %d choices, want %d", path, len(res.Config.Tensors), len(ref.Config.Tensors))
		}
		for name, want := range ref.Config.Tensors {
			got := res.Config.Tensors[name]
			if got == nil || got.Type != want.Type || got.GroupSize != want.GroupSize ||
				math.Abs(got.WeightedRMSE-want.WeightedRMSE) > 1e-2*want.WeightedRMSE {
				t.Fatalf("%s: %s: imported search %+v, calibrated %+v", path, name, got, want)
			}
		}
	}
}
