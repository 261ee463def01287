package convert

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
)

// job is one output tensor for the engine: where its rows come from and how to encode them.
type job struct {
	name          string
	shape         []int64 // ggml order
	rows, cols    int64
	rowsPerMatrix int64
	typ           gguf.GGMLType
	mode          quant.Mode
	// read fills dst[:n*cols] with rows [r0, r0+n) as float32.
	read func(r0, n int64, dst []float32) error
	// raw, when set, returns the bytes of rows [r0, r0+n) already in typ (copied through).
	raw func(r0, n int64) ([]byte, error)
	// importance returns the weights for matrix m (nil: none).
	importance func(m int64) ([]float32, error)
	// hessian returns the input Gram matrix of matrix m (nil: none), for the
	// error-compensating search.
	hessian func(m int64) (*quant.Hessian, error)
	// hessians is the cache behind hessian when it comes from attachHessian.
	hessians *hessianCache
	// headHessian, when set, returns the matrix of rows [r0, r0+n) of a matrix when they
	// have their own (Gated DeltaNet value heads, attachHeads); nil: hessian's serves.
	headHessian func(r0, n int64) (*quant.Hessian, error)
	// chunkRows, when > 0, is the rows per work item (else the engine's default); items start
	// at multiples of it within each matrix.
	chunkRows int64
	// release is called once the tensor is fully written (unmaps finished shards).
	release func()
}

// finished is called once the tensor is fully written: it unmaps finished shards (release)
// and drops the job's factorised Hessians, which no item of it will ask for again (the jobs
// of a conversion live until its end, so a Hessian kept here would stay for every tensor).
func (j *job) finished() {
	if j.release != nil {
		j.release()
	}
	if j.hessians != nil {
		j.hessians.drop()
	}
}

func (j *job) rowBytes() (int64, error) { return j.typ.RowBytes(j.cols) }

func (j *job) nbytes() (int64, error) {
	rb, err := j.rowBytes()
	if err != nil {
		return 0, fmt.Errorf("tensor %s: %w", j.name, err)
	}
	return rb * j.rows, nil
}

// engineOptions tunes the engine.
type engineOptions struct {
	threads int
	// chunkElems is the target number of float32 elements per work item.
	chunkElems int64
	// progress is called from the writing goroutine with bytes written so far.
	progress func(done int64)
}

type workItem struct {
	j      *job
	r0, n  int64
	matrix int64
	done   chan struct{}
	out    []byte
	err    error
	buf    *[]float32
}

// runEngine encodes and writes every job in order: work items (row chunks that never cross a
// matrix boundary) are encoded by a pool of goroutines and written in order; at most
// 2*threads+2 chunks are in flight, which bounds memory.
func runEngine(ctx context.Context, w *gguf.Writer, jobs []*job, opt engineOptions) error {
	threads := opt.threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	inflight := 2*threads + 2
	if opt.chunkElems <= 0 {
		// at most ~256 MiB of float32 chunks in flight whatever the core count
		opt.chunkElems = min(4<<20, max(64<<10, (256<<20)/4/int64(inflight)))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	order := make(chan *workItem, inflight)
	work := make(chan *workItem, inflight)
	pool := sync.Pool{}
	var failed atomic.Bool

	// producer
	go func() {
		defer close(order)
		defer close(work)
		for _, j := range jobs {
			per := j.rowsPerMatrix
			if per <= 0 || j.rows%per != 0 {
				per = j.rows
			}
			chunk := max(1, opt.chunkElems/max(1, j.cols))
			if j.chunkRows > 0 {
				chunk = j.chunkRows
			}
			for r := int64(0); r < j.rows; {
				m := r / per
				end := min(r+chunk, (m+1)*per, j.rows)
				it := &workItem{j: j, r0: r, n: end - r, matrix: m, done: make(chan struct{})}
				select {
				case order <- it:
				case <-ctx.Done():
					return
				}
				select {
				case work <- it:
				case <-ctx.Done():
					// it is already queued for the writer: complete it here, since no
					// worker will ever see it
					it.err = context.Cause(ctx)
					close(it.done)
					return
				}
				r = end
			}
		}
	}()

	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				if failed.Load() || ctx.Err() != nil {
					it.err = context.Cause(ctx)
					if it.err == nil {
						it.err = errors.New("aborted")
					}
					close(it.done)
					continue
				}
				it.err = encodeItem(it, &pool)
				close(it.done)
			}
		}()
	}

	var (
		err     error
		cur     *job
		tw      io.WriteCloser
		written int64
	)
	for it := range order {
		select {
		case <-it.done:
		case <-ctx.Done():
			<-it.done
		}
		if err == nil && it.err != nil {
			err = it.err
		}
		if err == nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil {
			failed.Store(true)
			cancel()
			recycle(it, &pool)
			continue
		}
		if it.j != cur {
			if tw != nil {
				if e := tw.Close(); e != nil {
					err = e
				}
				cur.finished()
			}
			cur = it.j
			if err == nil {
				tw, err = w.TensorWriter(cur.name)
			}
			if err != nil {
				failed.Store(true)
				cancel()
				recycle(it, &pool)
				continue
			}
		}
		if _, e := tw.Write(it.out); e != nil {
			err = fmt.Errorf("writing tensor %s: %w", it.j.name, e)
			failed.Store(true)
			cancel()
		}
		written += int64(len(it.out))
		recycle(it, &pool)
		if opt.progress != nil && err == nil {
			opt.progress(written)
		}
	}
	wg.Wait()
	if err == nil && tw != nil {
		err = tw.Close()
		cur.finished()
	}
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return err
}

