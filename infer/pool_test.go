package infer

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolRunsEveryChunkOnce: every index of every job is processed exactly once, by
// worker ids in range, over jobs of random sizes and chunkings issued back to back (workers
// still spinning), after pauses longer than the spin (workers parked), and from several
// goroutines at once (run serialises them).
func TestPoolRunsEveryChunkOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := newPool(threads)
		r := rand.New(rand.NewPCG(uint64(threads), 7))
		check := func(n, chunk int) {
			hits := make([]atomic.Int32, n)
			var bad atomic.Bool
			p.run(n, chunk, func(w, lo, hi int) {
				if w < 0 || w >= p.threads() || lo < 0 || hi > n || lo >= hi || (chunk > 0 && hi-lo > chunk) {
					bad.Store(true)
					return
				}
				for i := lo; i < hi; i++ {
					hits[i].Add(1)
				}
			})
			if bad.Load() {
				t.Fatalf("threads %d: job n=%d chunk=%d got a bad range or worker id", threads, n, chunk)
			}
			for i := range hits {
				if c := hits[i].Load(); c != 1 {
					t.Fatalf("threads %d: job n=%d chunk=%d: index %d processed %d times", threads, n, chunk, i, c)
				}
			}
		}
		for i := 0; i < 300; i++ {
			check(r.IntN(200), r.IntN(20))
		}
		for i := 0; i < 3; i++ {
			time.Sleep(2 * spinFor)
			check(50+r.IntN(100), 1)
		}
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					check(64, 3)
				}
			}()
		}
		wg.Wait()
		p.close()
	}
}

// TestPoolCloseStopsWorkers: close returns once the workers, parked or spinning, have exited.
func TestPoolCloseStopsWorkers(t *testing.T) {
	for _, pause := range []time.Duration{0, 3 * spinFor} {
		p := newPool(4)
		p.run(100, 1, func(_, _, _ int) {})
		time.Sleep(pause)
		done := make(chan struct{})
		go func() {
			p.close()
			p.close() // idempotent
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("close did not return within 5 s (pause %v)", pause)
		}
	}
}
