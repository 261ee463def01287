package quant

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/tq-project/tq/gguf"
)

var weightTypes = []gguf.GGMLType{
	gguf.TypeF32, gguf.TypeF16, gguf.TypeBF16,
	gguf.TypeQ4_0, gguf.TypeQ4_1, gguf.TypeQ5_0, gguf.TypeQ5_1, gguf.TypeQ8_0,
	gguf.TypeQ2_K, gguf.TypeQ3_K, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K,
	gguf.TypeIQ4_NL, gguf.TypeIQ4_XS,
}

// relRMSEBound is the accepted relative RMSE sqrt(mean((y−x)²)/mean(x²)) of the
// reference algorithm on normal / Student-t(3) / outlier-channel data: ggml's levels
// on the golden vectors (testdata/golden/README.md) plus 15 % (normal, outliers) or
// 30 % (Student-t(3), whose heavy tail makes the level vary from sample to sample).
// Improved mode must stay under the same bound and under the reference result.
var relRMSEBound = map[gguf.GGMLType][3]float64{
	gguf.TypeF32:    {0, 0, 0},
	gguf.TypeF16:    {0.0002 * 1.15, 0.0002 * 1.3, 0.0002 * 1.15},
	gguf.TypeBF16:   {0.0016 * 1.15, 0.0016 * 1.3, 0.0017 * 1.15},
	gguf.TypeQ4_0:   {0.0868 * 1.15, 0.1303 * 1.3, 0.1352 * 1.15},
	gguf.TypeQ4_1:   {0.0801 * 1.15, 0.0990 * 1.3, 0.1029 * 1.15},
	gguf.TypeQ5_0:   {0.0436 * 1.15, 0.0646 * 1.3, 0.0761 * 1.15},
	gguf.TypeQ5_1:   {0.0383 * 1.15, 0.0477 * 1.3, 0.0483 * 1.15},
	gguf.TypeQ8_0:   {0.0055 * 1.15, 0.0081 * 1.3, 0.0101 * 1.15},
	gguf.TypeQ2_K:   {0.2985 * 1.15, 0.3576 * 1.3, 0.2619 * 1.15},
	gguf.TypeQ3_K:   {0.1518 * 1.15, 0.1964 * 1.3, 0.1606 * 1.15},
	gguf.TypeQ4_K:   {0.0726 * 1.15, 0.0930 * 1.3, 0.0913 * 1.15},
	gguf.TypeQ5_K:   {0.0366 * 1.15, 0.0467 * 1.3, 0.0462 * 1.15},
	gguf.TypeQ6_K:   {0.0179 * 1.15, 0.0253 * 1.3, 0.0298 * 1.15},
	gguf.TypeIQ4_NL: {0.0763 * 1.15, 0.1018 * 1.3, 0.1083 * 1.15},
	gguf.TypeIQ4_XS: {0.0769 * 1.15, 0.1026 * 1.3, 0.1107 * 1.15},
}

func relRMSE(x, y []float32) float64 {
	var se, sx float64
	for i := range x {
		d := float64(x[i]) - float64(y[i])
		se += d * d
		sx += float64(x[i]) * float64(x[i])
	}
	return math.Sqrt(se / sx)
}

func roundTripT(t *testing.T, typ gguf.GGMLType, ds dataset, opts *Options) []float32 {
	t.Helper()
	q, _, err := RoundTrip(typ, ds.x, ds.nrows, ds.ncols, opts)
	if err != nil {
		t.Fatalf("%v/%s: %v", typ, ds.name, err)
	}
	y := make([]float32, len(ds.x))
	mustDeq(t, typ, y, q) // also asserts every value is finite
	return y
}

