package calib

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tq-project/tq/infer"
	"github.com/tq-project/tq/internal/convert"
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

// BenchmarkVsLlamaImatrix compares tq calibrate's throughput and peak RSS with llama.cpp's
// llama-imatrix built natively (TQ_LLAMACPP_NATIVE, scripts/llamacpp-native.sh; skipped
// without it), in the same run, on a generated qwen3 model (TQ_BENCH_BYTES of BF16 weights,
// default 400 MB) and 8 chunks of 512 tokens (TQ_BENCH_CHUNKS; 30 is about the default
// calibration set's 15,000 tokens, at which "full" runs the sensitivity pass on the 1 B
// model), 2 threads each. llama-imatrix reads the F16 GGUF of the same model (no
// perplexity); tq reads the checkpoint, in two configurations:
// "stats" (the importance statistics and the per-tensor search, no Gram matrices, no
// sensitivity pass: what llama-imatrix computes, plus the search) and "full" (the default:
// Gram matrices and the sensitivity pass too). Each runs in its own process (wall time
// including model load; peak RSS: the child's own VmHWM, see run). It also reports what "full" adds
// over "stats" in seconds and in bytes of output (hessians/, sensitivity.json) per billion
// parameters.
func BenchmarkVsLlamaImatrix(b *testing.B) {
	bin := os.Getenv("TQ_LLAMACPP_NATIVE")
	if bin == "" {
		b.Skip("TQ_LLAMACPP_NATIVE (the native llama.cpp bin directory, scripts/llamacpp-native.sh) not set")
	}
	size := int64(400e6)
	if s := os.Getenv("TQ_BENCH_BYTES"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 {
			b.Fatalf("TQ_BENCH_BYTES=%q", s)
		}
		size = v
	}
	const ctx = 512
	chunks := 8
	if s := os.Getenv("TQ_BENCH_CHUNKS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 || v > 1024 {
			b.Fatalf("TQ_BENCH_CHUNKS=%q", s)
		}
		chunks = v
	}
	o := fixtures.Preset("qwen3")
	o.TargetBytes = size
	dir := genModel(b, o)
	wb, _ := fixtures.WeightBytes(o)
	f16 := filepath.Join(b.TempDir(), "f16.gguf")
	if _, err := convert.Convert(context.Background(), dir, f16, convert.Options{Types: convert.TypeOptions{OutType: "f16"},
		Output: convert.OutputOptions{NoManifest: true}}); err != nil {
		b.Fatal(err)
	}
	// text for llama-imatrix: random words, far more tokens than it uses
	r := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the model reads a long document about tools math and weather then answers with a call " +
		"numbers like 12 and 345 appear in tables while functions return json objects to the user")
	var sb strings.Builder
	for sb.Len() < 400_000 {
		sb.WriteString(words[r.IntN(len(words))])
		sb.WriteByte(' ')
	}
	text := filepath.Join(b.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	// run returns the command's wall time, peak RSS and output. The peak RSS is the child's
	// VmHWM, sampled from /proc every 10 ms while it runs: the rusage figure is not the
	// child's own, because Linux carries the parent's high-water mark into a child started
	// with vfork (as Go starts commands) when it execs, and this process holds the model.
	// The rusage figure is used only where /proc cannot be read.
	run := func(cmd *exec.Cmd) (float64, int64, []byte) {
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatalf("%s: %v", cmd.Path, err)
		}
		status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
		done := make(chan struct{})
		hwm := make(chan int64, 1)
		go func() {
			var peak int64 = -1
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				if v := procHWM(status); v > peak {
					peak = v
				}
				select {
				case <-done:
					hwm <- peak
					return
				case <-tick.C:
				}
			}
		}()
		err := cmd.Wait()
		close(done)
		rss := <-hwm
		if err != nil {
			b.Fatalf("%s: %v\n%s", cmd.Path, err, buf.Bytes())
		}
		if rss <= 0 {
			if ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage); ru != nil {
				rss = ru.Maxrss * 1024
			}
		}
		return time.Since(t0).Seconds(), rss, buf.Bytes()
	}
	tokens := float64(chunks * ctx)
	for i := 0; i < b.N; i++ {
		ls, lrss, _ := run(exec.Command(filepath.Join(bin, "llama-imatrix"), "-m", f16, "-f", text, "-c", strconv.Itoa(ctx),
			"--chunks", strconv.Itoa(chunks), "-t", "2", "--no-ppl", "-o", filepath.Join(b.TempDir(), "imatrix.gguf")))
		b.ReportMetric(tokens/ls, "llama-imatrix-tok/s")
		b.ReportMetric(float64(lrss)/(1<<20), "llama-imatrix-peakRSS-MiB")
		b.Logf("model %.0f M parameters; llama-imatrix: %.1f s, %.1f tok/s, peak RSS %d MiB", float64(wb)/2e6, ls, tokens/ls, lrss>>20)
		secs, disk := map[string]float64{}, map[string]float64{}
		for _, mode := range []string{"stats", "full"} {
			cmd := exec.Command(os.Args[0], "-test.run=^TestImatrixBenchChild$", "-test.v")
			cmd.Env = append(os.Environ(), fmt.Sprintf("TQ_IMATRIX_BENCH_CHILD=%s|%s|%d|%d|%d", dir, mode, chunks, ctx, vocabOf(b, dir)))
			ts, trss, out := run(cmd)
			var d, hwm int64
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, "RESULT ") {
					fmt.Sscanf(line, "RESULT disk=%d hwm=%d", &d, &hwm)
				}
			}
			trss = max(trss, hwm) // the child's own VmHWM at exit: exact, where sampling may miss the end
			secs[mode], disk[mode] = ts, float64(d)
			b.ReportMetric(tokens/ts, mode+"-tok/s")
			b.ReportMetric(float64(trss)/(1<<20), mode+"-peakRSS-MiB")
			b.ReportMetric(ls/ts, mode+"-speed-vs-llama-imatrix")
			b.ReportMetric(float64(trss)/float64(lrss), mode+"-RSS-vs-llama-imatrix")
			b.Logf("tq calibrate (%s): %.1f s, %.1f tok/s (%.2fx), peak RSS %d MiB (%.2fx), output %.1f MB", mode, ts, tokens/ts, ls/ts, trss>>20, float64(trss)/float64(lrss), float64(d)/1e6)
		}
		// what the Gram matrices and the sensitivity pass add, per billion parameters
		bparams := float64(wb) / 2 / 1e9
		b.ReportMetric((secs["full"]-secs["stats"])/bparams, "added-s-per-Bparams")
		b.ReportMetric((disk["full"]-disk["stats"])/1e9/bparams, "added-GB-disk-per-Bparams")
		b.Logf("Gram matrices + sensitivity pass add %.0f s and %.2f GB of output per billion parameters at %d tokens",
			(secs["full"]-secs["stats"])/bparams, (disk["full"]-disk["stats"])/1e9/bparams, chunks*ctx)
	}
}

