//go:build linux && amd64

package kernels_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/testenv"
	"github.com/tq-project/tq/quant"
	"github.com/tq-project/tq/quant/kernels"
	"golang.org/x/sys/cpu"
)

// q0xRawActs returns n/32 activation blocks with random quants in [−127, 127] (the range
// ggml's quantizers produce) and random finite fp16 d (and s).
func q0xRawActs(r *rand.Rand, c q0xCase, n int) []byte {
	ab := c.actBytes()
	x := aligned(n / 32 * ab)
	off := 2
	if c.q81 {
		off = 4
	}
	for b := 0; b < n/32; b++ {
		q0xPutLE16(x[b*ab:], extHalf(r, 0.02))
		if c.q81 {
			q0xPutLE16(x[b*ab+2:], extHalf(r, 5))
		}
		for j := 0; j < 32; j++ {
			v := int8(r.IntN(255) - 127)
			if b == 0 && j < 8 { // extremes
				v = [...]int8{127, -127, 127, 127, -127, -127, 0, 127}[j]
			}
			x[b*ab+off+j] = byte(v)
		}
	}
	return x
}

// TestQ0xVecDotMatchesLlamaCpp: DotQ5_0Q8_0, DotIQ4_NLQ8_0, DotQ4_1Q8_1 and DotQ5_1Q8_1
// against ggml_vec_dot_*_q8_* of llama.cpp's AVX2 CPU backend, every bit, asm and pure Go,
// on weights from quant.Quantize (normal and Student-t) and raw random bytes, with
// activations from ggml's own quantize_row_q8_0/q8_1 (which our quantizers must reproduce
// byte for byte) and raw random activation blocks.
func TestQ0xVecDotMatchesLlamaCpp(t *testing.T) {
	sym := func(name string) uintptr { return oracleSym(t, name) }
	qrow0, qrow1 := sym("quantize_row_q8_0"), sym("quantize_row_q8_1")
	sizes := []int{32, 64, 96, 288, 1024, 4096, 16384}
	if testing.Short() {
		sizes = []int{32, 96, 1024}
	}
	for _, c := range q0xCases {
		fn := sym(c.fn)
		for _, n := range sizes {
			for _, kind := range []string{"normal", "heavy", "raw"} {
				t.Run(fmt.Sprintf("%s/n=%d/%s", c.name, n, kind), func(t *testing.T) {
					r := extRNG(uint64(n*7) + uint64(len(kind)) + uint64(c.gt)<<32)
					rows := 6
					if n >= 4096 {
						rows = 2
					}
					var w []byte
					if kind == "raw" {
						w = q0xRawWeights(r, c, rows, n)
					} else {
						w = q0xQuantWeights(t, r, c, rows, n, kind == "heavy")
					}
					rowBytes := n / 32 * c.wb
					acts := [][]byte{q0xRawActs(r, c, n)}
					for _, heavy := range []bool{false, true} {
						xf := extFloats(r, n, heavy, 1)
						xf[0] = 0 // a zero among the values
						if n >= 64 {
							clear(xf[32:64]) // an all-zero block (d = s = 0)
						}
						xq := aligned(n / 32 * c.actBytes())
						ours := make([]byte, len(xq))
						if c.q81 {
							ccall(qrow1, uintptr(unsafe.Pointer(&xf[0])), ptr(xq), uintptr(n))
							quant.QuantizeRowQ8_1(ours, xf)
						} else {
							ccall(qrow0, uintptr(unsafe.Pointer(&xf[0])), ptr(xq), uintptr(n))
							kernels.QuantizeRowQ8_0(ours, xf)
						}
						if !bytes.Equal(ours, xq) {
							t.Fatalf("our activation quantizer differs from ggml's (q8_1=%v)", c.q81)
						}
						acts = append(acts, xq)
					}
					for a, xq := range acts {
						for i := 0; i < rows; i++ {
							wr := w[i*rowBytes : (i+1)*rowBytes]
							var want float32
							ccall(fn, uintptr(n), uintptr(unsafe.Pointer(&want)), 0, ptr(wr), 0, ptr(xq), 0, 1)
							if math.IsNaN(float64(want)) || math.IsInf(float64(want), 0) {
								t.Fatalf("ggml returned %v: test data out of range", want)
							}
							for _, pure := range []bool{false, true} {
								kernels.SetPureGo(pure)
								got := c.dot(n, wr, xq)
								kernels.SetPureGo(false)
								if math.Float32bits(got) != math.Float32bits(want) {
									t.Errorf("act %d row %d pure=%v: ours %v (%08x), ggml %v (%08x)", a, i, pure, got, math.Float32bits(got), want, math.Float32bits(want))
								}
							}
						}
					}
				})
			}
		}
	}
}

