package calib

import (
	"math"
	"slices"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
	"github.com/tq-project/tq/internal/safetensors"
)

// TestLoadLayerKeepsHalf checks that loadLayer keeps the matrices of a BF16 or F16 checkpoint
// in that type (half the memory of float32), that widening them gives exactly the float32
// values the source reads, that vectors and F32 checkpoints stay float32, and that layerBytes
// (the memory plan) matches what was loaded.
func TestLoadLayerKeepsHalf(t *testing.T) {
	for _, tc := range []struct {
		dt   safetensors.DType
		want gguf.GGMLType
	}{{safetensors.BF16, gguf.TypeBF16}, {safetensors.F16, gguf.TypeF16}, {safetensors.F32, gguf.TypeF32}} {
		t.Run(tc.dt.String(), func(t *testing.T) {
			o := fixtures.Preset("qwen3moe")
			o.DType = tc.dt
			src, err := modelsrc.OpenHF(genModel(t, o))
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			lw, err := loadLayer(src, 1, 2)
			if err != nil {
				t.Fatal(err)
			}
			if got := layerBytes(src, 1); got != lw.bytes {
				t.Errorf("layerBytes %d, loaded %d", got, lw.bytes)
			}
			halves := 0
			for _, d := range lw.descs {
				tt := lw.tensors[d.Name]
				want := tc.want
				if len(d.Shape) < 2 {
					want = gguf.TypeF32
				}
				if tt.Type != want {
					t.Errorf("%s %v: kept as %v, want %v", d.Name, d.Shape, tt.Type, want)
				}
				if tt.Type != gguf.TypeF32 {
					halves++
				}
				n := int(elements(d.Shape))
				ref := make([]float32, n)
				if err := readTensor(src, d, ref); err != nil {
					t.Fatal(err)
				}
				cols := int(d.Shape[0])
				rows := make([]float32, n)
				lw.rows(d.Name, 0, n/cols, cols, rows)
				if !bitsEqual(rows, ref) {
					t.Errorf("%s: rows differ from the source's float32 values", d.Name)
				}
				if n > cols {
					if got := lw.floats(d.Name, cols, cols, nil); !bitsEqual(got, ref[cols:2*cols]) {
						t.Errorf("%s: floats of row 1 differ", d.Name)
					}
				}
			}
			if tc.want != gguf.TypeF32 && halves == 0 {
				t.Errorf("no tensor kept in %v", tc.want)
			}
		})
	}
}

// TestLoadLayerInexactFallsBack: a tensor whose checkpoint is BF16 but whose values are not
// (a transform changed them) is kept as float32, with its exact values.
func TestLoadLayerInexactFallsBack(t *testing.T) {
	src, err := modelsrc.OpenHF(genModel(t, fixtures.Preset("qwen3")))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bent := "blk.0.ffn_down.weight"
	ws := &bumpSource{WeightSource: src, name: bent}
	lw, err := loadLayer(ws, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range lw.descs {
		tt := lw.tensors[d.Name]
		if d.Name == bent {
			if tt.Type != gguf.TypeF32 {
				t.Fatalf("%s with inexact values kept as %v", d.Name, tt.Type)
			}
			ref := make([]float32, elements(d.Shape))
			if err := readTensor(ws, d, ref); err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(lw.floats(d.Name, 0, len(ref), nil), ref) {
				t.Errorf("%s: float32 fallback differs from the source", d.Name)
			}
		} else if len(d.Shape) >= 2 && tt.Type != gguf.TypeBF16 {
			t.Errorf("%s kept as %v, want bf16", d.Name, tt.Type)
		}
	}
}

// bumpSource changes the last value of tensor name by one float32 ulp (no longer a BF16 value).
type bumpSource struct {
	WeightSource
	name string
}

func (b *bumpSource) ReadRows(name string, row0, nrows int64, dst []float32) error {
	if err := b.WeightSource.ReadRows(name, row0, nrows, dst); err != nil {
		return err
	}
	for _, d := range b.Tensors() {
		if d.Name == name && name == b.name && row0+nrows == elements(d.Shape)/d.Shape[0] {
			i := int(nrows*d.Shape[0]) - 1
			dst[i] = math.Nextafter32(dst[i], float32(math.Inf(1)))
		}
	}
	return nil
}

func bitsEqual(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}
