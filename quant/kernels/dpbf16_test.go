package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// dpKernelGo is the rounded-rows block kernel in Go: per step and pair, both exact products
// added to the float32 accumulator one after the other (VDPBF16PS's documented order),
// subnormal inputs read as zero and subnormal sums flushed. Hardware may round the pair
// differently, so tests compare both with a float64 reference.
func dpKernelGo(ks int, a []byte, lda int, b []uint32, c []float32, ldc int, acc bool) {
	for r := 0; r < dpRows; r++ {
		for col := 0; col < 32; col++ {
			var sum float32
			if acc {
				sum = c[r*ldc+col]
			}
			t, cc := col/16, col%16
			for s := 0; s < ks; s++ {
				tile := b[(s*2+t)*256+cc:]
				for kk := 0; kk < 16; kk++ {
					w, x := tile[kk*16], a[2*(r*lda+s*amxK+2*kk):]
					sum = ftz(sum + bf16daz(binary.LittleEndian.Uint16(x))*bf16daz(uint16(w)))
					sum = ftz(sum + bf16daz(binary.LittleEndian.Uint16(x[2:]))*bf16daz(uint16(w>>16)))
				}
			}
			c[r*ldc+col] = sum
		}
	}
}

// TestRoundBF16 checks RoundBF16 against the nearest bf16 found in float64 (ties to even),
// on heavy-tailed values, every exponent, exact ties and the special values.
func TestRoundBF16(t *testing.T) {
	r := newRNG(5)
	xs := randFloats(r, 20000, true, 2)
	for e := -133; e <= 127; e++ {
		m := 1 + float64(r.Uint32()&0x7fffff)/(1<<23)
		xs = append(xs, float32(math.Ldexp(m, e)), -float32(math.Ldexp(m, e)))
	}
	for i := 0; i < 200; i++ { // ties: the low 16 bits exactly 0x8000
		xs = append(xs, math.Float32frombits(r.Uint32()&0x7f7f0000|0x8000))
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)))
	for _, x := range xs {
		got := RoundBF16(x)
		b := math.Float32bits(x)
		lo, hi := b&0xffff0000, (b&0xffff0000)+0x10000 // the two bf16 neighbours (by magnitude)
		dl := math.Abs(float64(x) - float64(math.Float32frombits(lo)))
		hv := float64(math.Float32frombits(hi))
		if math.IsInf(hv, 0) { // past the largest bf16: IEEE rounds as if the exponent went on
			hv = math.Copysign(math.Ldexp(1, 128), hv)
		}
		dh := math.Abs(hv - float64(x))
		want := lo
		if dh < dl || dh == dl && (lo>>16)&1 == 1 {
			want = hi
		}
		if math.IsInf(float64(x), 0) {
			want = b
		}
		if uint32(got)<<16 != want {
			t.Fatalf("RoundBF16(%g = %#x) = %#x, want %#x", x, b, got, want>>16)
		}
	}
	if n := RoundBF16(float32(math.NaN())); n&0x7f80 != 0x7f80 || n&0x7f == 0 {
		t.Fatalf("RoundBF16(NaN) = %#x, not a NaN", n)
	}
}

// dpCase multiplies a (m×k, float32, rounded to bf16) with b (n×k, bf16) into c0's copy with
// gemm (sgemmRounded with a block kernel: viaDP, viaAMX) and checks every entry against the float64 product of the rounded
// activations: exactly when exact is set (one-hot weights), else within (k+2)·2⁻²⁴·(Σ|a·b| +
// |c0|), a float32 sum of k exact products (and C) added in any order. It returns the largest
// error in units of 2⁻²⁴·(Σ|a·b| + |c0|).
func dpCase(t *testing.T, name string, m, n, k int, a []float32, b []byte, c0 []float32, acc, exact bool,
	gemm roundedGemm) float64 {
	t.Helper()
	c := dpProduct(m, n, k, a, b, c0, acc, gemm)
	worst := 0.0
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var ref, mag float64
			if acc {
				ref, mag = float64(c0[i*n+j]), math.Abs(float64(c0[i*n+j]))
			}
			for p := 0; p < k; p++ {
				h := uint16(b[2*(j*k+p)]) | uint16(b[2*(j*k+p)+1])<<8
				x := float64(math.Float32frombits(uint32(RoundBF16(a[i*k+p])) << 16))
				v := x * float64(math.Float32frombits(uint32(h)<<16))
				ref += v
				mag += math.Abs(v)
			}
			got := float64(c[i*n+j])
			if exact {
				if got != ref {
					t.Fatalf("%s %d×%d×%d acc=%v: C[%d,%d] = %g, exactly %g", name, m, n, k, acc, i, j, got, ref)
				}
				continue
			}
			unit := math.Ldexp(mag, -24)
			if e := math.Abs(got - ref); e > float64(k+2)*unit {
				t.Fatalf("%s %d×%d×%d acc=%v: C[%d,%d] = %g, float64 %g: error %.3g units of 2⁻²⁴·Σ|ab|", name, m, n, k, acc, i, j, got, ref, e/unit)
			} else if unit > 0 {
				worst = max(worst, e/unit)
			}
		}
	}
	return worst
}

