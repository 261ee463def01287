package calib

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tq-project/tq/internal/fixtures"
)

func statsEqual(t *testing.T, what string, a, b *Stats) {
	t.Helper()
	if !reflect.DeepEqual(a.Names(), b.Names()) {
		t.Fatalf("%s: tensors differ: %v vs %v", what, a.Names(), b.Names())
	}
	for _, n := range a.Names() {
		x, y := a.Tensors[n], b.Tensors[n]
		if !reflect.DeepEqual(x.Counts, y.Counts) || !reflect.DeepEqual(x.SumSq, y.SumSq) || !reflect.DeepEqual(x.Synthetic, y.Synthetic) {
			t.Fatalf("%s: statistics of %s differ", what, n)
		}
		for i := range x.MaxAbs {
			if x.MaxAbs[i] != y.MaxAbs[i] {
				t.Fatalf("%s: max|x| of %s differ", what, n)
			}
		}
	}
	if !reflect.DeepEqual(a.Routing, b.Routing) {
		t.Fatalf("%s: routing differs", what)
	}
}

// TestResumeAndSpill interrupts a calibration in the middle of block 1, resumes it, and
// checks that the result equals an uninterrupted run; then runs with a memory budget that
// forces hidden states to disk, which must not change the result either.
func TestResumeAndSpill(t *testing.T) {
	o := fixtures.Preset("qwen3moe")
	o.Layers = 3
	dir := genModel(t, o)
	vocab := vocabOf(t, dir)
	seqs := randSeqs(3, 5, vocab, 60, 130, 64)
	base := Options{Sequences: seqs, Threads: 2, NoBaseline: true, NoSensitivity: true}

	ref := calibrate(t, dir, base)

	out := filepath.Join(t.TempDir(), "out")
	ctx, cancel := context.WithCancel(context.Background())
	opts := base
	opts.OutDir = out
	opts.Progress = func(p Progress) {
		if p.Stage == "layer" && p.Layer == 1 && p.Seq == 2 {
			cancel()
		}
	}
	if _, err := Calibrate(ctx, dir, opts); !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v, want context.Canceled", err)
	}
	st, ok, err := loadState(filepath.Join(out, CheckpointDir))
	if err != nil || !ok || st.StepsDone != 2 {
		t.Fatalf("checkpoint after interruption: %+v %v %v (want 2 steps done: embedding and block 0)", st, ok, err)
	}
	if _, err := os.Stat(filepath.Join(out, ConfigFile)); err == nil {
		t.Fatal("an interrupted run wrote quantize_config.json")
	}
	if _, err := os.Stat(filepath.Join(out, HessianDir, HessianIndexFile)); err == nil {
		t.Fatal("an interrupted run wrote the Gram index")
	}

	// a different calibration set must not silently reuse the checkpoint
	other := base
	other.OutDir = out
	other.Sequences = randSeqs(4, 5, vocab, 60, 130, 64)
	if _, err := Calibrate(context.Background(), dir, other); err == nil || !strings.Contains(err.Error(), "--restart") {
		t.Fatalf("mismatched checkpoint: %v", err)
	}
	// nor a forward with other arithmetic, where the CPU has the rounded bf16 products
	if bf16Rounded(false) {
		exact := opts
		exact.Progress, exact.ExactForward = nil, true
		if _, err := Calibrate(context.Background(), dir, exact); err == nil || !strings.Contains(err.Error(), "--restart") {
			t.Fatalf("checkpoint of the rounded forward resumed by the exact one: %v", err)
		}
	}

	opts.Progress = nil
	res, err := Calibrate(context.Background(), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.ResumedAt != 2 {
		t.Errorf("resumed at step %d, want 2", res.ResumedAt)
	}
	statsEqual(t, "resumed", ref.Stats, res.Stats)
	hessiansEqual(t, "resumed", ref.HessianDir, res.HessianDir)
	if !reflect.DeepEqual(ref.Config.Tensors, res.Config.Tensors) {
		t.Error("resumed run chose differently")
	}
	if _, err := os.Stat(filepath.Join(out, CheckpointDir)); !os.IsNotExist(err) {
		t.Errorf("checkpoint directory left behind: %v", err)
	}

	// spill: a budget that leaves room for one sequence's hidden states only
	var one int64
	for _, s := range seqs {
		one = max(one, int64(len(s.Tokens))*int64(o.Hidden)*4)
	}
	sp := base
	sp.MemoryBudget = ref.EstimatedBytes + one
	res2 := calibrate(t, dir, sp)
	if res2.HiddenInRAM >= len(seqs) || res2.HiddenInRAM < 1 {
		t.Errorf("%d of %d sequences kept in RAM, want some spilled", res2.HiddenInRAM, len(seqs))
	}
	statsEqual(t, "spilled", ref.Stats, res2.Stats)
	hessiansEqual(t, "spilled", ref.HessianDir, res2.HessianDir)

	// a budget below one block's needs is refused with a clear message
	sp.MemoryBudget = ref.EstimatedBytes / 2
	if _, err := Calibrate(context.Background(), dir, sp); err == nil || !strings.Contains(err.Error(), "memory budget") {
		t.Errorf("tiny budget: %v", err)
	}
}
