package cuda

import (
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tq-project/tq/gguf"
)

// The device tests run only with TQ_GPU=1 (CI has no GPU); then a missing or unusable GPU is a
// failure, not a skip. scripts/gpu-check.sh runs them: -run GPU, then -bench GPU.

func gpuDevice(t testing.TB) *Device {
	t.Helper()
	if os.Getenv("TQ_GPU") != "1" {
		t.Skip("device test: set TQ_GPU=1 to run it on a CUDA GPU")
	}
	d, line, err := Select("cuda")
	if err != nil {
		t.Fatalf("TQ_GPU=1 but CUDA is unusable: %v", err)
	}
	t.Log(line)
	return d
}

func TestGPUSelect(t *testing.T) {
	d := gpuDevice(t)
	defer d.Close()
	info := d.Info()
	if info.ComputeMajor*10+info.ComputeMinor < minComputeCapability || info.SMs <= 0 || info.TotalMemory <= 0 {
		t.Fatalf("implausible device info %+v", info)
	}
	free, total, err := d.MemInfo()
	if err != nil || total <= 0 || free <= 0 || free > total {
		t.Fatalf("MemInfo = %d, %d, %v", free, total, err)
	}
	t.Logf("%s; %.1f of %.1f GiB free", info, float64(free)/(1<<30), float64(total)/(1<<30))
	d2, line, err := Select("auto")
	if err != nil || d2 == nil {
		t.Fatalf("auto did not pick the GPU: %q, %v", line, err)
	}
	d2.Close()
}

// TestGPUKernels runs the kernel suite on the device at production-like sizes (small ones with
// -short).
func TestGPUKernels(t *testing.T) {
	d := gpuDevice(t)
	defer d.Close()
	runKernelSuite(t, d, !testing.Short())
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// ---- bandwidth benchmarks -----------------------------------------------------------------------

var (
	memcpyOnce sync.Once
	memcpyGBs  float64
)

// deviceCopyBandwidth measures device-to-device copy bandwidth in GB/s counting bytes read plus
// bytes written (the traffic an ideal streaming kernel could sustain), once per process.
func deviceCopyBandwidth(b *testing.B, d *Device) float64 {
	memcpyOnce.Do(func() {
		n := benchMiB() << 19 // floats: 2×benchMiB MiB per buffer
		src, err := d.Alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Free(src)
		dst, err := d.Alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Free(dst)
		d.Copy(dst, src) // warm-up
		if err := d.Sync(); err != nil {
			b.Fatal(err)
		}
		const reps = 20
		start := time.Now()
		for range reps {
			if err := d.Copy(dst, src); err != nil {
				b.Fatal(err)
			}
		}
		if err := d.Sync(); err != nil {
			b.Fatal(err)
		}
		memcpyGBs = float64(reps) * 2 * float64(n) * 4 / time.Since(start).Seconds() / 1e9
	})
	return memcpyGBs
}

// BenchmarkGPUMemcpy reports the device copy bandwidth (read + write) used as the baseline.
func BenchmarkGPUMemcpy(b *testing.B) {
	d := gpuDevice(b)
	defer d.Close()
	for range b.N {
		_ = deviceCopyBandwidth(b, d)
	}
	b.ReportMetric(deviceCopyBandwidth(b, d), "GB/s")
}

// benchMiB is the weight size of BenchmarkGPUMatVec: $TQ_GPU_BENCH_MIB, default 256 MiB.
func benchMiB() int {
	if v, err := strconv.Atoi(os.Getenv("TQ_GPU_BENCH_MIB")); err == nil && v > 0 {
		return v
	}
	return 256
}

// BenchmarkGPUMatVec measures mat-vec weight-streaming bandwidth per type on a ~256 MiB weight
// (far larger than the L2 cache of current GPUs), as GB/s of weight bytes read and as a percentage of the device
// copy bandwidth measured in the same process.
func BenchmarkGPUMatVec(b *testing.B) {
	d := gpuDevice(b)
	defer d.Close()
	base := deviceCopyBandwidth(b, d)
	r := rand.New(rand.NewPCG(21, 22))
	const cols = 4096
	for _, tc := range []struct {
		t gguf.GGMLType
		T int
	}{
		{gguf.TypeQ4_K, 1}, {gguf.TypeQ5_K, 1}, {gguf.TypeQ6_K, 1}, {gguf.TypeQ8_0, 1}, {gguf.TypeQ4_0, 1},
		{gguf.TypeF16, 1}, {gguf.TypeBF16, 1}, {gguf.TypeF32, 1}, {gguf.TypeQ4_K, 8},
	} {
		name := tc.t.String()
		if tc.T > 1 {
			name += "_T8"
		}
		b.Run(name, func(b *testing.B) {
			rb, _ := tc.t.RowBytes(cols)
			rows := int(int64(benchMiB()<<20) / rb)
			data := make([]byte, int(rb)*rows)
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			// Keep every fp16 scale finite and small: clear the high byte of each 16-bit word.
			for i := 1; i < len(data); i += 2 {
				data[i] &= 0x3b
			}
			w, err := d.Upload("bench", tc.t, []int64{cols, int64(rows)}, data)
			if err != nil {
				b.Fatal(err)
			}
			defer d.FreeTensor(w)
			x, _ := d.UploadF32(gaussian(r, tc.T*cols, 1))
			defer d.Free(x)
			y, _ := d.Alloc(tc.T * rows)
			defer d.Free(y)
			if err := d.MatMul(y, w, 0, x, tc.T); err != nil { // warm-up
				b.Fatal(err)
			}
			d.Sync()
			b.SetBytes(w.Bytes())
			b.ResetTimer()
			for range b.N {
				if err := d.MatMul(y, w, 0, x, tc.T); err != nil {
					b.Fatal(err)
				}
			}
			if err := d.Sync(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			gbs := float64(w.Bytes()) * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(100*gbs/base, "%copy-bw")
		})
	}
}
