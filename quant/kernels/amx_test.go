package kernels

import (
	"math"
	"testing"
)

// amxKernelGo is the block kernel in Go: the same products, each exact, added in float32 in
// TDPBF16PS's documented order (per step the hi, mid and lo pieces in turn, within a piece the
// 16 pairs, each pair's products one after the other), subnormal inputs read as zero and
// subnormal sums flushed. The hardware adds in another order (its results differ from this in
// the last bits), so tests compare both with a float64 reference.
func amxKernelGo(ks int, a0, a1 []uint16, b []uint32, c []float32, ldc int, acc bool) {
	for r := 0; r < 32; r++ {
		a := a0
		if r >= 16 {
			a = a1
		}
		for col := 0; col < 32; col++ {
			var sum float32
			if acc {
				sum = c[r*ldc+col]
			}
			t, cc := col/16, col%16
			for s := 0; s < ks; s++ {
				tile := b[(s*2+t)*256+cc:]
				for p := 0; p < 3; p++ {
					ap := a[(s*3+p)*amxTileHalves+r%16*amxK:]
					for kk := 0; kk < 16; kk++ {
						w := tile[kk*16]
						sum = ftz(sum + bf16daz(ap[2*kk])*bf16daz(uint16(w)))
						sum = ftz(sum + bf16daz(ap[2*kk+1])*bf16daz(uint16(w>>16)))
					}
				}
			}
			c[r*ldc+col] = sum
		}
	}
}

// bf16daz widens a bf16 value, reading subnormals as zero.
func bf16daz(h uint16) float32 {
	if h&0x7f80 == 0 {
		h &= 0x8000
	}
	return math.Float32frombits(uint32(h) << 16)
}

// ftz flushes a subnormal float32 to zero of the same sign.
func ftz(x float32) float32 {
	if b := math.Float32bits(x); b&0x7f800000 == 0 {
		return math.Float32frombits(b & 0x80000000)
	}
	return x
}

// packBF16AMXRef is packBF16AMX's layout written out element by element.
func packBF16AMXRef(b []byte, ldb, n, k int) []uint32 {
	ks := amxSteps(k)
	dst := make([]uint32, amxPackedLen(n, k))
	for j := 0; j < n; j++ {
		for kv := 0; kv < k; kv++ {
			s, kk, half := kv/amxK, kv%amxK/2, kv%2
			i := ((j/32*ks+s)*2+j%32/16)*256 + kk*16 + j%16
			h := uint32(b[2*(j*ldb+kv)]) | uint32(b[2*(j*ldb+kv)+1])<<8
			dst[i] |= h << (16 * half)
		}
	}
	return dst
}

// TestPackBF16AMX checks the packed tiles word by word against the layout written out, with
// the AVX-512 transpose and without, on column and k counts with and without tails.
func TestPackBF16AMX(t *testing.T) {
	shapes := [][3]int{{16, 32, 32}, {64, 2304, 2304}, {45, 77, 80}, {33, 64, 70}, {1, 1, 1}, {17, 31, 33}, {48, 96, 100}}
	forEachImpl(t, func(t *testing.T) {
		for si, sh := range shapes {
			n, k, ldb := sh[0], sh[1], sh[2]
			r := newRNG(uint64(si) + 7)
			b := make([]byte, 2*n*ldb)
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			want := packBF16AMXRef(b, ldb, n, k)
			got := make([]uint32, len(want))
			for i := range got {
				got[i] = 0xdeadbeef // the padding must be cleared
			}
			packBF16AMX(got, b, ldb, n, k)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("n=%d k=%d ldb=%d: word %d = %#x, want %#x", n, k, ldb, i, got[i], want[i])
				}
			}
		}
	})
}