// roundedGemm is a product of rounded rows with a packed B: sgemmRounded with a block kernel
// (viaDP: 8 rows, viaAMX: 32).
type roundedGemm func(s *RoundedRows, n int, bp []uint32, c []float32, ldc int, acc bool)

func viaDP(kern roundedKernel) roundedGemm {
	return func(s *RoundedRows, n int, bp []uint32, c []float32, ldc int, acc bool) {
		sgemmRounded(s, n, bp, c, ldc, acc, dpRows, kern)
	}
}

func viaAMX(kern roundedKernel) roundedGemm {
	return func(s *RoundedRows, n int, bp []uint32, c []float32, ldc int, acc bool) {
		sgemmRounded(s, n, bp, c, ldc, acc, 32, kern)
	}
}

// amxKernelRGo is amxKernel32x32BF16R in Go for the tests: dpKernelGo on each group of 8 of
// its 32 rows (the same products, in the documented order of VDPBF16PS rather than the tile
// unit's, so tests compare both with float64).
func amxKernelRGo(ks int, a []byte, lda int, b []uint32, c []float32, ldc int, acc bool) {
	for g := 0; g < 32/dpRows; g++ {
		dpKernelGo(ks, a[2*g*dpRows*lda:], lda, b, c[g*dpRows*ldc:], ldc, acc)
	}
}

// dpProduct is c0's copy (+)= a·bᵀ through RoundedRows, packBF16AMX and gemm (a m×k float32,
// b n×k bf16).
func dpProduct(m, n, k int, a []float32, b []byte, c0 []float32, acc bool, gemm roundedGemm) []float32 {
	var s RoundedRows
	s.Reset(m, k)
	for i := range s.h {
		s.h[i] = 0xbe // Reset and Set must leave no garbage in the padding
	}
	s.Reset(m, k)
	s.Set(0, m, a, k)
	pk := make([]uint32, amxPackedLen(n, k))
	packBF16AMX(pk, b, k, n, k)
	c := append([]float32(nil), c0...)
	gemm(&s, n, pk, c, n, acc)
	return c
}

// dpShapes have row, column and k tails (odd k too), and k over several passes (dpKC steps).
var dpShapes = [][3]int{{8, 32, 32}, {64, 64, 320}, {37, 45, 77}, {5, 3, 1}, {100, 70, 600}, {33, 96, 1030}, {16, 40, 64}, {9, 33, 31}}

// TestSgemmDPGo runs the block kernels' Go twins through sgemmRounded (8 and 32 rows) on every
// machine: the rounding, the row layout (and the AMX blocks' reads past a view's rows), the
// packing and the blocking against float64.
func TestSgemmDPGo(t *testing.T) {
	for si, sh := range dpShapes {
		m, n, k := sh[0], sh[1], sh[2]
		a, b, c0 := amxOperands(uint64(si)+60, m, n, k)
		for _, acc := range []bool{false, true} {
			dpCase(t, "go", m, n, k, a, b, c0, acc, false, viaDP(dpKernelGo))
			dpCase(t, "go one-hot", m, n, k, a, oneHot(uint64(si), n, k), c0, false, true, viaDP(dpKernelGo))
			dpCase(t, "amx go", m, n, k, a, b, c0, acc, false, viaAMX(amxKernelRGo))
			dpCase(t, "amx go one-hot", m, n, k, a, oneHot(uint64(si), n, k), c0, false, true, viaAMX(amxKernelRGo))
		}
	}
}

