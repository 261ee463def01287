package cuda

import (
	"testing"
)

// BenchmarkHostLaunch measures the host side of one operation (Device.Add of 256 floats): the
// device lock, making the context current, argument packing and the purego call into the
// driver. It runs on the emulator with TQ_EMU_SKIP_KERNELS=1, whose cuLaunchKernel validates the
// launch and returns, so the figure is tq's own cost per launch; a real driver adds its
// cuLaunchKernel time. BenchmarkHostLaunch/graph replays 64 recorded launches per iteration
// with one Graph.Launch (reported per launch). The emulator reads TQ_EMU_SKIP_KERNELS at its
// first launch in the process: run the benchmark alone (go test -run '^$' -bench HostLaunch),
// or earlier tests' launches make it run the kernels too.
func BenchmarkHostLaunch(b *testing.B) {
	if !Available() {
		b.Skip("CUDA is not supported on this platform")
	}
	lib := emulatorLibrary(b)
	b.Setenv("TQ_EMU_SKIP_KERNELS", "1") // read once per process by the library
	d, err := Open(Options{Library: lib})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	x, err := d.Alloc(256)
	if err != nil {
		b.Fatal(err)
	}
	y, _ := d.Alloc(256)
	b.Run("eager", func(b *testing.B) {
		for b.Loop() {
			if err := d.Add(y, x, 256); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("graph", func(b *testing.B) {
		if err := d.BeginCapture(); err != nil {
			b.Fatal(err)
		}
		for range 64 {
			if err := d.Add(y, x, 256); err != nil {
				b.Fatal(err)
			}
		}
		g, err := d.EndCapture()
		if err != nil {
			b.Fatal(err)
		}
		defer g.Destroy()
		for b.Loop() {
			if err := g.Launch(1); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/64, "ns/launch")
	})
}
