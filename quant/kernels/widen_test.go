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

func TestFirstNonFinite(t *testing.T) {
	for n := 0; n < 20; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i) - 3
		}
		if n > 0 {
			x[n-1] = math.MaxFloat32
		}
		if got := FirstNonFinite(x); got != -1 {
			t.Fatalf("n=%d all finite: got %d", n, got)
		}
		for p := 0; p < n; p++ {
			for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
				y := append([]float32(nil), x...)
				y[p] = bad
				if p+1 < n {
					y[n-1] = float32(math.NaN())
				}
				if got := FirstNonFinite(y); got != p {
					t.Fatalf("n=%d bad %v at %d: got %d", n, bad, p, got)
				}
			}
		}
	}
}
