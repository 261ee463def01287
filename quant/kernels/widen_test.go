package kernels

import (
	"math"
	"testing"
)

// TestWiden converts all 65536 fp16 and bf16 bit patterns with the assembly and the Go path
// (several lengths, so both the vector body and the tail run) and compares them bit for bit
// (NaN only as NaN: F16C quiets signalling NaNs).
func TestWiden(t *testing.T) {
	src := make([]byte, 2*65536)
	for h := 0; h < 65536; h++ {
		src[2*h], src[2*h+1] = byte(h), byte(h>>8)
	}
	defer SetPureGo(false)
	for _, bf := range []bool{false, true} {
		for _, pure := range []bool{true, false} {
			SetPureGo(pure)
			for _, n := range []int{65536, 65531, 7, 1} {
				got := make([]float32, n)
				if bf {
					WidenBF16(got, src)
				} else {
					WidenF16(got, src)
				}
				for i, v := range got {
					h := uint16(i)
					var ref float32
					if bf {
						ref = math.Float32frombits(uint32(h) << 16)
					} else {
						ref = halfToFloat(h)
					}
					if math.IsNaN(float64(ref)) {
						if !math.IsNaN(float64(v)) {
							t.Fatalf("bf16=%v pure=%v n=%d: %#04x: got %v, want NaN", bf, pure, n, h, v)
						}
						continue
					}
					if math.Float32bits(v) != math.Float32bits(ref) {
						t.Fatalf("bf16=%v pure=%v n=%d: %#04x: got %#08x, want %#08x", bf, pure, n, h, math.Float32bits(v), math.Float32bits(ref))
					}
				}
			}
		}
	}
}

// TestFirstNonFinite puts each kind of non-finite value (NaN with several payloads, ±Inf) at
// every position of rows up to 100 values long and of a long row, with a second one later, on
// the assembly (32 values per step) and the pure-Go paths; finite values with large exponents
// (±MaxFloat32) and subnormals around it must not count.
func TestFirstNonFinite(t *testing.T) {
	defer SetPureGo(false)
	bads := []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0x7f800000, 0xff800000}
	for _, pure := range []bool{false, true} {
		SetPureGo(pure)
		for _, n := range append(seqInts(0, 100), 1000, 4099) {
			x := make([]float32, n)
			for i := range x {
				switch i % 4 {
				case 0:
					x[i] = float32(i) - 3
				case 1:
					x[i] = math.MaxFloat32
				case 2:
					x[i] = -math.MaxFloat32
				default:
					x[i] = math.Float32frombits(uint32(i) & 0x807fffff) // ±0 and subnormals
				}
			}
			if got := FirstNonFinite(x); got != -1 {
				t.Fatalf("pure=%v n=%d all finite: got %d", pure, n, got)
			}
			for p := 0; p < n; p++ {
				if n > 100 && p%37 != 0 && p != n-1 {
					continue
				}
				bad := bads[p%len(bads)]
				y := append([]float32(nil), x...)
				y[p] = math.Float32frombits(bad)
				if p+1 < n {
					y[n-1] = float32(math.NaN())
				}
				if got := FirstNonFinite(y); got != p {
					t.Fatalf("pure=%v n=%d bad %#08x at %d: got %d", pure, n, bad, p, got)
				}
			}
		}
	}
}

func seqInts(lo, hi int) []int {
	var s []int
	for i := lo; i <= hi; i++ {
		s = append(s, i)
	}
	return s
}
