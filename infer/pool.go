package infer

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// pool is a persistent set of worker goroutines. run splits [0,n) into chunks that workers take
// from a shared counter; the calling goroutine works too. A pool runs one job at a time (run is
// serialised by a mutex), so several sessions may share a model's pool safely.
//
// A decode step is a chain of short jobs (one per projection, tens of microseconds each) with
// a little serial work between them, so waking a parked goroutine for every job (a futex
// wake-up, several microseconds, as long as a small job) would cost a large share of the
// step. As ggml's thread pool does, a worker that has finished a job therefore spins on the
// job counter for a while (spinFor) before it parks, and the caller spins for the workers'
// completion; both yield the processor while spinning, so an oversubscribed machine still
// makes progress.
type pool struct {
	n       int
	mu      sync.Mutex
	workers []*poolWorker
	gen     atomic.Uint64 // incremented to publish each job
	j       job
	once    sync.Once
	quit    chan struct{}
	exited  sync.WaitGroup // the workers
}

type poolWorker struct {
	wake   chan struct{} // a token after a job was published while the worker was parked
	parked atomic.Bool
}

type job struct {
	fn      func(worker, lo, hi int)
	n       int
	chunk   int
	next    atomic.Int64
	pending atomic.Int32 // workers that have not finished the current job
}

// spinFor is how long an idle worker polls for the next job before it parks.
const spinFor = 50 * time.Microsecond

func newPool(threads int) *pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p := &pool{n: threads, quit: make(chan struct{})}
	p.workers = make([]*poolWorker, threads-1)
	for i := range p.workers {
		w := &poolWorker{wake: make(chan struct{}, 1)}
		p.workers[i] = w
		p.exited.Add(1)
		go p.worker(i+1, w)
	}
	return p
}

func (p *pool) worker(id int, w *poolWorker) {
	defer p.exited.Done()
	var seen uint64
	for {
		g := p.gen.Load()
		if g == seen {
			if g = p.await(w, seen); g == 0 {
				return
			}
		}
		seen = g
		p.j.work(id)
		p.j.pending.Add(-1)
	}
}

// await returns the next published job generation after seen, spinning for spinFor and then
// parking until run wakes it; 0 when the pool is closed.
func (p *pool) await(w *poolWorker, seen uint64) uint64 {
	start := time.Now()
	for i := 1; ; i++ {
		if g := p.gen.Load(); g != seen {
			return g
		}
		if i%64 == 0 {
			if time.Since(start) > spinFor {
				break
			}
			runtime.Gosched()
		}
	}
	for {
		w.parked.Store(true)
		if g := p.gen.Load(); g != seen { // published before run could see parked
			w.parked.Store(false)
			return g
		}
		select {
		case <-w.wake:
		case <-p.quit:
			return 0
		}
		w.parked.Store(false)
		if g := p.gen.Load(); g != seen {
			return g
		}
		// a stale token (the job was taken while spinning): park again
	}
}

func (j *job) work(id int) {
	for {
		lo := int(j.next.Add(int64(j.chunk))) - j.chunk
		if lo >= j.n {
			return
		}
		hi := min(lo+j.chunk, j.n)
		j.fn(id, lo, hi)
	}
}

// threads is the number of goroutines (the caller included) that can run a job.
func (p *pool) threads() int { return p.n }

// run calls fn(worker, lo, hi) over [0,n) in chunks of the given size; worker is in
// [0, p.threads()) and identifies per-worker scratch space.
func (p *pool) run(n, chunk int, fn func(worker, lo, hi int)) {
	if n <= 0 {
		return
	}
	if chunk < 1 {
		chunk = 1
	}
	nChunks := (n + chunk - 1) / chunk
	if p.n == 1 || nChunks == 1 {
		for lo := 0; lo < n; lo += chunk {
			fn(0, lo, min(lo+chunk, n))
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	j := &p.j
	j.fn, j.n, j.chunk = fn, n, chunk
	j.next.Store(0)
	j.pending.Store(int32(len(p.workers)))
	p.gen.Add(1)
	for _, w := range p.workers {
		if w.parked.Load() {
			select {
			case w.wake <- struct{}{}:
			default: // a token is already waiting
			}
		}
	}
	j.work(0)
	for i := 1; j.pending.Load() != 0; i++ {
		if i%64 == 0 {
			runtime.Gosched()
		}
	}
	j.fn = nil
}

// chunkFor picks a chunk size that is a multiple of align, gives every thread several chunks
// for load balance, and is at least align.
func (p *pool) chunkFor(n, align int) int {
	if align < 1 {
		align = 1
	}
	c := n / (p.n * 4)
	c = (c / align) * align
	if c < align {
		c = align
	}
	return c
}

// close stops the workers and waits until they have exited (a spinning worker notices
// within spinFor). The pool must not be used afterwards.
func (p *pool) close() {
	p.once.Do(func() { close(p.quit) })
	p.exited.Wait()
}