// TestErrorBounds: every type's relative RMSE is within its stated bound on random
// Gaussian, Student-t(3) and outlier-channel data, the output is finite, and the
// improved search never has a higher error than the reference algorithm.
func TestErrorBounds(t *testing.T) {
	for _, typ := range weightTypes {
		for k, ds := range propertyDatasets() {
			yRef := roundTripT(t, typ, ds, nil)
			yImp := roundTripT(t, typ, ds, &Options{Mode: ModeImproved})
			eRef, eImp := relRMSE(ds.x, yRef), relRMSE(ds.x, yImp)
			bound := relRMSEBound[typ][k]
			if eRef > bound || eImp > bound {
				t.Errorf("%v/%s: relative RMSE ref %.5f improved %.5f, bound %.5f", typ, ds.name, eRef, eImp, bound)
			}
			if eImp > eRef {
				t.Errorf("%v/%s: improved %.6f worse than reference %.6f", typ, ds.name, eImp, eRef)
			}
			if typ == gguf.TypeF32 && eRef != 0 {
				t.Errorf("f32 is not lossless")
			}
		}
	}
}

// TestImprovedWeightedBeatsUnweighted: with non-uniform importance, improved mode
// with the importance has a lower importance-weighted error than the reference
// algorithm without it and than improved mode without it.
func TestImprovedWeightedBeatsUnweighted(t *testing.T) {
	for _, typ := range weightTypes {
		if typ == gguf.TypeF32 || typ == gguf.TypeF16 || typ == gguf.TypeBF16 {
			continue
		}
		for i, ds := range propertyDatasets() {
			im := importanceFor(ds.x, ds.ncols, uint64(100+i))
			yW := roundTripT(t, typ, ds, &Options{Mode: ModeImproved, Importance: im})
			yU := roundTripT(t, typ, ds, &Options{Mode: ModeImproved})
			yR := roundTripT(t, typ, ds, nil)
			eW := weightedTensorSSE(ds.x, yW, ds.ncols, im)
			eU := weightedTensorSSE(ds.x, yU, ds.ncols, im)
			eR := weightedTensorSSE(ds.x, yR, ds.ncols, im)
			if !(eW < eU && eW < eR) {
				t.Errorf("%v/%s: weighted SSE with importance %g, improved unweighted %g, reference %g", typ, ds.name, eW, eU, eR)
			}
		}
	}
}

func TestNonFiniteRejected(t *testing.T) {
	bad := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for _, typ := range SupportedTypes() {
		for _, mode := range []Mode{ModeReference, ModeImproved} {
			for _, v := range bad {
				x := gaussian(5, 2*512)
				x[512+77] = v
				dst := make([]byte, 2*mustRowSize(t, typ, 512))
				err := Quantize(typ, dst, x, 2, 512, &Options{TensorName: "blk.3.ffn_up.weight", Mode: mode})
				if err == nil || !strings.Contains(err.Error(), "blk.3.ffn_up.weight") || !strings.Contains(err.Error(), "row 1, column 77") {
					t.Errorf("%v %v: value %v: error %v", typ, mode, v, err)
				}
			}
		}
	}
}

func TestOverflowRejected(t *testing.T) {
	cases := []struct {
		typ gguf.GGMLType
		v   float32
	}{
		{gguf.TypeF16, 1e5}, {gguf.TypeBF16, math.MaxFloat32}, {gguf.TypeQ8_0, 1e8}, {gguf.TypeQ4_0, 1e6},
		{gguf.TypeQ4_K, 1e8}, {gguf.TypeQ6_K, 1e10}, {gguf.TypeIQ4_NL, 1e8},
	}
	for _, c := range cases {
		for _, mode := range []Mode{ModeReference, ModeImproved} {
			x := gaussian(6, 256)
			x[10] = c.v
			dst := make([]byte, mustRowSize(t, c.typ, 256))
			err := Quantize(c.typ, dst, x, 1, 256, &Options{TensorName: "big", Mode: mode})
			if err == nil || !strings.Contains(err.Error(), "big") || !strings.Contains(err.Error(), "overflow") {
				t.Errorf("%v %v: |x| = %g: got %v, want an overflow error", c.typ, mode, c.v, err)
			}
		}
	}
}