// TestSgemmHalfRounded checks SgemmHalfRounded on each path the machine has: with AVX512-BF16
// (AMX off) the assembly block kernel against float64 (bounded, and exact on one-hot weights)
// and SgemmHalfRounded giving the kernel's bits; on AMX, SgemmHalfRounded giving the AMX block
// kernel's bits (TestSgemmAMXRounded checks that kernel against float64); and that it refuses
// to run with both paths off.
func TestSgemmHalfRounded(t *testing.T) {
	if !HasBF16DP() && !HasAMX() {
		t.Skip("neither AVX512-BF16 nor AMX on this machine: the rounded rows' kernels are not tested here; TestSgemmDPGo covers their layouts")
	}
	defer SetAMX(true)
	defer SetBF16DP(SetBF16DP(true)) // also where it is not the default (dpPays)
	worst := 0.0
	for si, sh := range dpShapes {
		m, n, k := sh[0], sh[1], sh[2]
		a, b, c0 := amxOperands(uint64(si)+60, m, n, k)
		for _, acc := range []bool{false, true} {
			for _, path := range []string{"bf16dp", "amx"} {
				var want []float32
				switch {
				case path == "bf16dp" && HasBF16DP():
					SetAMX(false)
					worst = max(worst, dpCase(t, "asm", m, n, k, a, b, c0, acc, false, viaDP(dpKernelAsm)))
					dpCase(t, "asm one-hot", m, n, k, a, oneHot(uint64(si), n, k), c0, false, true, viaDP(dpKernelAsm))
					want = dpProduct(m, n, k, a, b, c0, acc, viaDP(dpKernelAsm))
				case path == "amx" && HasAMX():
					SetAMX(true)
					want = dpProduct(m, n, k, a, b, c0, acc, viaAMX(amxKernelRAsm))
				default:
					continue
				}
				var s RoundedRows
				s.Reset(m, k)
				s.Set(0, m, a, k)
				got := append([]float32(nil), c0...)
				if _, err := SgemmHalfRounded(&s, n, b, k, got, n, acc, nil); err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s %v acc=%v: C[%d]: SgemmHalfRounded %g, the kernel %g", path, sh, acc, i, got[i], want[i])
					}
				}
			}
		}
	}
	if HasBF16DP() {
		t.Logf("largest error of the VDPBF16PS kernel: %.2f units of 2⁻²⁴·Σ|ab| (bound k+2)", worst)
	}
	SetBF16DP(false)
	SetAMX(false)
	if _, err := SgemmHalfRounded(&RoundedRows{}, 1, make([]byte, 2), 1, make([]float32, 1), 1, false, nil); err == nil {
		t.Error("SgemmHalfRounded ran with both paths off")
	}
}

