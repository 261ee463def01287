package infer

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// pool is a persistent set of worker goroutines. run splits [0,n) into chunks that workers take
// from a shared counter; the calling goroutine works too. A pool runs one job at a time (run is
// serialised by a mutex), so several sessions may share a model's pool safely.
type pool struct {
	n    int
	mu   sync.Mutex
	wake []chan *job
	j    job
	once sync.Once
	quit chan struct{}
}

type job struct {
	fn    func(worker, lo, hi int)
	n     int
	chunk int
	next  atomic.Int64
	wg    sync.WaitGroup
}

func newPool(threads int) *pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p := &pool{n: threads, quit: make(chan struct{})}
	p.wake = make([]chan *job, threads-1)
	for i := range p.wake {
		c := make(chan *job, 1)
		p.wake[i] = c
		go p.worker(i+1, c)
	}
	return p
}

func (p *pool) worker(id int, c chan *job) {
	for {
		select {
		case j := <-c:
			j.work(id)
			j.wg.Done()
		case <-p.quit:
			return
		}
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
	nw := min(p.n, nChunks)
	j.wg.Add(nw - 1)
	for i := 0; i < nw-1; i++ {
		p.wake[i] <- j
	}
	j.work(0)
	j.wg.Wait()
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

// close stops the workers. The pool must not be used afterwards.
func (p *pool) close() { p.once.Do(func() { close(p.quit) }) }
