package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/tq-project/tq/gguf"
)

// graphStep queues one decode step of a toy attention layer at position pos: RoPE of the query
// and key rows, KVStore, Attention and a residual Add into acc.
func graphStep(d *Device, kv *KVCache, q, k, v, qr, kr, out, acc Buffer, pos int, rp *Rope) error {
	const nh, hd = 2, 32
	for _, f := range []func() error{
		func() error { return d.Copy(qr, q) },
		func() error { return d.Copy(kr, k) },
	} {
		if err := f(); err != nil {
			return err
		}
	}
	return stepKernels(d, kv, qr, kr, v, out, acc, pos, rp, nh, hd)
}

// stepKernels is the part of graphStep that a graph records (kernels only).
func stepKernels(d *Device, kv *KVCache, qr, kr, v, out, acc Buffer, pos int, rp *Rope, nh, hd int) error {
	for _, f := range []func() error{
		func() error { return d.RoPE(qr, 1, nh, hd, pos, rp) },
		func() error { return d.RoPE(kr, 1, nh, hd, pos, rp) },
		func() error { return d.KVStore(kv, 0, pos, 1, kr, v) },
		func() error { return d.Attention(out, qr, kv, 0, pos, 1, nh, nh, hd) },
		func() error { return d.Add(acc, out, nh*hd) },
	} {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// TestEmulatedGraph records the kernels of one decode step (RoPE, KVStore, Attention, Add) at
// position 1 and replays them at positions 1..6: the attention outputs and the accumulated sum
// must be bit-identical to the same kernels launched one by one, recording must run nothing,
// operations that act at once must fail while recording, another goroutine's work must wait for
// the end of the recording, and destroying the graph must return its memory.
func TestEmulatedGraph(t *testing.T) {
	d := openEmulator(t)
	defer d.Close()
	if !d.GraphsSupported() {
		t.Fatal("the emulator exports the graph functions")
	}
	const nh, hd, ctx, steps = 2, 32, 8, 7
	rp := &Rope{NRot: hd, ThetaScale: float32(math.Pow(10000, -2.0/hd)), FreqScale: 1, AttnFactor: 1}
	rng := rand.New(rand.NewPCG(5, 6))
	rows := func() []float32 {
		x := make([]float32, nh*hd)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	type input struct{ q, k, v []float32 }
	in := make([]input, steps)
	for i := range in {
		in[i] = input{rows(), rows(), rows()}
	}
	alloc := func() Buffer {
		b, err := d.Alloc(nh * hd)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write := func(b Buffer, x []float32) {
		if err := d.Write(b, x); err != nil {
			t.Fatal(err)
		}
	}
	read := func(b Buffer) []float32 {
		x := make([]float32, nh*hd)
		if err := d.Read(x, b); err != nil {
			t.Fatal(err)
		}
		return x
	}
	run := func(useGraph bool) (outs [][]float32, acc []float32) {
		kv, err := d.NewKVCache(1, ctx, nh*hd, gguf.TypeQ8_0, gguf.TypeF16)
		if err != nil {
			t.Fatal(err)
		}
		defer d.FreeKVCache(kv)
		q, k, v, qr, kr, out, accB := alloc(), alloc(), alloc(), alloc(), alloc(), alloc(), alloc()
		write(accB, make([]float32, nh*hd))
		var g *Graph
		for pos := range steps {
			write(q, in[pos].q)
			write(k, in[pos].k)
			write(v, in[pos].v)
			if !useGraph || pos == 0 {
				if err := graphStep(d, kv, q, k, v, qr, kr, out, accB, pos, rp); err != nil {
					t.Fatal(err)
				}
				outs = append(outs, read(out))
				continue
			}
			if err := d.Copy(qr, q); err != nil {
				t.Fatal(err)
			}
			if err := d.Copy(kr, k); err != nil {
				t.Fatal(err)
			}
			if g == nil {
				before := read(out)
				if err := d.BeginCapture(); err != nil {
					t.Fatal(err)
				}
				// Copies and Sync act at once: refused while recording.
				for _, err := range []error{d.Write(q, in[pos].q), d.Copy(qr, q), d.Sync(), d.Free(q),
					d.Read(make([]float32, 1), q)} {
					if !errors.Is(err, ErrCapturing) {
						t.Errorf("while recording: %v, want ErrCapturing", err)
					}
				}
				// Another goroutine's work waits for the end of the recording and is not recorded.
				var wg sync.WaitGroup
				other := alloc()
				wg.Go(func() {
					if err := d.Zero(other, nh*hd); err != nil {
						t.Error(err)
					}
				})
				if err := stepKernels(d, kv, qr, kr, v, out, accB, pos, rp, nh, hd); err != nil {
					t.Fatal(err)
				}
				if g, err = d.EndCapture(); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
				d.Free(other)
				if g.Nodes() != 5 {
					t.Fatalf("graph of %d nodes, want 5", g.Nodes())
				}
				if got := read(out); !equalBits(got, before) {
					t.Fatal("recording ran the kernels")
				}
			}
			if err := g.Launch(pos); err != nil {
				t.Fatal(err)
			}
			outs = append(outs, read(out))
		}
		acc = read(accB)
		if g != nil {
			if err := g.Launch(ctx); err == nil || !strings.Contains(err.Error(), "accept 0..7") {
				t.Errorf("launch past the cache: %v", err)
			}
			if err := g.Destroy(); err != nil {
				t.Fatal(err)
			}
			if err := g.Launch(1); err == nil {
				t.Error("launch of a destroyed graph succeeded")
			}
			if err := g.Destroy(); err != nil {
				t.Errorf("second Destroy: %v", err)
			}
		}
		for _, b := range []Buffer{q, k, v, qr, kr, out, accB} {
			d.Free(b)
		}
		return outs, acc
	}
	eagerOut, eagerAcc := run(false)
	free0, _, _ := d.MemInfo() // after the device's own attention scratch was allocated
	graphOut, graphAcc := run(true)
	for pos := range steps {
		if !equalBits(eagerOut[pos], graphOut[pos]) {
			t.Fatalf("position %d: graph output differs from the eager launches", pos)
		}
	}
	if !equalBits(eagerAcc, graphAcc) {
		t.Fatal("accumulated outputs differ")
	}
	if free, _, _ := d.MemInfo(); free != free0 {
		t.Fatalf("%d bytes free after the runs, %d before: the graph leaked", free, free0)
	}
	// An empty recording is an error and leaves nothing behind; so is an aborted one.
	if err := d.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.EndCapture(); err == nil {
		t.Error("EndCapture of an empty recording succeeded")
	}
	if err := d.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	d.AbortCapture()
	if free, _, _ := d.MemInfo(); free != free0 {
		t.Fatalf("%d bytes free after empty and aborted recordings, %d before", free, free0)
	}
}

func equalBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}