// TestSplitBF16x3 checks that the three pieces are bf16 values summing to x exactly (normal x
// down to 2⁻¹⁰⁰, where no piece underflows), on heavy-tailed values and on every exponent
// with a full significand, and that the AVX-512 split writes the same bits as the Go one,
// for non-finite and subnormal values too.
func TestSplitBF16x3(t *testing.T) {
	r := newRNG(11)
	xs := randFloats(r, 4000, true, 3)
	for e := -100; e <= 127; e++ {
		xs = append(xs, float32(math.Ldexp(1+float64(0x7fffff)/(1<<23), e)), -float32(math.Ldexp(1+float64(r.Uint32()&0x7fffff)/(1<<23), e)))
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), 1, -1, math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-40)
	for _, x := range xs {
		hi, mid, lo := splitBF16x3(x)
		sum := float64(math.Float32frombits(uint32(hi)<<16)) + float64(math.Float32frombits(uint32(mid)<<16)) + float64(math.Float32frombits(uint32(lo)<<16))
		if math.Abs(float64(x)) >= math.Ldexp(1, -100) || x == 0 {
			if sum != float64(x) {
				t.Fatalf("split(%g = %#x) = %#x %#x %#x, sum %g", x, math.Float32bits(x), hi, mid, lo, sum)
			}
		}
	}
	// the AVX-512 split against the Go one, row by row (k with and without a partial step)
	specials := []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -3e-39, 0}
	forEachImpl(t, func(t *testing.T) {
		for _, k := range []int{32, 100, 7, 257} {
			m := 19
			a := randFloats(r, m*k, true, 1)
			for i, v := range specials {
				a[(i*37)%len(a)] = v
			}
			var s SplitRows
			s.Reset(m, k)
			s.Set(0, m, a, k)
			for row := 0; row < 32; row++ { // the padding rows too
				for j := 0; j < amxSteps(k)*amxK; j++ {
					var want [3]uint16
					if row < m && j < k {
						want[0], want[1], want[2] = splitBF16x3(a[row*k+j])
					}
					for p := 0; p < 3; p++ {
						got := s.h[row/16*s.block()+(j/amxK*3+p)*amxTileHalves+row%16*amxK+j%amxK]
						if got != want[p] {
							t.Fatalf("k=%d row %d value %d piece %d: %#x, want %#x", k, row, j, p, got, want[p])
						}
					}
				}
			}
		}
	})
}

// amxCase multiplies a (m×k, float32) with b (n×k, bf16) into c0's copy with the block kernel
// kern and checks every entry against the float64 product: exactly when exact is set (the
// tests' one-hot weights), else within (3k+2)·2⁻²⁴·(Σ|a·b| + |c0|). That bound holds for a
// float32 sum of the 3k exact products (and C) added in any order. It returns the largest
// error in units of 2⁻²⁴·(Σ|a·b| + |c0|).
func amxCase(t *testing.T, name string, m, n, k int, a []float32, b []byte, c0 []float32, acc, exact bool,
	kern func(ks int, a0, a1 []uint16, b []uint32, c []float32, ldc int, acc bool)) float64 {
	t.Helper()
	var s SplitRows
	s.Reset(m, k)
	s.Set(0, m, a, k)
	pk := make([]uint32, amxPackedLen(n, k))
	packBF16AMX(pk, b, k, n, k)
	c := append([]float32(nil), c0...)
	sgemmAMX(&s, n, pk, c, n, acc, kern)
	worst := 0.0
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var ref, mag float64
			if acc {
				ref, mag = float64(c0[i*n+j]), math.Abs(float64(c0[i*n+j]))
			}
			for p := 0; p < k; p++ {
				h := uint16(b[2*(j*k+p)]) | uint16(b[2*(j*k+p)+1])<<8
				v := float64(a[i*k+p]) * float64(math.Float32frombits(uint32(h)<<16))
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
			if e := math.Abs(got - ref); e > float64(3*k+2)*unit {
				t.Fatalf("%s %d×%d×%d acc=%v: C[%d,%d] = %g, float64 %g: error %.3g units of 2⁻²⁴·Σ|ab|", name, m, n, k, acc, i, j, got, ref, e/unit)
			} else if unit > 0 {
				worst = max(worst, e/unit)
			}
		}
	}
	return worst
}

// amxShapes have row, column and k tails, and k over several passes (amxKC steps each).
var amxShapes = [][3]int{{32, 32, 32}, {64, 64, 320}, {37, 45, 77}, {5, 3, 1}, {100, 70, 600}, {33, 96, 300}, {16, 40, 64}, {15, 40, 64}}

// amxOperands makes heavy-tailed activations, bf16 weights and a start C.
func amxOperands(seed uint64, m, n, k int) ([]float32, []byte, []float32) {
	r := newRNG(seed)
	a := randFloats(r, m*k, true, 1)
	b := make([]byte, 2*n*k)
	for i, v := range randFloats(r, n*k, true, 0.5) {
		h := uint16(math.Float32bits(v) >> 16)
		b[2*i], b[2*i+1] = byte(h), byte(h>>8)
	}
	return a, b, randFloats(r, m*n, false, 1)
}

// oneHot makes weights with one nonzero per column, ±2^e: every product's exact value is a
// float32 (a·2^e), and each dot product is that single product, so any correct split, layout
// and order gives it exactly; a lost piece or a misplaced weight does not.
func oneHot(seed uint64, n, k int) []byte {
	r := newRNG(seed)
	b := make([]byte, 2*n*k)
	for j := 0; j < n; j++ {
		p := r.IntN(k)
		h := uint16(0x3f80 + (r.IntN(7)-3)<<7) // 2^(−3..3)
		if r.IntN(2) == 1 {
			h |= 0x8000
		}
		b[2*(j*k+p)], b[2*(j*k+p)+1] = byte(h), byte(h>>8)
	}
	return b
}

