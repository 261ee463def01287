package safetensors

import (
	"math/rand/v2"
	"path/filepath"
	"testing"
)

// BenchmarkReadFloat32 converts a 4M-element tensor of each dtype to float32; the
// baseline is a plain copy of the same number of float32 values, in the same run.
func BenchmarkReadFloat32(b *testing.B) {
	const n = 1 << 22
	r := rand.New(rand.NewPCG(1, 1))
	vals := make([]float64, n)
	for i := range vals {
		vals[i] = studentT(r, 4) * 0.02
	}
	dir := b.TempDir()
	var wts []WriteTensor
	for _, d := range []DType{F32, BF16, F16, F8E4M3} {
		data, _ := encodeAs(d, vals)
		wts = append(wts, WriteTensor{Name: d.String(), DType: d, Shape: []int64{n}, Write: BytesWriter(data)})
	}
	p := filepath.Join(dir, "bench.safetensors")
	if err := WriteFile(p, wts, nil); err != nil {
		b.Fatal(err)
	}
	m, err := Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	dst := make([]float32, n)
	src := make([]float32, n)
	b.Run("baseline-copy", func(b *testing.B) {
		b.SetBytes(4 * n)
		for i := 0; i < b.N; i++ {
			copy(dst, src)
		}
	})
	for _, wt := range wts {
		b.Run(wt.Name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for i := 0; i < b.N; i++ {
				if err := m.ReadFloat32(wt.Name, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
