package calib

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/fixtures"
)

// BenchmarkCalibrate measures calibration throughput (tokens through the whole model per
// second, and that times the parameter count in billions: "tokens/s per billion parameters",
// comparable across model sizes) on a generated model, and as the baseline the plain
// full-precision forward of infer (all layers loaded, Session.Eval, no statistics, no search)
// over the same tokens in the same run. The ratio is the cost of layer-by-layer execution,
// statistics, checkpoints and the search.
func BenchmarkCalibrate(b *testing.B) {
	for _, arch := range []string{"qwen3", "qwen3moe"} {
		b.Run(arch, func(b *testing.B) {
			o := fixtures.Preset(arch)
			o.TargetBytes = 48 << 20
			dir := genModel(b, o)
			wb, _ := fixtures.WeightBytes(o)
			params := float64(wb) / 2 // bf16
			seqs := randSeqs(5, 8, vocabOf(b, dir), 256, 256, 64)
			var tokens int64
			for _, s := range seqs {
				tokens += int64(len(s.Tokens))
			}
			ms := fullSource(b, dir)
			m, err := infer.Load(ms, infer.Options{CtxSize: 256, CacheTypeK: "f32", CacheTypeV: "f32", FullPrecision: true})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			b.ResetTimer()
			var calib, base time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := Calibrate(context.Background(), dir, Options{Sequences: seqs, OutDir: filepath.Join(b.TempDir(), "o")}); err != nil {
					b.Fatal(err)
				}
				calib += time.Since(t0)
				t0 = time.Now()
				for _, s := range seqs {
					sess, err := m.NewSession()
					if err != nil {
						b.Fatal(err)
					}
					if _, err := sess.Eval(s.Tokens, infer.LogitsNone); err != nil {
						b.Fatal(err)
					}
				}
				base += time.Since(t0)
			}
			n := float64(b.N) * float64(tokens)
			tps := n / calib.Seconds()
			b.ReportMetric(tps, "tok/s")
			b.ReportMetric(tps*params/1e9, "tok/s*Bparams")
			b.ReportMetric(n/base.Seconds(), "baseline-tok/s")
			b.ReportMetric(tps/(n/base.Seconds()), "ratio-vs-forward")
		})
	}
}