// q0xComputeParams mirrors struct ggml_compute_params (ggml-cpu-impl.h); tinyBLAS_Q0_AVX
// reads only ith and nth.
type q0xComputeParams struct {
	ith, nth   int32
	wsize      uintptr
	wdata      unsafe.Pointer
	threadpool unsafe.Pointer
	useRef     bool
}

// TestQ0xTinyBLASMatchesLlamaCpp calls llama.cpp's llamafile_sgemm (tinyBLAS_Q0_AVX, ggml's
// matrix product for ≥ 2 tokens on Q8_0, Q5_0 and non-repacked Q4_0 and IQ4_NL weights) and
// requires every element to equal the Dot kernel (tinyBLAS's order is vec_dot's) or DotIQ4_NLQ8_0Tiny
// (IQ4_NL: one accumulator, unlike vec_dot's two), bit for bit, asm and pure Go. Shapes cover
// tinyBLAS's 4×N, M×4 and generic tiles.
func TestQ0xTinyBLASMatchesLlamaCpp(t *testing.T) {
	sgemm, qrow0 := oracleSym(t, "llamafile_sgemm"), oracleSym(t, "quantize_row_q8_0")
	const typeF32, typeQ8_0 = 0, 8
	cases := []struct {
		c   q0xCase
		dot func(n int, w, x []byte) float32
	}{
		{q0xCases[0], kernels.DotQ5_0Q8_0},
		{q0xCases[1], kernels.DotIQ4_NLQ8_0Tiny},
		// Q8_0 and Q4_0 (not repacked): tinyBLAS's per-element order is vec_dot's too, which
		// is what lets infer use MatMulQ0 (bit-identical to the Dot kernels) for batches.
		{q0xCase{"Q8_0", gguf.TypeQ8_0, kernels.BlockBytesQ8_0, false, "ggml_vec_dot_q8_0_q8_0", kernels.DotQ8_0Q8_0}, kernels.DotQ8_0Q8_0},
		{q0xCase{"Q4_0", gguf.TypeQ4_0, kernels.BlockBytesQ4_0, false, "ggml_vec_dot_q4_0_q8_0", kernels.DotQ4_0Q8_0}, kernels.DotQ4_0Q8_0},
	}
	differ := 0
	for _, tc := range cases {
		c := tc.c
		for _, shape := range [][3]int{{8, 2, 96}, {4, 4, 1024}, {7, 5, 4096}, {3, 3, 32}, {6, 9, 288}} {
			m, nt, n := shape[0], shape[1], shape[2]
			for _, kind := range []string{"heavy", "raw"} {
				t.Run(fmt.Sprintf("%s/%dx%dx%d/%s", c.name, m, nt, n, kind), func(t *testing.T) {
					r := extRNG(uint64(m*1000+nt*10+n) + uint64(len(kind)) + uint64(c.gt)<<32)
					var w []byte
					if kind == "raw" {
						w = q0xRawWeights(r, c, m, n)
					} else {
						w = q0xQuantWeights(t, r, c, m, n, true)
					}
					nb := n / 32
					wa := aligned(len(w))
					copy(wa, w)
					xq := aligned(nt * nb * kernels.BlockBytesQ8_0)
					for j := 0; j < nt; j++ {
						xf := extFloats(r, n, j%2 == 1, 1)
						ccall(qrow0, uintptr(unsafe.Pointer(&xf[0])), ptr(xq[j*nb*kernels.BlockBytesQ8_0:]), uintptr(n))
					}
					out := make([]float32, m*nt)
					params := q0xComputeParams{ith: 0, nth: 1}
					ret, _, _ := purego.SyscallN(sgemm, uintptr(unsafe.Pointer(&params)), uintptr(m), uintptr(nt), uintptr(nb),
						ptr(wa), uintptr(nb), ptr(xq), uintptr(nb), uintptr(unsafe.Pointer(&out[0])), uintptr(m),
						uintptr(c.gt), typeQ8_0, typeF32)
					if ret&0xff == 0 {
						t.Fatalf("llamafile_sgemm declined %s×Q8_0", c.name)
					}
					for j := 0; j < nt; j++ {
						xr := xq[j*nb*kernels.BlockBytesQ8_0 : (j+1)*nb*kernels.BlockBytesQ8_0]
						for i := 0; i < m; i++ {
							wr := w[i*nb*c.wb : (i+1)*nb*c.wb]
							want := out[j*m+i]
							for _, pure := range []bool{false, true} {
								kernels.SetPureGo(pure)
								got := tc.dot(n, wr, xr)
								kernels.SetPureGo(false)
								if math.Float32bits(got) != math.Float32bits(want) {
									t.Errorf("row %d token %d pure=%v: ours %v (%08x), tinyBLAS %v (%08x)", i, j, pure, got, math.Float32bits(got), want, math.Float32bits(want))
								}
							}
							if c.gt == gguf.TypeIQ4_NL && kernels.DotIQ4_NLQ8_0(n, wr, xr) != want {
								differ++
							}
						}
					}
				})
			}
		}
	}
	t.Logf("IQ4_NL: vec_dot and tinyBLAS orders differ on %d elements", differ)
}

