package infer

import (
	"sync"

	"github.com/tq-project/tq/gguf"
)

// tokenTile is how many activation rows one weight row is multiplied with before moving on, so
// that a tile of weight rows stays in L1 while the activations stream from L2.
const tokenTile = 32

// gemmTile is the number of weight rows dequantized at once on the GEMM path.
const gemmTile = 64

// linear applies weight l (matrix 0) to T rows of x, writing T rows of l.out into y, and reports
// the input to the observer.
func (s *Session) linear(l *linear, x []float32, T int, y []float32) {
	if s.obs != nil {
		s.obs.Linear(l.name, -1, x[:T*l.in], T, l.in)
	}
	s.matmul(l, 0, x, T, y)
}

func (s *Session) actBuf(n int) []byte {
	if cap(s.act) < n {
		s.act = f32Bytes(make([]float32, (n+3)/4))
	}
	return s.act[:n]
}

// useGemm reports whether a product of weight l over T rows takes the tiled f32 GEMM path:
// always with FullPrecision; for batches of at least gemmMin rows with float weights (f32,
// f16, bf16), or with quantized weights when Options.BatchGEMM is set. Quantized weights
// otherwise keep ggml's integer dot products, whose block-exact sums reproduce llama.cpp's
// rounding far more often than a long float32 GEMM accumulation does.
func (s *Session) useGemm(l *linear, T int) bool {
	o := &s.m.opts
	if o.FullPrecision {
		return true
	}
	g := o.gemmMin
	if g == 0 {
		g = defaultGemmMin
	}
	if g < 0 || T < g {
		return false
	}
	switch l.t {
	case gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16:
		return true
	}
	return o.BatchGEMM
}

// matmul computes y[t][r] = W_e[r] · x[t] for t < T, r < l.out.
//
// Few rows (decode): every activation row is converted once to the weight type's vec_dot type
// (q8_0, q8_K, f16, ...) and each weight row is dotted with it by the integer/float kernels, as
// ggml does. Rows are split across the worker pool in chunks of multiples of 16.
//
// Many rows (prompt batches, see useGemm): the activation rows are rounded to the values their vec_dot
// type represents (unless FullPrecision), weight tiles are dequantized to f32 and multiplied by
// the GEMM kernel. Both paths compute the same products; they differ only in float32
// summation order.
func (s *Session) matmul(l *linear, e int, x []float32, T int, y []float32) {
	if s.useGemm(l, T) {
		s.matmulGemm(l, e, x, T, y)
		return
	}
	m := s.m
	n, out := l.in, l.out
	act := l.k.act
	ab := act.rowBytes(n)
	a := s.actBuf(T * ab)
	if T == 1 {
		act.prep(a, x[:n])
	} else {
		m.pool.run(T, 1, func(_, lo, hi int) {
			for t := lo; t < hi; t++ {
				act.prep(a[t*ab:(t+1)*ab], x[t*n:(t+1)*n])
			}
		})
	}
	dot := l.k.dot
	m.pool.run(out, m.pool.chunkFor(out, 16), func(w, lo, hi int) {
		tmp := m.wscratch[w]
		for t0 := 0; t0 < T; t0 += tokenTile {
			t1 := min(T, t0+tokenTile)
			for r := lo; r < hi; r++ {
				wr := l.row(e, r)
				for t := t0; t < t1; t++ {
					y[t*out+r] = dot(wr, a[t*ab:(t+1)*ab], n, tmp)
				}
			}
		}
	})
}

// tilePool holds dequantized weight tiles for the GEMM path.
var tilePool = sync.Pool{New: func() any { return new([]float32) }}

// roundActs writes into dst the f32 values the T rows of x take after conversion to
// activation type a (unrounded with FullPrecision).
func (s *Session) roundActs(a actType, dst, x []float32, T, n int) {
	if s.m.opts.FullPrecision || a == actF32 {
		copy(dst, x[:T*n])
		return
	}
	s.m.pool.run(T, 1, func(_, lo, hi int) {
		for t := lo; t < hi; t++ {
			a.roundTrip(dst[t*n:(t+1)*n], x[t*n:(t+1)*n])
		}
	})
}

// matmulGemm dequantizes tiles of gemmTile weight rows to f32 and multiplies them with the
// (rounded) f32 activation rows.
func (s *Session) matmulGemm(l *linear, e int, x []float32, T int, y []float32) {
	m := s.m
	n, out := l.in, l.out
	s.xr = grow(s.xr, T*n)
	xr := s.xr
	s.roundActs(l.k.act, xr, x, T, n)
	nt := (out + gemmTile - 1) / gemmTile
	m.pool.run(nt, 1, func(_, lo, hi int) {
		bp := tilePool.Get().(*[]float32)
		if cap(*bp) < gemmTile*n {
			*bp = make([]float32, gemmTile*n)
		}
		buf := (*bp)[:gemmTile*n]
		for ti := lo; ti < hi; ti++ {
			r0 := ti * gemmTile
			r1 := min(out, r0+gemmTile)
			if l.t == gguf.TypeF32 {
				off := (e*l.out + r0) * l.rowBytes
				sgemm(T, r1-r0, n, xr, n, bytesF32(l.data[off:off+(r1-r0)*l.rowBytes]), n, y[r0:], out)
				continue
			}
			for r := r0; r < r1; r++ {
				if err := kDequant(l.t, l.row(e, r), buf[(r-r0)*n:(r-r0+1)*n]); err != nil {
					panic(err) // checked at load
				}
			}
			sgemm(T, r1-r0, n, xr, n, buf, n, y[r0:], out)
		}
		tilePool.Put(bp)
	})
}