func mustRowSize(t testing.TB, typ gguf.GGMLType, n int) int {
	t.Helper()
	rs, err := RowSize(typ, n)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestRowSizeAndFallback(t *testing.T) {
	if rs := mustRowSize(t, gguf.TypeQ4_K, 4096); rs != 4096/256*144 {
		t.Errorf("q4_K row size %d", rs)
	}
	for _, typ := range []gguf.GGMLType{gguf.TypeQ2_K, gguf.TypeQ6_K, gguf.TypeIQ4_XS} {
		if _, err := RowSize(typ, 4096+32); err == nil || !strings.Contains(err.Error(), "multiple of 256") {
			t.Errorf("%v: ncols 4128 accepted or unclear error: %v", typ, err)
		}
		err := Quantize(typ, make([]byte, 100), make([]float32, 4128), 1, 4128, &Options{TensorName: "odd"})
		if err == nil || !strings.Contains(err.Error(), "odd") {
			t.Errorf("%v: Quantize error %v", typ, err)
		}
	}
	if _, err := RowSize(gguf.TypeIQ2_XXS, 256); err == nil {
		t.Error("unsupported type accepted")
	}
	fb := []struct {
		in   gguf.GGMLType
		n    int
		want gguf.GGMLType
	}{
		{gguf.TypeQ4_K, 4096, gguf.TypeQ4_K},
		{gguf.TypeQ2_K, 4128, gguf.TypeQ4_0}, {gguf.TypeQ3_K, 4128, gguf.TypeQ4_0},
		{gguf.TypeQ4_K, 4128, gguf.TypeQ5_0}, {gguf.TypeQ5_K, 4128, gguf.TypeQ5_1},
		{gguf.TypeQ6_K, 4128, gguf.TypeQ8_0}, {gguf.TypeIQ4_XS, 4128, gguf.TypeIQ4_NL},
		{gguf.TypeIQ2_XXS, 4128, gguf.TypeIQ4_NL},
		{gguf.TypeQ4_K, 100, gguf.TypeF16}, {gguf.TypeQ8_0, 100, gguf.TypeF16},
		{gguf.TypeQ8_0, 96, gguf.TypeQ8_0}, {gguf.TypeF16, 7, gguf.TypeF16},
		{gguf.TypeQ1_0, 100, gguf.TypeF16},
	}
	for _, c := range fb {
		if got := FallbackType(c.in, c.n); got != c.want {
			t.Errorf("FallbackType(%v, %d) = %v, want %v", c.in, c.n, got, c.want)
		}
	}
	if _, err := FallbackTypeChecked(gguf.TypeQ1_0, 100); err == nil {
		t.Error("FallbackTypeChecked(q1_0, 100): no error; llama.cpp has no fallback")
	}
}

func TestQuantizeDeterministicAcrossThreads(t *testing.T) {
	x := studentT3(21, 37*512)
	im := importanceFor(x, 512, 3)
	for _, typ := range []gguf.GGMLType{gguf.TypeQ4_K, gguf.TypeIQ4_NL, gguf.TypeQ6_K} {
		for _, mode := range []Mode{ModeReference, ModeImproved} {
			a := make([]byte, 37*mustRowSize(t, typ, 512))
			b := make([]byte, len(a))
			if err := Quantize(typ, a, x, 37, 512, &Options{Mode: mode, Importance: im, Threads: 1}); err != nil {
				t.Fatal(err)
			}
			if err := Quantize(typ, b, x, 37, 512, &Options{Mode: mode, Importance: im, Threads: 4}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%v %v: output depends on the thread count", typ, mode)
			}
		}
	}
}

func TestQuantizeValidation(t *testing.T) {
	x := gaussian(1, 512)
	dst := make([]byte, mustRowSize(t, gguf.TypeQ4_0, 512))
	checks := []struct {
		name string
		err  error
	}{
		{"short src", Quantize(gguf.TypeQ4_0, dst, x[:500], 1, 512, nil)},
		{"short dst", Quantize(gguf.TypeQ4_0, dst[:10], x, 1, 512, nil)},
		{"importance length", Quantize(gguf.TypeQ4_0, dst, x, 1, 512, &Options{Importance: make([]float32, 10)})},
		{"negative importance", Quantize(gguf.TypeQ4_0, dst, x, 1, 512, &Options{Importance: append(make([]float32, 511), -1)})},
		{"NaN importance", Quantize(gguf.TypeQ4_0, dst, x, 1, 512, &Options{Importance: append(make([]float32, 511), float32(math.NaN()))})},
		{"mode", Quantize(gguf.TypeQ4_0, dst, x, 1, 512, &Options{Mode: 7})},
		{"type", Quantize(gguf.TypeIQ2_S, dst, x, 1, 512, nil)},
		{"dequant length", Dequantize(gguf.TypeQ4_0, make([]float32, 512), dst[:17])},
		{"dequant block", Dequantize(gguf.TypeQ4_0, make([]float32, 500), dst)},
		{"dequant type", Dequantize(gguf.TypeIQ1_M, make([]float32, 256), make([]byte, 56))},
	}
	for _, c := range checks {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	if err := Quantize(gguf.TypeQ4_0, nil, nil, 0, 512, nil); err != nil {
		t.Errorf("empty tensor: %v", err)
	}
}

// TestZeroImportance: importance that is zero on whole blocks must still give a
// finite, sensible result (the search falls back to uniform weights there).
func TestZeroImportance(t *testing.T) {
	x := gaussian(8, 4*512)
	im := make([]float32, 512)
	for i := 256; i < 512; i++ {
		im[i] = 1
	}
	for _, typ := range weightTypes {
		ds := dataset{"zero_imp", 4, 512, x}
		y := roundTripT(t, typ, ds, &Options{Mode: ModeImproved, Importance: im})
		// the zero-importance half must still be quantized reasonably
		half := make([]float32, 0, 4*256)
		hy := make([]float32, 0, 4*256)
		for r := 0; r < 4; r++ {
			half = append(half, x[r*512:r*512+256]...)
			hy = append(hy, y[r*512:r*512+256]...)
		}
		if e := relRMSE(half, hy); e > 0.5 {
			t.Errorf("%v: zero-importance columns reconstructed with relative RMSE %.3f", typ, e)
		}
	}
}

func TestMeasure(t *testing.T) {
	x := []float32{1, -2, 3, 4}
	y := []float32{1, -1, 3, 2}
	st := Measure(x, y, 2, []float32{1, 3})
	// errors: 0, -1, 0, 2 ; weights by column: 1, 3, 1, 3
	if math.Abs(st.RMSE-math.Sqrt(5.0/4)) > 1e-12 || math.Abs(st.WeightedRMSE-math.Sqrt((3*1+3*4)/8.0)) > 1e-12 ||
		st.MaxAbs != 2 || math.Abs(st.SNRdB-10*math.Log10(30.0/5)) > 1e-12 || st.N != 4 {
		t.Errorf("Measure = %+v", st)
	}
	if st := Measure(x, x, 4, nil); !math.IsInf(st.SNRdB, 1) || st.RMSE != 0 || st.WeightedRMSE != 0 {
		t.Errorf("exact reconstruction: %+v", st)
	}
	ds := propertyDatasets()[0]
	_, st, err := RoundTrip(gguf.TypeQ4_K, ds.x, ds.nrows, ds.ncols, nil)
	if err != nil || st.RMSE <= 0 || st.SNRdB < 15 || st.SNRdB > 40 {
		t.Errorf("RoundTrip q4_K: %v %v", st, err)
	}
}

func TestFP16Conversions(t *testing.T) {
	cases := []struct {
		f float32
		h uint16
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff},
		{65519.99, 0x7bff}, {65520, 0x7c00}, {1e-8, 0}, {5.9604645e-08, 1}, {2.9802322e-08, 0},
		{float32(math.Inf(-1)), 0xfc00}, {float32(math.NaN()), 0x7e00},
	}
	for _, c := range cases {
		if got := FP32ToFP16(c.f); got != c.h {
			t.Errorf("FP32ToFP16(%v) = %#04x, want %#04x", c.f, got, c.h)
		}
	}
	// every finite half round-trips exactly
	for h := 0; h < 1<<16; h++ {
		f := FP16ToFP32(uint16(h))
		if math.IsNaN(float64(f)) {
			continue
		}
		if back := FP32ToFP16(f); back != uint16(h) {
			t.Fatalf("half %#04x -> %v -> %#04x", h, f, back)
		}
	}
	if FP32ToBF16(1) != 0x3f80 || BF16ToFP32(0x3f80) != 1 || FP32ToBF16(math.Float32frombits(0x7f7f8000)) != 0x7f80 {
		t.Error("bf16 conversion")
	}
}

// TestNearestIQ4: the table-driven codebook search equals the literal port of
// ggml's best_index_int8 around every midpoint and codebook entry (±4096 ulps),
// at the extremes, on random values and on NaN.
func TestNearestIQ4(t *testing.T) {
	check := func(v float32) {
		if a, b := nearestIQ4(v), bestIndexIQ4(v); a != b {
			t.Fatalf("v = %v (%#08x): nearestIQ4 %d, best_index %d", v, math.Float32bits(v), a, b)
		}
	}
	var pts []float32
	for k := 0; k < 16; k++ {
		pts = append(pts, kvaluesIQ4NLf[k])
		if k < 15 {
			pts = append(pts, (kvaluesIQ4NLf[k]+kvaluesIQ4NLf[k+1])/2)
		}
	}
	pts = append(pts, 0, -127.5, 113.5)
	for _, p := range pts {
		b := math.Float32bits(p)
		for d := -4096; d <= 4096; d++ {
			check(math.Float32frombits(uint32(int64(b) + int64(d))))
		}
	}
	for _, v := range gaussian(77, 200000) {
		check(v * 60)
		check(v * 1e-6)
	}
	check(float32(math.NaN()))
	check(float32(math.Inf(1)))
	check(float32(math.Inf(-1)))
	check(math.MaxFloat32)
}

// TestExtremeImportance: importance values spanning the float32 range (huge, tiny,
// zero) must neither fail nor produce non-finite output in either mode.
func TestExtremeImportance(t *testing.T) {
	x := studentT3(41, 2*512)
	im := make([]float32, 512)
	for i := range im {
		switch i % 4 {
		case 0:
			im[i] = 3e38
		case 1:
			im[i] = 1e-38
		case 2:
			im[i] = 0
		default:
			im[i] = 1
		}
	}
	ds := dataset{"extreme_importance", 2, 512, x}
	for _, typ := range weightTypes {
		// Reference mode is ggml's algorithm: its float32 sums may overflow with such
		// weights, which must surface as a clear error, never as a non-finite block.
		q, _, err := RoundTrip(typ, x, 2, 512, &Options{Importance: im, TensorName: "ext"})
		if err != nil {
			if !strings.Contains(err.Error(), "not finite") || !strings.Contains(err.Error(), "ext") {
				t.Errorf("%v reference: unclear error %v", typ, err)
			}
		} else {
			mustDeq(t, typ, make([]float32, len(x)), q)
		}
		// Improved mode rescales the weights and must succeed.
		y := roundTripT(t, typ, ds, &Options{Mode: ModeImproved, Importance: im})
		if e := relRMSE(x, y); e > 1 {
			t.Errorf("%v improved: relative RMSE %.3f", typ, e)
		}
	}
}
