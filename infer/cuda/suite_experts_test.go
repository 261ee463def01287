package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tq-project/tq/gguf"
)

// testFusedExperts checks the device-only routed-experts path against the host one and a
// float64 reference: MoERouteDevice leaves exactly MoERoute's selection and weights on the device;
// MatMulExperts gives every (token, slot) pair its expert's product (tolerance as MatMul:
// 1e-5·Σ|w·x|), with k = 1 pairing each input row with its own expert, and a zero row for an
// index outside the tensor; MoECombineDevice equals MoECombine bit for bit.
func testFusedExperts(t *testing.T, d *Device) {
	r := rand.New(rand.NewPCG(51, 52))
	for _, ty := range []gguf.GGMLType{gguf.TypeQ4_K, gguf.TypeQ8_0, gguf.TypeF16} {
		const rows, cols, nexp, T, k = 40, 256, 6, 3, 2
		src := studentT(r, nexp*rows*cols, 0.05)
		data, deq := encode(t, ty, src, nexp*rows, cols)
		w, err := d.Upload("experts", ty, []int64{cols, rows, nexp}, data)
		if err != nil {
			t.Fatal(err)
		}
		logits := distinctLogits(r, T, nexp)
		lb := mustAlloc(t, d, logits)
		selD := mustAlloc(t, d, make([]float32, T*k))
		wD := mustAlloc(t, d, make([]float32, T*k))
		if err := d.MoERouteDevice(lb, T, nexp, k, true, selD, wD); err != nil {
			t.Fatal(err)
		}
		sel := make([]int32, T*k)
		wts := make([]float32, T*k)
		if err := d.MoERoute(lb, T, nexp, k, true, sel, wts); err != nil {
			t.Fatal(err)
		}
		gotSel, gotW := mustRead(t, d, selD, T*k), mustRead(t, d, wD, T*k)
		for i := range sel {
			if int32(math.Float32bits(gotSel[i])) != sel[i] || gotW[i] != wts[i] {
				t.Fatalf("%s: device routing entry %d = expert %d weight %g, host %d %g", ty, i, int32(math.Float32bits(gotSel[i])), gotW[i], sel[i], wts[i])
			}
		}
		x := gaussian(r, T*cols, 1)
		xb := mustAlloc(t, d, x)
		y := mustAlloc(t, d, make([]float32, T*k*rows))
		check := func(what string, got []float32, xrow func(p int) []float32, exp []int32) {
			t.Helper()
			for p, e := range exp {
				xs := xrow(p)
				for row := 0; row < rows; row++ {
					var ref, mag float64
					if e >= 0 && int(e) < nexp {
						for i := 0; i < cols; i++ {
							v := float64(deq[(int(e)*rows+row)*cols+i]) * float64(xs[i])
							ref += v
							mag += math.Abs(v)
						}
					}
					if g := float64(got[p*rows+row]); !(math.Abs(g-ref) <= 1e-5*mag) {
						t.Fatalf("%s %s: pair %d (expert %d) row %d = %g, want %g", ty, what, p, e, row, g, ref)
					}
				}
			}
		}
		if err := d.MatMulExperts(y, w, xb, selD, T*k, k); err != nil {
			t.Fatal(err)
		}
		check("k=2", mustRead(t, d, y, T*k*rows), func(p int) []float32 { return x[(p/k)*cols : (p/k+1)*cols] }, sel)
		// k = 1: each of the first 3 rows of x with its own expert, one of them out of range
		own := []int32{4, -1, 0}
		ownF := make([]float32, len(own))
		for i, e := range own {
			ownF[i] = math.Float32frombits(uint32(e))
		}
		ob := mustAlloc(t, d, ownF)
		y1 := mustAlloc(t, d, filled(3*rows, nan32()))
		if err := d.MatMulExperts(y1, w, xb, ob, 3, 1); err != nil {
			t.Fatal(err)
		}
		check("k=1", mustRead(t, d, y1, 3*rows), func(p int) []float32 { return x[p*cols : (p+1)*cols] }, own)

		// the weighted sum of the slot rows, with device and host weights
		outD, outH := mustAlloc(t, d, make([]float32, T*rows)), mustAlloc(t, d, make([]float32, T*rows))
		if err := d.MoECombineDevice(outD, y, wD, T, k, rows); err != nil {
			t.Fatal(err)
		}
		if err := d.MoECombine(outH, y, wts, T, k, rows); err != nil {
			t.Fatal(err)
		}
		a, b := mustRead(t, d, outD, T*rows), mustRead(t, d, outH, T*rows)
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: MoECombineDevice[%d] = %g, MoECombine %g", ty, i, a[i], b[i])
			}
		}
		if err := d.MatMulExperts(y, w, xb.Slice(1, 100), selD, T*k, k); err == nil {
			t.Fatal("misaligned x accepted")
		}
		if err := d.FreeTensor(w); err != nil {
			t.Fatal(err)
		}
	}
}
