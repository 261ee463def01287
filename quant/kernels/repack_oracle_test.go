//go:build linux && amd64

package kernels_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
	"golang.org/x/sys/cpu"

	"github.com/tq-project/tq/internal/testenv"
	"github.com/tq-project/tq/quant/kernels"
)

// The oracle: llama.cpp's own AVX2 CPU backend (node-llama-cpp's prebuilt
// libggml-cpu-haswell.so, the variant the parity tests run against), loaded with purego. The
// test repacks weights into ggml's 8-row interleaved layouts itself (written from the layout
// description, not from ggml code), calls ggml_gemv_*_8x8 / ggml_gemm_*_8x8 and requires our
// repack-order kernels to reproduce every output bit for bit.

type ggmlOracle struct {
	h            uintptr // dlopen handle of the library
	gemv, gemm   map[kernels.Type]uintptr
	quantMat     map[kernels.Type]uintptr // ggml_quantize_mat_t<8, Q8_0 / Q8_K>
	quantRowQ8K  uintptr
	quantRowQ8_0 uintptr
}

var (
	oracleOnce sync.Once
	oracle     *ggmlOracle
	oracleErr  error
)

func oracleSkip(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("TQ_REQUIRE_REFS") == "1" {
		t.Fatal(msg + " [TQ_REQUIRE_REFS=1]")
	}
	t.Skip(msg)
}

func loadOracle(t *testing.T) *ggmlOracle {
	t.Helper()
	lib := oracleLibPath(t)
	if _, err := os.Stat(lib); err != nil {
		oracleSkip(t, "reference missing: llama.cpp's CPU library "+lib+"; run testdata/llamacpp/setup.sh")
	}
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA || !cpu.X86.HasF16C || !cpu.X86.HasBMI2 {
		t.Skip("this CPU cannot run llama.cpp's haswell CPU variant (needs AVX2, FMA, F16C, BMI2)") // not a missing reference
	}
	oracleOnce.Do(func() {
		h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			oracleErr = fmt.Errorf("dlopen %s: %v", lib, err)
			return
		}
		sym := func(name string) uintptr {
			p, err := purego.Dlsym(h, name)
			if err != nil && oracleErr == nil {
				oracleErr = fmt.Errorf("%s: symbol %s: %v", lib, name, err)
			}
			return p
		}
		o := &ggmlOracle{
			h: h,
			gemv: map[kernels.Type]uintptr{
				kernels.Q4_K:   sym("ggml_gemv_q4_K_8x8_q8_K"),
				kernels.Q4_0:   sym("ggml_gemv_q4_0_8x8_q8_0"),
				kernels.IQ4_NL: sym("ggml_gemv_iq4_nl_8x8_q8_0"),
			},
			gemm: map[kernels.Type]uintptr{
				kernels.Q4_K:   sym("ggml_gemm_q4_K_8x8_q8_K"),
				kernels.Q4_0:   sym("ggml_gemm_q4_0_8x8_q8_0"),
				kernels.IQ4_NL: sym("ggml_gemm_iq4_nl_8x8_q8_0"),
			},
			quantMat: map[kernels.Type]uintptr{
				kernels.Q8_K: sym("_Z19ggml_quantize_mat_tILl8EL9ggml_type15EEvPKfPvll"),
				kernels.Q8_0: sym("_Z19ggml_quantize_mat_tILl8EL9ggml_type8EEvPKfPvll"),
			},
			quantRowQ8K:  sym("quantize_row_q8_K"),
			quantRowQ8_0: sym("quantize_row_q8_0"),
		}
		initFn := sym("ggml_cpu_init")
		if oracleErr != nil {
			return
		}
		ccall(initFn)
		oracle = o
	})
	if oracleErr != nil {
		t.Fatal(oracleErr)
	}
	return oracle
}

// oracleSym returns the address of the C function name in llama.cpp's CPU library.
func oracleSym(t *testing.T, name string) uintptr {
	t.Helper()
	p, err := purego.Dlsym(loadOracle(t).h, name)
	if err != nil {
		t.Fatalf("llama.cpp CPU library: symbol %s: %v", name, err)
	}
	return p
}

