package convert

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/quant"
)

func studentT(r *rand.Rand, nu float64) float32 {
	// t = z / sqrt(chi2/nu), chi2 as a sum of nu squared normals (nu integer)
	z := r.NormFloat64()
	var c float64
	for i := 0; i < int(nu); i++ {
		g := r.NormFloat64()
		c += g * g
	}
	return float32(z / math.Sqrt(c/nu))
}

// Grouped Q4_0/Q8_0 blocks decode through ggml's own decoder to d·q with one d per group, and
// the searched scale is never worse (weighted squared error, float64) than the plain
// max-based scale of the reference quantizers, on Gaussian and heavy-tailed data.
func TestQuantizeGrouped(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const rows, cols = 16, 512
	for _, dist := range []string{"normal", "student-t3"} {
		x := make([]float32, rows*cols)
		for i := range x {
			if dist == "normal" {
				x[i] = float32(r.NormFloat64())
			} else {
				x[i] = studentT(r, 3)
			}
		}
		imp := make([]float32, cols)
		for i := range imp {
			imp[i] = float32(r.ExpFloat64())
		}
		for _, typ := range []gguf.GGMLType{gguf.TypeQ4_0, gguf.TypeQ8_0} {
			for _, group := range []int{64, 128} {
				for _, w := range [][]float32{nil, imp} {
					rb, _ := quant.RowSize(typ, cols)
					dst := make([]byte, rows*rb)
					if err := quantizeGrouped(typ, dst, x, rows, cols, group, w); err != nil {
						t.Fatal(err)
					}
					y := make([]float32, len(x))
					if err := quant.Dequantize(typ, y, dst); err != nil {
						t.Fatal(err)
					}
					bs := rb / (cols / 32)
					qmax := 7.0
					if typ == gguf.TypeQ8_0 {
						qmax = 127
					}
					for row := 0; row < rows; row++ {
						for g0 := 0; g0 < cols; g0 += group {
							d0 := dst[row*rb+g0/32*bs : row*rb+g0/32*bs+2]
							for b := 1; b < group/32; b++ {
								o := row*rb + (g0/32+b)*bs
								if dst[o] != d0[0] || dst[o+1] != d0[1] {
									t.Fatalf("%v g%d: row %d group %d blocks have different scales", typ, group, row, g0)
								}
							}
							// plain max scale, rounded like the stored one
							var amax, maxv float64
							for c := g0; c < g0+group; c++ {
								if a := math.Abs(float64(x[row*cols+c])); a > amax {
									amax, maxv = a, float64(x[row*cols+c])
								}
							}
							base := amax / qmax
							if typ == gguf.TypeQ4_0 {
								base = -maxv / 8
							}
							dref := float64(quant.FP16ToFP32(quant.FP32ToFP16(float32(base))))
							var eGot, eRef float64
							for c := g0; c < g0+group; c++ {
								wt := 1.0
								if w != nil {
									wt = float64(w[c])
								}
								v := float64(x[row*cols+c])
								q := math.Round(v / dref)
								q = math.Max(math.Min(q, qmax), -qmax-boolF(typ == gguf.TypeQ4_0))
								eRef += wt * (v - dref*q) * (v - dref*q)
								dg := v - float64(y[row*cols+c])
								eGot += wt * dg * dg
							}
							if eGot > eRef*(1+1e-6)+1e-12 {
								t.Fatalf("%s %v g%d w=%v row %d group %d: error %.6g above the max-scale error %.6g", dist, typ, group, w != nil, row, g0, eGot, eRef)
							}
						}
					}
				}
			}
		}
	}
	if err := quantizeGrouped(gguf.TypeQ4_0, make([]byte, 18*3), make([]float32, 96), 1, 96, 64, nil); err == nil {
		t.Error("group not dividing the row accepted")
	}
	nan := make([]float32, 64)
	nan[3] = float32(math.NaN())
	if err := quantizeGrouped(gguf.TypeQ8_0, make([]byte, 68), nan, 1, 64, 64, nil); err == nil {
		t.Error("NaN accepted")
	}
	// all-zero group: scale 0, codes 0, decodes to zeros
	z := make([]byte, 36)
	if err := quantizeGrouped(gguf.TypeQ4_0, z, make([]float32, 64), 1, 64, 64, nil); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, 64)
	quant.Dequantize(gguf.TypeQ4_0, y, z)
	for _, v := range y {
		if v != 0 {
			t.Fatal("zero group does not decode to zero")
		}
	}
}

func boolF(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