// BenchmarkQ0xVsGGML times ggml's own vec_dot (through purego, whose call overhead is
// included) against ours on one row of n = 16384:
//
//	go test ./quant/kernels -run '^$' -bench Q0xVsGGML
func BenchmarkQ0xVsGGML(b *testing.B) {
	if !kernels.HasAsm() || !cpu.X86.HasBMI2 {
		b.Skip("this CPU cannot run llama.cpp's haswell CPU variant")
	}
	lib := filepath.Join(testenv.RepoRoot(b), "testdata", "llamacpp", "node_modules", "@node-llama-cpp",
		"linux-x64", "bins", "linux-x64", "libggml-cpu-haswell.so")
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		b.Skip("llama.cpp CPU library not available: ", err)
	}
	const n = 16384
	for _, c := range q0xCases {
		fn, err := purego.Dlsym(h, c.fn)
		if err != nil {
			b.Fatal(err)
		}
		r := extRNG(uint64(c.gt) + 99)
		w := q0xQuantWeights(b, r, c, 1, n, false)
		xf := extFloats(r, n, false, 1)
		xq := aligned(n / 32 * c.actBytes())
		if c.q81 {
			quant.QuantizeRowQ8_1(xq, xf)
		} else {
			kernels.QuantizeRowQ8_0(xq, xf)
		}
		b.Run(c.name+"/ggml", func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			var s float32
			for i := 0; i < b.N; i++ {
				ccall(fn, uintptr(n), uintptr(unsafe.Pointer(&s)), 0, ptr(w), 0, ptr(xq), 0, 1)
			}
			q0xSink += s
		})
		b.Run(c.name+"/tq", func(b *testing.B) {
			b.SetBytes(int64(len(w)))
			for i := 0; i < b.N; i++ {
				q0xSink += c.dot(n, w, xq)
			}
		})
	}
}