func recycle(it *workItem, pool *sync.Pool) {
	if it.buf != nil {
		pool.Put(it.buf)
		it.buf = nil
	}
	it.out = nil
}

func encodeItem(it *workItem, pool *sync.Pool) error {
	j := it.j
	rb, err := j.rowBytes()
	if err != nil {
		return fmt.Errorf("tensor %s: %w", j.name, err)
	}
	if j.raw != nil {
		b, err := j.raw(it.r0, it.n)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", j.name, err)
		}
		if int64(len(b)) != rb*it.n {
			return fmt.Errorf("tensor %s: source gave %d bytes for %d rows, want %d", j.name, len(b), it.n, rb*it.n)
		}
		it.out = b
		return nil
	}
	ne := it.n * j.cols
	var src []float32
	if p, _ := pool.Get().(*[]float32); p != nil && int64(cap(*p)) >= ne {
		it.buf = p
		src = (*p)[:ne]
	} else {
		s := make([]float32, ne)
		it.buf = &s
		src = s
	}
	if err := j.read(it.r0, it.n, src); err != nil {
		return err
	}
	out := make([]byte, rb*it.n)
	switch j.typ {
	case gguf.TypeF32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	case gguf.TypeF16:
		for i, v := range src {
			h := quant.FP32ToFP16(v)
			if h&0x7c00 == 0x7c00 {
				return fmt.Errorf("tensor %s: value %g at row %d column %d does not fit F16 (max 65504); use bf16 or f32 for it",
					j.name, v, it.r0+int64(i)/j.cols, int64(i)%j.cols)
			}
			binary.LittleEndian.PutUint16(out[2*i:], h)
		}
	case gguf.TypeBF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(out[2*i:], quant.FP32ToBF16(v))
		}
	default:
		var imp []float32
		if j.importance != nil {
			imp, err = j.importance(it.matrix)
			if err != nil {
				return err
			}
		}
		var h *quant.Hessian
		if j.headHessian != nil {
			per := max(1, j.rowsPerMatrix)
			if h, err = j.headHessian(it.r0-it.matrix*per, it.n); err != nil {
				return err
			}
		}
		if h == nil && j.hessian != nil {
			if h, err = j.hessian(it.matrix); err != nil {
				return err
			}
		}
		if h != nil {
			gopts := &quant.GPTQOptions{Threads: 1, TensorName: j.name, Refine: true, ActOrder: true}
			if err := quant.QuantizeGPTQ(j.typ, out, src, int(it.n), int(j.cols), h, gopts); err != nil {
				return err
			}
			break
		}
		opts := &quant.Options{Importance: imp, Mode: j.mode, Threads: 1, TensorName: j.name}
		if err := quant.Quantize(j.typ, out, src, int(it.n), int(j.cols), opts); err != nil {
			return err
		}
	}
	it.out = out
	return nil
}