// TestSgemmAMXGo runs the block kernel's Go twin through sgemmAMX on every machine: the
// split, the packing and the blocking against float64.
func TestSgemmAMXGo(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		for si, sh := range amxShapes {
			m, n, k := sh[0], sh[1], sh[2]
			a, b, c0 := amxOperands(uint64(si)+40, m, n, k)
			for _, acc := range []bool{false, true} {
				amxCase(t, "go", m, n, k, a, b, c0, acc, false, amxKernelGo)
				amxCase(t, "go one-hot", m, n, k, a, oneHot(uint64(si), n, k), c0, false, true, amxKernelGo)
			}
		}
	})
}

// TestSgemmHalfAMX checks the AMX path where the machine has it: the assembly block kernel
// against float64 (bounded, and exact on one-hot weights), and SgemmHalf, SgemmPackedHalf and
// SgemmHalfSplit giving the same bits (below AMXMinRows rows, SgemmHalf keeps the FMA path's
// bits and SgemmPackedHalf refuses tiles packed for AMX).
func TestSgemmHalfAMX(t *testing.T) {
	if !HasAMX() {
		t.Skip("no AMX-BF16 on this machine (or the OS does not grant the tile state): the AMX kernel is not tested here; TestSgemmAMXGo covers its layouts")
	}
	worst := 0.0
	for si, sh := range amxShapes {
		m, n, k := sh[0], sh[1], sh[2]
		a, b, c0 := amxOperands(uint64(si)+40, m, n, k)
		for _, acc := range []bool{false, true} {
			worst = max(worst, amxCase(t, "amx", m, n, k, a, b, c0, acc, false, amxKernelAsm))
			amxCase(t, "amx one-hot", m, n, k, a, oneHot(uint64(si), n, k), c0, false, true, amxKernelAsm)

			want := append([]float32(nil), c0...)
			if err := SgemmHalf(BF16, m, n, k, a, k, b, k, want, n, acc); err != nil {
				t.Fatal(err)
			}
			var s SplitRows
			s.Reset(m, k)
			s.Set(0, m, a, k)
			got := append([]float32(nil), c0...)
			if _, err := SgemmHalfSplit(&s, n, b, k, got, n, acc, nil); err != nil {
				t.Fatal(err)
			}
			p, err := PackHalf(BF16, n, k, b, k)
			if err != nil {
				t.Fatal(err)
			}
			pk := append([]float32(nil), c0...)
			err = SgemmPackedHalf(m, a, k, p, pk, n, acc)
			if m < AMXMinRows {
				// SgemmHalf keeps the FMA path for short A; SgemmPackedHalf refuses the AMX tiles
				if err == nil {
					t.Fatalf("%v: SgemmPackedHalf multiplied %d rows with AMX tiles", sh, m)
				}
				SetAMX(false)
				fma := append([]float32(nil), c0...)
				err := SgemmHalf(BF16, m, n, k, a, k, b, k, fma, n, acc)
				SetAMX(true)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if math.Float32bits(fma[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v acc=%v: C[%d]: SgemmHalf %g with AMX on, %g off", sh, acc, i, want[i], fma[i])
					}
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) || math.Float32bits(pk[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v acc=%v: C[%d]: SgemmHalf %g, SgemmHalfSplit %g, SgemmPackedHalf %g", sh, acc, i, want[i], got[i], pk[i])
				}
			}
		}
	}
	t.Logf("largest error of the AMX kernel: %.2f units of 2⁻²⁴·Σ|ab| (bound 3k+2)", worst)
	// with AMX off, SgemmPackedHalf refuses tiles packed for it (the caller then uses SgemmHalf)
	p, err := PackHalf(BF16, 32, 32, make([]byte, 2*32*32), 32)
	if err != nil {
		t.Fatal(err)
	}
	SetAMX(false)
	defer SetAMX(true)
	if err := SgemmPackedHalf(1, make([]float32, 32), 32, p, make([]float32, 32), 32, false); err == nil {
		t.Error("SgemmPackedHalf multiplied tiles packed for AMX with AMX off")
	}
	if _, err := SgemmHalfSplit(&SplitRows{}, 1, make([]byte, 2), 1, make([]float32, 1), 1, false, nil); err == nil {
		t.Error("SgemmHalfSplit ran with AMX off")
	}
}