// BenchmarkSgemmHalfRounded compares, on one thread, the rounded-rows GEMM (rounding the rows
// and packing B included; VDPBF16PS, and AMX tiles where present) with SgemmHalf's float32 FMA
// path and, where present, the AMX path's exact three pieces (SgemmHalf with AMX on) on the same
// bf16 weights, in GFLOP/s, at the calibration forward's shapes (512 activation rows, a 512-row
// weight tile).
func BenchmarkSgemmHalfRounded(b *testing.B) {
	for _, sh := range [][3]int{{512, 512, 2048}, {512, 512, 6144}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, w, _ := amxOperands(1, m, n, k)
		c := make([]float32, m*n)
		flops := 2 * float64(m) * float64(n) * float64(k)
		for _, path := range []string{"fma", "amx-split"} {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", path, m, n, k), func(b *testing.B) {
				if path == "amx-split" && !UsingAMX() {
					b.Skip("no AMX")
				}
				SetAMX(path == "amx-split")
				defer SetAMX(true)
				for i := 0; i < b.N; i++ {
					if err := SgemmHalf(BF16, m, n, k, a, k, w, k, c, n, false); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
		for _, path := range []string{"bf16dp", "amx-rounded"} {
			b.Run(fmt.Sprintf("%s/%dx%dx%d", path, m, n, k), func(b *testing.B) {
				if path == "bf16dp" && !HasBF16DP() || path == "amx-rounded" && !UsingAMX() {
					b.Skip("not on this machine")
				}
				SetAMX(path == "amx-rounded")
				defer SetAMX(true)
				defer SetBF16DP(SetBF16DP(true))
				var s RoundedRows
				var pack []uint32
				for i := 0; i < b.N; i++ {
					s.Reset(m, k)
					s.Set(0, m, a, k)
					var err error
					if pack, err = SgemmHalfRounded(&s, n, w, k, c, n, false, pack); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// TestRoundedRowsSet checks the rows Set writes, with the AVX-512 rounding and without:
// RoundBF16 of every value bit for bit (non-finite and subnormal values too), zeros past k and
// in the padding rows.
func TestRoundedRowsSet(t *testing.T) {
	r := newRNG(13)
	specials := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -3e-39, 0,
		math.MaxFloat32, math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0xff800001)}
	forEachImpl(t, func(t *testing.T) {
		for _, k := range []int{32, 100, 7, 257, 16} {
			m := 11
			a := randFloats(r, m*k, true, 1)
			for i, v := range specials {
				a[(i*37)%len(a)] = v
			}
			var s RoundedRows
			s.Reset(m, k)
			for i := range s.h {
				s.h[i] = 0xbe
			}
			s.Reset(m, k)
			s.Set(0, m, a, k)
			for row := 0; row < 16; row++ {
				for j := 0; j < s.ld(); j++ {
					var want uint16
					if row < m && j < k {
						want = RoundBF16(a[row*k+j])
					}
					if got := binary.LittleEndian.Uint16(s.h[2*(row*s.ld()+j):]); got != want {
						t.Fatalf("k=%d row %d value %d: %#x, want %#x", k, row, j, got, want)
					}
				}
			}
		}
	})
}

// TestSgemmAMXRounded checks the AMX block kernel for rounded rows where the machine has AMX:
// against float64 (bounded, and exact on one-hot weights), through sgemmRounded.
func TestSgemmAMXRounded(t *testing.T) {
	if !HasAMX() {
		t.Skip("no AMX-BF16 on this machine (or the OS does not grant it): the rounded rows' AMX kernel is not tested here; TestSgemmDPGo covers its layouts")
	}
	worst := 0.0
	for si, sh := range dpShapes {
		m, n, k := sh[0], sh[1], sh[2]
		a, b, c0 := amxOperands(uint64(si)+60, m, n, k)
		for _, acc := range []bool{false, true} {
			worst = max(worst, dpCase(t, "amx", m, n, k, a, b, c0, acc, false, viaAMX(amxKernelRAsm)))
			dpCase(t, "amx one-hot", m, n, k, a, oneHot(uint64(si), n, k), c0, false, true, viaAMX(amxKernelRAsm))
		}
	}
	t.Logf("largest error of the AMX kernel on rounded rows: %.2f units of 2⁻²⁴·Σ|ab| (bound k+2)", worst)
}

// TestSgemmRoundedPacked checks the product of rounded rows with themselves (a Gram matrix's
// tiles: View for A, PackB for B), on blocks with row, column and k tails: on the AVX512-BF16
// path against SgemmHalfRounded given the same rows' bf16 values as B, bit for bit; on AMX
// (where the machine has it) against the float64 products of the same bf16 values within
// (k+2)·2⁻²⁴·Σ|ab|; and the argument checks.
func TestSgemmRoundedPacked(t *testing.T) {
	if !HasBF16DP() && !HasAMX() {
		t.Skip("neither AVX512-BF16 nor AMX on this machine: SgemmRoundedPacked's kernels are not tested here; TestSgemmDPGo covers their layouts")
	}
	defer SetAMX(true)
	defer SetBF16DP(SetBF16DP(true))
	for _, sh := range [][2]int{{100, 77}, {64, 512}, {300, 33}, {9, 1}, {272, 600}} {
		rows, k := sh[0], sh[1]
		a, _, _ := amxOperands(uint64(rows), rows, 1, k)
		var s RoundedRows
		s.Reset(rows, k)
		s.Set(0, rows, a, k)
		bf := func(r, p int) float64 {
			h := uint16(s.h[2*(r*s.ld()+p)]) | uint16(s.h[2*(r*s.ld()+p)+1])<<8
			return float64(math.Float32frombits(uint32(h) << 16))
		}
		for _, blk := range [][4]int{{0, rows, 0, rows}, {8, min(rows-8, 40), 3, min(rows-3, 61)}, {0, min(rows, 8), rows - 1, 1}, {rows / 16 * 8, rows - rows/16*8, 0, min(rows, 45)}} {
			i0, m, j0, n := blk[0], blk[1], blk[2], blk[3]
			if m <= 0 || n <= 0 {
				continue
			}
			v := s.View(i0, m)
			if HasBF16DP() {
				b := make([]byte, 2*n*k) // rows j0.. of s as a bf16 B
				for j := 0; j < n; j++ {
					copy(b[2*j*k:2*(j+1)*k], s.h[2*(j0+j)*s.ld():])
				}
				SetAMX(false)
				want := make([]float32, m*n)
				if _, err := SgemmHalfRounded(&v, n, b, k, want, n, false, nil); err != nil {
					t.Fatal(err)
				}
				got := make([]float32, m*n)
				if err := SgemmRoundedPacked(&v, s.PackB(j0, n, nil), n, got, n, false); err != nil {
					t.Fatal(err)
				}
				SetAMX(true)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%d×%d block (%d, %d, %d, %d): C[%d] = %g, SgemmHalfRounded %g", rows, k, i0, m, j0, n, i, got[i], want[i])
					}
				}
			}
			if HasAMX() {
				c0 := make([]float32, m*n)
				for i := range c0 {
					c0[i] = float32(i%7) - 3
				}
				got := append([]float32(nil), c0...)
				if err := SgemmRoundedPacked(&v, s.PackB(j0, n, nil), n, got, n, true); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						ref, mag := float64(c0[i*n+j]), math.Abs(float64(c0[i*n+j]))
						for p := 0; p < k; p++ {
							x := bf(i0+i, p) * bf(j0+j, p)
							ref += x
							mag += math.Abs(x)
						}
						if e := math.Abs(float64(got[i*n+j]) - ref); e > float64(k+2)*math.Ldexp(mag, -24) {
							t.Fatalf("AMX: %d×%d block (%d, %d, %d, %d): C[%d,%d] = %g, float64 %g", rows, k, i0, m, j0, n, i, j, got[i*n+j], ref)
						}
					}
				}
			}
		}
	}
	var s RoundedRows
	s.Reset(16, 32)
	if err := SgemmRoundedPacked(&s, make([]uint32, 10), 32, make([]float32, 16*32), 32, false); err == nil {
		t.Error("SgemmRoundedPacked took a short packed B")
	}
}

// TestRoundBF16Slice: the slice form (AVX-512 kernel for whole 16-value steps where it runs,
// the scalar rule for the rest) gives RoundBF16 of every value, on normal and heavy-tailed
// values with ties, subnormals, infinities and NaN, at lengths around the step; the pure-Go
// path is checked as well.
func TestRoundBF16Slice(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 15, 16, 17, 33, 255, 1000} {
		src := make([]float32, n)
		for i := range src {
			switch i % 7 {
			case 0:
				src[i] = float32(r.NormFloat64())
			case 1:
				src[i] = float32(math.Exp(6*r.NormFloat64())) * float32(1-2*r.IntN(2)) // heavy-tailed
			case 2:
				src[i] = math.Float32frombits(uint32(r.IntN(1<<16))<<16 | 0x8000) // a tie
			case 3:
				src[i] = math.Float32frombits(r.Uint32() & 0x807fffff) // subnormal or zero
			case 4:
				src[i] = []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), math.MaxFloat32}[r.IntN(4)]
			default:
				src[i] = math.Float32frombits(r.Uint32())
			}
		}
		for _, asm := range []bool{false, use512()} {
			dst := make([]byte, 2*n+2)
			dst[2*n], dst[2*n+1] = 0xaa, 0x55
			roundBF16Slice(dst, src, asm)
			for i, v := range src {
				got := uint16(dst[2*i]) | uint16(dst[2*i+1])<<8
				want := RoundBF16(v)
				if got != want && !(v != v && got&0x7f80 == 0x7f80 && got&0x7f != 0) {
					t.Fatalf("n %d asm %v: value %d (%#x): %#x, want %#x", n, asm, i, math.Float32bits(v), got, want)
				}
			}
			if dst[2*n] != 0xaa || dst[2*n+1] != 0x55 {
				t.Fatalf("n %d asm %v: wrote past 2·n bytes", n, asm)
			}
		}
	}
}
