package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tq-project/tq/gguf"
)

// synthetic jobs: value(r, c) = r*1000 + c, F32 output; failAt / delay injected into reads.
func synthJobs(n int, rows, cols int64, failAt int64, delay time.Duration) []*job {
	var jobs []*job
	var reads atomic.Int64
	for k := 0; k < n; k++ {
		k := k
		jobs = append(jobs, &job{name: fmt.Sprintf("t%d.weight", k), shape: []int64{cols, rows}, rows: rows, cols: cols,
			rowsPerMatrix: rows, typ: gguf.TypeF32,
			read: func(r0, nr int64, dst []float32) error {
				if c := reads.Add(1); failAt > 0 && c == failAt {
					return errors.New("injected read failure")
				}
				if delay > 0 {
					time.Sleep(time.Duration(rand.Int64N(int64(delay))))
				}
				for i := int64(0); i < nr*cols; i++ {
					dst[i] = float32(int64(k)*1e6 + (r0+i/cols)*1000 + i%cols)
				}
				return nil
			}})
	}
	return jobs
}

func runSynth(t *testing.T, ctx context.Context, out string, jobs []*job, chunk int64, progress func(int64)) error {
	t.Helper()
	w, err := gguf.Create(out, gguf.WriterOptions{NoManifest: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if err := w.AddTensor(j.name, []uint64{uint64(j.cols), uint64(j.rows)}, j.typ); err != nil {
			t.Fatal(err)
		}
	}
	err = runEngine(ctx, w, jobs, engineOptions{threads: 3, chunkElems: chunk, progress: progress})
	if err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}

// The engine writes chunks in order whatever the completion order of its workers.
func TestEngineOrder(t *testing.T) {
	out := filepath.Join(t.TempDir(), "e.gguf")
	jobs := synthJobs(5, 37, 64, 0, time.Millisecond)
	if err := runSynth(t, context.Background(), out, jobs, 64*3, nil); err != nil {
		t.Fatal(err)
	}
	m, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for k := 0; k < 5; k++ {
		b, _ := m.TensorData(fmt.Sprintf("t%d.weight", k))
		for i := 0; i < 37*64; i++ {
			got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			want := float32(int64(k)*1e6 + int64(i/64)*1000 + int64(i%64))
			if got != want {
				t.Fatalf("t%d[%d] = %v, want %v", k, i, got, want)
			}
		}
	}
}

// Failures and cancellation at any point end the run promptly with an error and no output.
func TestEngineErrorsNeverHang(t *testing.T) {
	for trial := 0; trial < 40; trial++ {
		dir := t.TempDir()
		out := filepath.Join(dir, "e.gguf")
		ctx, cancel := context.WithCancel(context.Background())
		failAt := int64(0)
		cancelAt := int64(0)
		if trial%2 == 0 {
			failAt = int64(1 + trial%25)
		} else {
			cancelAt = int64(1 + trial%25)
		}
		var calls atomic.Int64
		jobs := synthJobs(6, 20, 32, failAt, 200*time.Microsecond)
		done := make(chan error, 1)
		go func() {
			done <- runSynth(t, ctx, out, jobs, 32*2, func(int64) {
				if calls.Add(1) == cancelAt {
					cancel()
				}
			})
		}()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("trial %d: no error (failAt %d cancelAt %d)", trial, failAt, cancelAt)
			}
			if f := dirFiles(t, dir); len(f) != 0 {
				t.Fatalf("trial %d: files left %v", trial, f)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("trial %d: engine hung (failAt %d cancelAt %d)", trial, failAt, cancelAt)
		}
		cancel()
	}
}

// The engine drops a tensor's factorised Hessians once the tensor is written: a conversion's
// jobs live until its end, so otherwise every tensor's Hessians (n² float64 and more each)
// stayed in memory and a calibrated conversion's peak grew with the model (a 1 B model took
// 22 GB). While a later tensor is read, the earlier ones must already hold none.
func TestEngineDropsHessians(t *testing.T) {
	const rows, cols, njobs = 24, 256, 16
	src := &fakeHessians{grams: map[int][]float64{cols: spdGram(cols, 3)}}
	jobs := synthJobs(njobs, rows, cols, 0, 0)
	var held atomic.Int64 // Hessians still cached by earlier jobs, seen while reading a later one
	for k, j := range jobs {
		j.name = fmt.Sprintf("blk.%d.attn_q.weight", k)
		j.typ = gguf.TypeQ4_K
		attachHessian(j, src, nil)
		if j.hessians == nil {
			t.Fatal("no Hessian cache attached")
		}
		read := j.read
		j.read = func(r0, n int64, dst []float32) error {
			// runSynth's 3 threads keep at most 8 items (here one per tensor) in flight, and a
			// tensor counts as written when the writer takes the next one's first item: those
			// more than 10 back are written by now
			for _, e := range jobs[:max(0, k-10)] {
				e.hessians.mu.Lock()
				held.Add(int64(len(e.hessians.hs)))
				e.hessians.mu.Unlock()
			}
			return read(r0, n, dst)
		}
	}
	out := filepath.Join(t.TempDir(), "h.gguf")
	if err := runSynth(t, context.Background(), out, jobs, rows*cols, nil); err != nil {
		t.Fatal(err)
	}
	if src.calls.Load() < njobs {
		t.Fatalf("%d Gram calls for %d tensors: the Hessians were not used", src.calls.Load(), njobs)
	}
	for _, j := range jobs {
		if n := len(j.hessians.hs); n != 0 {
			t.Errorf("%s still caches %d Hessians after the run", j.name, n)
		}
	}
	if n := held.Load(); n != 0 {
		t.Errorf("%d Hessians of written tensors were still cached while later ones were read", n)
	}
}
