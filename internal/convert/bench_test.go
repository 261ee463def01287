package convert

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tq-project/tq/internal/fixtures"
)

// benchChild is what one measured conversion reports from its own process.
type benchChild struct {
	Seconds  float64 `json:"seconds"`
	VmHWMKiB int64   `json:"vmhwm_kib"`
	InBytes  int64   `json:"in_bytes"`
	OutBytes int64   `json:"out_bytes"`
	Error    string  `json:"error,omitempty"`
}

func vmHWM() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			v, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return v
		}
	}
	return -1
}

// TestBenchChild runs one conversion when started by BenchmarkConvert (and does nothing
// otherwise), so that the peak RSS of each conversion is measured in its own process.
func TestBenchChild(t *testing.T) {
	spec := os.Getenv("TQ_CONVERT_BENCH_CHILD")
	if spec == "" {
		return
	}
	var req struct {
		Op, In, Out, Type string
		Turbo             bool
	}
	if err := json.Unmarshal([]byte(spec), &req); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var res *Result
	var err error
	if req.Op == "requantize" {
		res, err = Requantize(context.Background(), req.In, req.Out, RequantizeOptions{Options: Options{Types: TypeOptions{OutType: req.Type}, Output: OutputOptions{NoManifest: true}}})
	} else {
		res, err = Convert(context.Background(), req.In, req.Out, Options{Types: TypeOptions{OutType: req.Type, TurboQuant: req.Turbo}, Output: OutputOptions{NoManifest: true}})
	}
	r := benchChild{Seconds: time.Since(start).Seconds(), VmHWMKiB: vmHWM()}
	if err != nil {
		r.Error = err.Error()
	} else {
		r.OutBytes = res.Plan.Bytes
		r.InBytes = int64(res.Plan.InputBPW / 8 * float64(res.Plan.Elements))
	}
	b, _ := json.Marshal(r)
	fmt.Printf("BENCH-CHILD %s\n", b)
}

func runBenchChild(b *testing.B, req map[string]any) benchChild {
	b.Helper()
	spec, _ := json.Marshal(req)
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchChild$", "-test.v")
	cmd.Env = append(os.Environ(), "TQ_CONVERT_BENCH_CHILD="+string(spec))
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("child %v: %v\n%s", req, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "BENCH-CHILD "); ok {
			var r benchChild
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				b.Fatal(err)
			}
			if r.Error != "" {
				b.Fatalf("child %v: %s", req, r.Error)
			}
			return r
		}
	}
	b.Fatalf("child %v printed no result:\n%s", req, out)
	return benchChild{}
}

// BenchmarkConvert converts a generated model of about 1 GB of BF16 weights
// (TQ_BENCH_BYTES overrides the size) straight to q8_0, q4_k_m and turboquant, and the
// two-step baseline (F16 GGUF, then requantize) in the same run. Each conversion runs in its
// own process, so peak RSS (VmHWM) is per conversion. Reported: input MB/s of each direct
// conversion, peak RSS, and the ratios direct/two-step for time and peak RSS.
func BenchmarkConvert(b *testing.B) {
	size := int64(1e9)
	if s := os.Getenv("TQ_BENCH_BYTES"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 {
			b.Fatalf("TQ_BENCH_BYTES=%q", s)
		}
		size = v
	}
	o := fixtures.Preset("qwen3")
	o.TargetBytes = size
	dir := filepath.Join(b.TempDir(), "model")
	genStart := time.Now()
	if err := fixtures.Generate(dir, o); err != nil {
		b.Fatal(err)
	}
	b.Logf("generated %d-byte qwen3 model in %.1fs", size, time.Since(genStart).Seconds())
	tmp := b.TempDir()
	mb := func(n int64, s float64) float64 { return float64(n) / 1e6 / s }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f16 := filepath.Join(tmp, "f16.gguf")
		base := runBenchChild(b, map[string]any{"Op": "convert", "In": dir, "Out": f16, "Type": "f16"})
		b.ReportMetric(mb(base.InBytes, base.Seconds), "f16-MB/s")
		for _, typ := range []string{"q8_0", "q4_k_m"} {
			direct := runBenchChild(b, map[string]any{"Op": "convert", "In": dir, "Out": filepath.Join(tmp, typ+".gguf"), "Type": typ})
			req := runBenchChild(b, map[string]any{"Op": "requantize", "In": f16, "Out": filepath.Join(tmp, typ+"-2step.gguf"), "Type": typ})
			twoStep := base.Seconds + req.Seconds
			b.ReportMetric(mb(direct.InBytes, direct.Seconds), typ+"-MB/s")
			b.ReportMetric(float64(direct.VmHWMKiB)/1024, typ+"-peakRSS-MiB")
			b.ReportMetric(direct.Seconds/twoStep, typ+"-time/2step")
			b.ReportMetric(float64(direct.VmHWMKiB)/float64(max(base.VmHWMKiB, req.VmHWMKiB)), typ+"-RSS/2step")
			b.Logf("%s: direct %.1fs (%.0f MB/s, peak RSS %d MiB); two-step f16 %.1fs + requantize %.1fs (peak %d MiB)",
				typ, direct.Seconds, mb(direct.InBytes, direct.Seconds), direct.VmHWMKiB/1024, base.Seconds, req.Seconds,
				max(base.VmHWMKiB, req.VmHWMKiB)/1024)
			if bin := os.Getenv("TQ_LLAMACPP_NATIVE"); bin != "" {
				// llama.cpp built natively (scripts/llamacpp-native.sh): llama-quantize on the
				// same F16 file, all CPUs, as tq's requantize uses
				out := filepath.Join(tmp, typ+"-llama.gguf")
				t0 := time.Now()
				cmd := exec.Command(filepath.Join(bin, "llama-quantize"), f16, out, typ, strconv.Itoa(runtime.NumCPU()))
				if msg, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("llama-quantize: %v\n%s", err, msg)
				}
				ls := time.Since(t0).Seconds()
				b.ReportMetric(ls/req.Seconds, typ+"-requantize-speedup-vs-llama-quantize")
				b.ReportMetric(ls/direct.Seconds, typ+"-direct-speedup-vs-llama-quantize")
				b.Logf("%s: native llama-quantize %.1fs: tq requantize %.2fx, tq direct %.2fx its speed", typ, ls, ls/req.Seconds, ls/direct.Seconds)
				os.Remove(out)
			}
			os.Remove(filepath.Join(tmp, typ+".gguf"))
			os.Remove(filepath.Join(tmp, typ+"-2step.gguf"))
		}
		tq := runBenchChild(b, map[string]any{"Op": "convert", "In": dir, "Out": filepath.Join(tmp, "tq.gguf"), "Turbo": true})
		b.ReportMetric(mb(tq.InBytes, tq.Seconds), "turbo-MB/s")
		b.ReportMetric(float64(tq.VmHWMKiB)/1024, "turbo-peakRSS-MiB")
		b.Logf("turboquant (default policy): %.1fs (%.0f MB/s, peak RSS %d MiB)", tq.Seconds, mb(tq.InBytes, tq.Seconds), tq.VmHWMKiB/1024)
		os.Remove(filepath.Join(tmp, "tq.gguf"))
		os.Remove(f16)
	}
}