// oracleFunc binds fn (a pointer to a func variable) to the C function name in llama.cpp's CPU
// library.
func oracleFunc(t *testing.T, fn any, name string) {
	t.Helper()
	oracleSym(t, name)
	purego.RegisterLibFunc(fn, loadOracle(t).h, name)
}

// oracleLibPath is node-llama-cpp's AVX2 CPU backend library.
func oracleLibPath(t *testing.T) string {
	return filepath.Join(testenv.RepoRoot(t), "testdata", "llamacpp", "node_modules", "@node-llama-cpp",
		"linux-x64", "bins", "linux-x64", "libggml-cpu-haswell.so")
}

// ccall calls a C function with integer/pointer arguments.
//
//go:uintptrescapes
func ccall(fn uintptr, args ...uintptr) {
	purego.SyscallN(fn, args...)
}

// aligned returns a zeroed n-byte slice aligned to 64 bytes (ggml's gemm uses aligned loads
// of the interleaved activation scales).
func aligned(n int) []byte {
	b := make([]byte, n+64)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & 63)
	return b[off : off+n : off+n]
}

func ptr(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// repack8 interleaves a weight matrix (rows a multiple of 8) into ggml's 8-row layouts:
// per group of 8 rows and block b, the 8 scales (Q4_K: then the 8 dmins and 96 bytes of
// scales regrouped by sub-block), then the quant bytes 8 at a time round-robin over the
// rows (Q4_0: each nibble XOR 8, making it a signed 4-bit value).
func repack8(t kernels.Type, w []byte, rows, n int) []byte {
	elems, wb, _ := repackBlock(t)
	nb := n / elems
	rowBytes := nb * wb
	out := aligned(rows * rowBytes)
	o := 0
	for g := 0; g < rows; g += 8 {
		for b := 0; b < nb; b++ {
			blk := func(i int) []byte { return w[(g+i)*rowBytes+b*wb : (g+i)*rowBytes+(b+1)*wb] }
			switch t {
			case kernels.Q4_K:
				for i := 0; i < 8; i++ {
					copy(out[o+2*i:], blk(i)[0:2])
					copy(out[o+16+2*i:], blk(i)[2:4])
				}
				var sc, m [8][8]uint8 // [row][sub-block]
				for i := 0; i < 8; i++ {
					sc[i], m[i] = unpackK12(blk(i)[4:16])
				}
				for sb := 0; sb < 8; sb++ {
					var s8, m8 [8]uint8 // [row]
					for i := 0; i < 8; i++ {
						s8[i], m8[i] = sc[i][sb], m[i][sb]
					}
					p := packK12(&s8, &m8)
					copy(out[o+32+12*sb:], p[:])
				}
				for i := 0; i < 128; i++ {
					copy(out[o+128+8*i:o+128+8*i+8], blk(i % 8)[16+8*(i/8):])
				}
				o += 1152
			default:
				for i := 0; i < 8; i++ {
					copy(out[o+2*i:], blk(i)[0:2])
				}
				for i := 0; i < 16; i++ {
					for k := 0; k < 8; k++ {
						v := blk(i % 8)[2+8*(i/8)+k]
						if t == kernels.Q4_0 {
							v ^= 0x88
						}
						out[o+16+8*i+k] = v
					}
				}
				o += 144
			}
		}
	}
	return out
}

// deinterleave4 turns ggml's 4-row interleaved activation blocks (block_q8_0x4 /
// block_q8_Kx4) back into 4 ordinary rows of QuantizeRowQ8_0 / QuantizeRowQ8K layout.
func deinterleave4(at kernels.Type, v []byte, n int) [4][]byte {
	var rows [4][]byte
	if at == kernels.Q8_K {
		nb := n / 256
		for r := range rows {
			rows[r] = make([]byte, nb*kernels.BlockBytesQ8_K)
		}
		for b := 0; b < nb; b++ {
			blk := v[b*1168:]
			for r := 0; r < 4; r++ {
				dst := rows[r][b*kernels.BlockBytesQ8_K:]
				copy(dst[0:4], blk[4*r:4*r+4])
				for j := 0; j < 1024; j++ {
					if (j%32)/8 == r {
						dst[4+(j/32)*8+j%8] = blk[16+j]
					}
				}
				for g := 0; g < 16; g++ {
					src := 16 + 1024 + 2*(16*(g/4)+4*r+g%4)
					copy(dst[260+2*g:262+2*g], blk[src:src+2])
				}
			}
		}
		return rows
	}
	nb := n / 32
	for r := range rows {
		rows[r] = make([]byte, nb*kernels.BlockBytesQ8_0)
	}
	for b := 0; b < nb; b++ {
		blk := v[b*136:]
		for r := 0; r < 4; r++ {
			dst := rows[r][b*kernels.BlockBytesQ8_0:]
			copy(dst[0:2], blk[2*r:2*r+2])
			for j := 0; j < 128; j++ {
				if (j%32)/8 == r {
					dst[2+(j/32)*8+j%8] = blk[8+j]
				}
			}
		}
	}
	return rows
}

// q8KSignFlipped reports whether two Q8_K blocks are exact negations of each other (d,
// every quant and every bsum), the one allowed difference between ggml's 4x8 quantizer and
// quantize_row_q8_K.
func q8KSignFlipped(a, b []byte) bool {
	da := math.Float32frombits(binary.LittleEndian.Uint32(a))
	db := math.Float32frombits(binary.LittleEndian.Uint32(b))
	if da != -db {
		return false
	}
	for j := 4; j < 260; j++ {
		if int8(a[j]) != -int8(b[j]) {
			return false
		}
	}
	for g := 0; g < 16; g++ {
		if int16(binary.LittleEndian.Uint16(a[260+2*g:])) != -int16(binary.LittleEndian.Uint16(b[260+2*g:])) {
			return false
		}
	}
	return true
}

// oracleActs returns k activation rows of n floats for the oracle tests, normal or Student-t,
// with one block per row rigged so that −amax precedes +amax (the Q8_K sign case).
func oracleActs(seed uint64, k, n int, heavy bool) []float32 {
	x := extFloats(extRNG(seed), k*n, heavy, 1)
	for r := 0; r < k; r++ {
		row := x[r*n : (r+1)*n]
		lim := min(n, 256)
		var amax float32
		for _, v := range row[:lim] {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		amax *= 1.5
		row[3], row[lim*3/4] = -amax, amax
	}
	return x
}

// TestRepackMatchesLlamaCpp: our gemv-order kernels (DotXxxRepack, MatVecRepack) against
// ggml_gemv_*_8x8, and MatMulRepack against ggml_gemm_*_8x8 (groups of 4 activation rows,
// 16-row and 4-row paths) and ggml_gemv for the remainder rows, bit for bit, on weights from
// the quant package and on random weight bytes, with normal and Student-t activations.
func TestRepackMatchesLlamaCpp(t *testing.T) {
	o := loadOracle(t)
	const rows = 16
	for _, wt := range []kernels.Type{kernels.Q4_K, kernels.Q4_0, kernels.IQ4_NL} {
		at := kernels.Q8_0
		if wt == kernels.Q4_K {
			at = kernels.Q8_K
		}
		lengths := []int{256, 1024, 4096}
		if wt != kernels.Q4_K {
			lengths = []int{32, 96, 256, 4096}
		}
		for _, n := range lengths {
			for variant := 0; variant < 3; variant++ {
				heavy := variant != 0
				seed := uint64(n)*7 + uint64(variant)
				r := extRNG(seed)
				var w []byte
				if variant == 2 {
					w = rawWeights(r, wt, rows, n, 0.05)
				} else {
					w = quantWeights(t, r, wt, rows, n, heavy)
				}
				name := fmt.Sprintf("%s/n=%d/variant=%d", typeName(wt), n, variant)
				t.Run(name, func(t *testing.T) {
					checkOracle(t, o, wt, at, w, rows, n, heavy, seed)
				})
			}
		}
	}
}

func checkOracle(t *testing.T, o *ggmlOracle, wt, at kernels.Type, w []byte, rows, n int, heavy bool, seed uint64) {
	elems, wb, xb := repackBlock(wt)
	rowBytes := n / elems * wb
	xRow := n / elems * xb
	if wt == kernels.Q4_K {
		xRow = n / 256 * kernels.BlockBytesQ8_K
	}
	packed := repack8(wt, w, rows, n)

	// gemv: one activation row, quantized by ggml's own from_float and by ours.
	const nx = 22 // 20 rows through gemm (16-row + 4-row paths), 2 through gemv
	xf := oracleActs(seed+100, nx, n, heavy)
	xq := quantActs(wt, xf, nx, n)
	ggmlRow := aligned(xRow)
	qrow := o.quantRowQ8_0
	if at == kernels.Q8_K {
		qrow = o.quantRowQ8K
	}
	for k := 0; k < nx; k++ {
		ccall(qrow, uintptr(unsafe.Pointer(&xf[k*n])), ptr(ggmlRow), uintptr(n))
		mine := xq[k*xRow : (k+1)*xRow]
		if string(ggmlRow) != string(mine) {
			t.Fatalf("activation row %d: quantize_row_%v differs from ours", k, at)
		}
	}
	gemvOut := make([]float32, nx*rows)
	for k := 0; k < nx; k++ {
		ccall(o.gemv[wt], uintptr(n), uintptr(unsafe.Pointer(&gemvOut[k*rows])), uintptr(rows),
			ptr(packed), ptr(xq[k*xRow:]), 1, uintptr(rows))
	}

	// gemm: groups of 4 rows quantized by ggml_quantize_mat (4x8 interleave).
	g := nx - nx%4
	mat4 := 136 * (n / 32)
	if at == kernels.Q8_K {
		mat4 = 1168 * (n / 256)
	}
	xmat := aligned(g / 4 * mat4)
	var flipped, blocks int
	for k := 0; k < g; k += 4 {
		dst := xmat[k/4*mat4:]
		ccall(o.quantMat[at], uintptr(unsafe.Pointer(&xf[k*n])), ptr(dst), 4, uintptr(n))
		de := deinterleave4(at, dst, n)
		for i := 0; i < 4; i++ {
			mine := xq[(k+i)*xRow : (k+i+1)*xRow]
			if at == kernels.Q8_0 {
				if string(de[i]) != string(mine) {
					t.Fatalf("activation row %d: ggml_quantize_mat_q8_0_4x8 differs from QuantizeRowQ8_0", k+i)
				}
				continue
			}
			for b := 0; b < n/256; b++ {
				a, m := de[i][b*292:(b+1)*292], mine[b*292:(b+1)*292]
				blocks++
				if string(a) != string(m) {
					if !q8KSignFlipped(a, m) {
						t.Fatalf("activation row %d block %d: ggml_quantize_mat_q8_K_4x8 differs from QuantizeRowQ8K other than by sign", k+i, b)
					}
					flipped++
				}
			}
		}
	}
	if at == kernels.Q8_K {
		if flipped == 0 {
			t.Errorf("the rigged −amax-first blocks did not flip sign (%d blocks)", blocks)
		}
		t.Logf("ggml_quantize_mat_q8_K_4x8 vs QuantizeRowQ8K: %d of %d blocks negated, rest identical", flipped, blocks)
	}
	gemmOut := make([]float32, g*rows)
	ccall(o.gemm[wt], uintptr(n), uintptr(unsafe.Pointer(&gemmOut[0])), uintptr(rows), ptr(packed), ptr(xmat),
		uintptr(g), uintptr(rows))

	for _, pure := range impls() {
		withPure(pure, func() {
			// Single-row dots and MatVecRepack against gemv.
			for k := 0; k < nx; k++ {
				x := xq[k*xRow : (k+1)*xRow]
				mv := make([]float32, rows)
				if err := kernels.MatVecRepack(wt, mv, w, rowBytes, x, 0, rows); err != nil {
					t.Fatal(err)
				}
				for r := 0; r < rows; r++ {
					var d float32
					row := w[r*rowBytes : (r+1)*rowBytes]
					switch wt {
					case kernels.Q4_K:
						d = kernels.DotQ4_KQ8KRepack(n, row, x)
					case kernels.Q4_0:
						d = kernels.DotQ4_0Q8_0Repack(n, row, x)
					default:
						d = kernels.DotIQ4_NLQ8_0Repack(n, row, x)
					}
					want := gemvOut[k*rows+r]
					if !bitsEqual(d, want) || !bitsEqual(mv[r], want) {
						t.Fatalf("%s: act %d row %d: dot %.9g (%#x), MatVecRepack %.9g (%#x), ggml gemv %.9g (%#x)",
							implName(pure), k, r, d, math.Float32bits(d), mv[r], math.Float32bits(mv[r]), want, math.Float32bits(want))
					}
				}
			}
			// MatMulRepack against gemm (first g rows) and gemv (the rest).
			mm := make([]float32, nx*rows)
			if err := kernels.MatMulRepack(wt, mm, rows, w, rowBytes, xq, xRow, nx, 0, rows); err != nil {
				t.Fatal(err)
			}
			var sameAsGemv int
			for k := 0; k < nx; k++ {
				for r := 0; r < rows; r++ {
					want := gemvOut[k*rows+r]
					if k < g {
						want = gemmOut[k*rows+r]
						if bitsEqual(want, gemvOut[k*rows+r]) {
							sameAsGemv++
						}
					}
					if got := mm[k*rows+r]; !bitsEqual(got, want) {
						t.Fatalf("%s: MatMulRepack act %d row %d: %.9g (%#x), ggml %.9g (%#x)",
							implName(pure), k, r, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
			}
			if pure {
				t.Logf("gemm outputs bit-identical to gemv outputs: %d of %d", sameAsGemv, g*rows)
			}
			// MatMulRepackGemv against gemv for every activation row (these are quantized
			// activations, so Q4_0/IQ4_NL qualify too).
			mg := make([]float32, nx*rows)
			if err := kernels.MatMulRepackGemv(wt, mg, rows, w, rowBytes, xq, xRow, nx, 0, rows); err != nil {
				t.Fatal(err)
			}
			for i, want := range gemvOut {
				if !bitsEqual(mg[i], want) {
					t.Fatalf("%s: MatMulRepackGemv act %d row %d: %.9g (%#x), ggml gemv %.9g (%#x)",
						implName(pure), i/rows, i%rows, mg[i], math.Float32bits(mg[i]), want, math.Float32bits(want))
				}
			}
		})
	}
}

// interleave4 is the inverse of deinterleave4: 4 activation rows into ggml's block_q8_0x4 /
// block_q8_Kx4 layout.
func interleave4(at kernels.Type, rows [4][]byte, n int) []byte {
	if at == kernels.Q8_K {
		nb := n / 256
		v := aligned(nb * 1168)
		for b := 0; b < nb; b++ {
			blk := v[b*1168:]
			for r := 0; r < 4; r++ {
				src := rows[r][b*kernels.BlockBytesQ8_K:]
				copy(blk[4*r:4*r+4], src[0:4])
				for j := 0; j < 1024; j++ {
					if (j%32)/8 == r {
						blk[16+j] = src[4+(j/32)*8+j%8]
					}
				}
				for g := 0; g < 16; g++ {
					dst := 16 + 1024 + 2*(16*(g/4)+4*r+g%4)
					copy(blk[dst:dst+2], src[260+2*g:262+2*g])
				}
			}
		}
		return v
	}
	nb := n / 32
	v := aligned(nb * 136)
	for b := 0; b < nb; b++ {
		blk := v[b*136:]
		for r := 0; r < 4; r++ {
			src := rows[r][b*kernels.BlockBytesQ8_0:]
			copy(blk[2*r:2*r+2], src[0:2])
			for j := 0; j < 128; j++ {
				if (j%32)/8 == r {
					blk[8+j] = src[2+(j/32)*8+j%8]
				}
			}
		}
	}
	return v
}

// TestRepackMatchesLlamaCppRawBytes: the same comparison on arbitrary bytes — random weight
// quants and K-scales, activation quants including −128 and Q8_K bsums over the whole int16
// range — where ggml's integer paths have their quirks (the gemv |v|·sign(x, v) form with
// x = −128, int16 wrapping of the bsum pair sums). The gemm activations are our rows
// interleaved into ggml's 4-row layout.
func TestRepackMatchesLlamaCppRawBytes(t *testing.T) {
	o := loadOracle(t)
	const rows, nx = 16, 22
	for _, wt := range []kernels.Type{kernels.Q4_K, kernels.Q4_0, kernels.IQ4_NL} {
		r := extRNG(uint64(wt) + 900)
		n := 512
		if wt != kernels.Q4_K {
			n = 160
		}
		elems, wb, xb := repackBlock(wt)
		at := kernels.Q8_0
		if wt == kernels.Q4_K {
			at = kernels.Q8_K
		}
		rowBytes, xRow := n/elems*wb, n/elems*xb
		w := rawWeights(r, wt, rows, n, 0.05)
		packed := repack8(wt, w, rows, n)
		xq := make([]byte, nx*xRow)
		for i := range xq {
			xq[i] = byte(r.Uint32())
		}
		for k := 0; k < nx*n/elems; k++ {
			blk := xq[k*xb:]
			if at == kernels.Q8_K {
				binary.LittleEndian.PutUint32(blk, math.Float32bits(float32(r.NormFloat64()*0.01)))
			} else {
				binary.LittleEndian.PutUint16(blk, extHalf(r, 0.01))
			}
		}
		var minus128 int
		for _, v := range xq {
			if v == 0x80 {
				minus128++
			}
		}
		gemv := make([]float32, nx*rows)
		for k := 0; k < nx; k++ {
			ccall(o.gemv[wt], uintptr(n), uintptr(unsafe.Pointer(&gemv[k*rows])), uintptr(rows), ptr(packed), ptr(xq[k*xRow:]), 1, uintptr(rows))
		}
		g := nx - nx%4
		var mats []byte
		for k := 0; k < g; k += 4 {
			var four [4][]byte
			for i := range four {
				four[i] = xq[(k+i)*xRow : (k+i+1)*xRow]
			}
			mats = append(mats, interleave4(at, four, n)...)
		}
		xmat := aligned(len(mats))
		copy(xmat, mats)
		gemm := make([]float32, g*rows)
		ccall(o.gemm[wt], uintptr(n), uintptr(unsafe.Pointer(&gemm[0])), uintptr(rows), ptr(packed), ptr(xmat), uintptr(g), uintptr(rows))
		for _, pure := range impls() {
			withPure(pure, func() {
				mm := make([]float32, nx*rows)
				if err := kernels.MatMulRepack(wt, mm, rows, w, rowBytes, xq, xRow, nx, 0, rows); err != nil {
					t.Fatal(err)
				}
				for k := 0; k < nx; k++ {
					for r := 0; r < rows; r++ {
						want := gemv[k*rows+r]
						if k < g {
							want = gemm[k*rows+r]
						}
						if got := mm[k*rows+r]; !bitsEqual(got, want) {
							t.Fatalf("%s %s: act %d row %d: MatMulRepack %.9g (%#x), ggml %.9g (%#x)", typeName(wt), implName(pure), k, r,
								got, math.Float32bits(got), want, math.Float32bits(want))
						}
					}
				}
				if wt != kernels.Q4_K {
					return // MatMulRepackGemv requires activation quants above −128 for these
				}
				mg := make([]float32, nx*rows)
				if err := kernels.MatMulRepackGemv(wt, mg, rows, w, rowBytes, xq, xRow, nx, 0, rows); err != nil {
					t.Fatal(err)
				}
				for i, want := range gemv {
					if !bitsEqual(mg[i], want) {
						t.Fatalf("%s %s: MatMulRepackGemv act %d row %d: %.9g (%#x), ggml gemv %.9g (%#x)", typeName(wt), implName(pure),
							i/rows, i%rows, mg[i], math.Float32bits(mg[i]), want, math.Float32bits(want))
					}
				}
			})
		}
		t.Logf("%s: %d outputs bit-identical (%d activation bytes of −128)", typeName(wt), nx*rows, minus128)
	}
}
