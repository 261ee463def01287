package cuda

import (
	"math"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
)

// TestEmulatedProfile runs the kernels of a toy decode step with the launch profiler on: every
// kernel launched is in the table with its launch count and a positive time, launches recorded
// for a graph are not (they run later, as one graph), turning the profiler off clears it, and
// the results are the same as without it.
func TestEmulatedProfile(t *testing.T) {
	d := openEmulator(t)
	defer d.Close()
	if _, _, err := d.Profile(); err == nil {
		t.Fatal("Profile with the profiler off: no error")
	}
	const nh, hd = 2, 32
	rp := &Rope{NRot: hd, ThetaScale: float32(math.Pow(10000, -2.0/hd)), FreqScale: 1, AttnFactor: 1}
	kv, err := d.NewKVCache(1, 8, nh*hd, gguf.TypeF16, gguf.TypeF16)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeKVCache(kv)
	bufs := make([]Buffer, 5)
	for i := range bufs {
		if bufs[i], err = d.Alloc(nh * hd); err != nil {
			t.Fatal(err)
		}
		x := make([]float32, nh*hd)
		for j := range x {
			x[j] = float32(j%7) - 3
		}
		if err := d.Write(bufs[i], x); err != nil {
			t.Fatal(err)
		}
	}
	qr, kr, v, out, acc := bufs[0], bufs[1], bufs[2], bufs[3], bufs[4]
	step := func(pos int) []float32 {
		if err := stepKernels(d, kv, qr, kr, v, out, acc, pos, rp, nh, hd); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, nh*hd)
		if err := d.Read(y, out); err != nil {
			t.Fatal(err)
		}
		return y
	}
	plain := step(0)
	if err := d.SetProfile(true); err != nil {
		t.Fatal(err)
	}
	profiled := step(0)
	step(1)
	if d.GraphsSupported() {
		if err := d.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		if err := stepKernels(d, kv, qr, kr, v, out, acc, 2, rp, nh, hd); err != nil {
			t.Fatal(err)
		}
		g, err := d.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		g.Destroy()
	}
	table, floor, err := d.Profile()
	if err != nil {
		t.Fatal(err)
	}
	for i := range plain {
		if math.Float32bits(plain[i]) != math.Float32bits(profiled[i]) {
			t.Fatalf("output %d: %v profiled, %v without the profiler", i, profiled[i], plain[i])
		}
	}
	calls := map[string]int{}
	for _, k := range table {
		if k.Total <= 0 || k.Mean() <= 0 {
			t.Errorf("%s: no time measured", k.Name)
		}
		calls[k.Name] += k.Calls
	}
	// Two RoPE launches per step (query and key), one of each other kernel; two eager steps.
	want := map[string]int{"tq_rope": 4, "tq_kv_store": 2, "tq_attn": 2, "tq_add": 2}
	for name, n := range want {
		if calls[name] != n {
			t.Errorf("%s: %d launches profiled, want %d (table %v)", name, calls[name], n, calls)
		}
	}
	if len(calls) != len(want) {
		t.Errorf("profiled kernels %v, want %v", calls, want)
	}
	if floor <= 0 {
		t.Errorf("synchronisation floor %v", floor)
	}
	text := FormatProfile(table)
	if !strings.Contains(text, "tq_attn") || strings.Count(text, "\n") != len(table)+1 {
		t.Errorf("FormatProfile:\n%s", text)
	}
	t.Logf("\n%s", text)
	if err := d.SetProfile(false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Profile(); err == nil {
		t.Fatal("Profile after SetProfile(false): no error")
	}
}