// TestImatrixBenchChild is BenchmarkVsLlamaImatrix's tq process.
func TestImatrixBenchChild(t *testing.T) {
	spec := os.Getenv("TQ_IMATRIX_BENCH_CHILD")
	if spec == "" {
		t.Skip("child process of BenchmarkVsLlamaImatrix")
	}
	p := strings.Split(spec, "|")
	n, _ := strconv.Atoi(p[2])
	l, _ := strconv.Atoi(p[3])
	vocab, _ := strconv.Atoi(p[4])
	o := Options{Sequences: randSeqs(31, n, vocab, l, l, 64), OutDir: filepath.Join(t.TempDir(), "out"), Threads: 2}
	if p[1] == "stats" {
		o.NoHessians, o.SensitivityTokens, o.NoBaseline, o.NoSensitivity = true, -1, true, true
	}
	t0, stage := time.Now(), ""
	o.Progress = func(pr Progress) {
		if pr.Stage != stage {
			var ru syscall.Rusage
			syscall.Getrusage(0, &ru)
			t.Logf("%6.2fs: stage %s cpu %.2f", time.Since(t0).Seconds(), pr.Stage, float64(ru.Utime.Sec)+float64(ru.Utime.Usec)/1e6+float64(ru.Stime.Sec)+float64(ru.Stime.Usec)/1e6)
			stage = pr.Stage
		}
	}
	if _, err := Calibrate(context.Background(), p[0], o); err != nil {
		t.Fatal(err)
	}
	var disk int64
	filepath.WalkDir(o.OutDir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				disk += fi.Size()
			}
		}
		return nil
	})
	fmt.Printf("RESULT disk=%d hwm=%d\n", disk, vmHWM())
}
