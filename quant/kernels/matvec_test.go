package kernels

import (
	"encoding/binary"
	"math"
	"testing"
)

func TestMatVec(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(3)
		const rows = 37
		for _, wt := range quantTypes {
			at, _ := ActivationType(wt)
			n := 3 * 256
			rowBytes, err := RowBytes(wt, n)
			if err != nil {
				t.Fatal(err)
			}
			w := randWeights(r, wt, rows*n/BlockSize(wt), 0.02, true)
			x := randFloats(r, n, true, 1)
			xq, err := QuantizeActivations(wt, nil, x)
			if err != nil {
				t.Fatal(err)
			}
			if len(xq) != n/BlockSize(at)*BlockBytes(at) {
				t.Fatalf("%v: QuantizeActivations returned %d bytes", wt, len(xq))
			}
			out := make([]float32, rows)
			for i := range out {
				out[i] = float32(math.NaN())
			}
			if err := MatVec(wt, out, w, rowBytes, xq, 5, 29); err != nil {
				t.Fatalf("%v: %v", wt, err)
			}
			dot := kernelFor(wt)
			for i := range out {
				inRange := i >= 5 && i < 29
				if !inRange {
					if !math.IsNaN(float64(out[i])) {
						t.Fatalf("%v: row %d outside the range was written", wt, i)
					}
					continue
				}
				want := dot(n, w[i*rowBytes:(i+1)*rowBytes], xq)
				if math.Float32bits(out[i]) != math.Float32bits(want) {
					t.Fatalf("%v row %d: MatVec %g, Dot %g", wt, i, out[i], want)
				}
			}
			// Argument errors.
			bad := []struct {
				name string
				err  error
			}{
				{"unsupported type", MatVec(Q8_K, out, w, rowBytes, xq, 0, 1)},
				{"row bytes not a block multiple", MatVec(wt, out, w, rowBytes-1, xq, 0, 1)},
				{"zero row bytes", MatVec(wt, out, w, 0, xq, 0, 1)},
				{"short activations", MatVec(wt, out, w, rowBytes, xq[:len(xq)-1], 0, 1)},
				{"range past weights", MatVec(wt, make([]float32, rows+1), w, rowBytes, xq, 0, rows+1)},
				{"range past out", MatVec(wt, out[:10], w, rowBytes, xq, 0, 11)},
				{"reversed range", MatVec(wt, out, w, rowBytes, xq, 9, 8)},
				{"negative start", MatVec(wt, out, w, rowBytes, xq, -1, 8)},
			}
			for _, b := range bad {
				if b.err == nil {
					t.Errorf("%v: %s: no error", wt, b.name)
				}
			}
		}
	})
}

// TestMatVecLongRows covers rows longer than MatVec's on-stack activation-scale buffer.
func TestMatVecLongRows(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(6)
		for _, wt := range []Type{Q8_0, Q4_0} {
			n := 32 * 700
			rowBytes, _ := RowBytes(wt, n)
			w := randWeights(r, wt, 3*n/32, 0.02, true)
			xq, _ := QuantizeActivations(wt, nil, randFloats(r, n, true, 1))
			out := make([]float32, 3)
			if err := MatVec(wt, out, w, rowBytes, xq, 0, 3); err != nil {
				t.Fatal(err)
			}
			for i := range out {
				ref, s := refDot(wt, w[i*rowBytes:], Q8_0, xq, n)
				if math.Abs(float64(out[i])-ref) > refTol(n/32)*s {
					t.Fatalf("%v row %d: %g, reference %g", wt, i, out[i], ref)
				}
			}
		}
	})
}

func TestMatVecFloat(t *testing.T) {
	forEachImpl(t, func(t *testing.T) {
		r := newRNG(4)
		const rows, n = 11, 77
		x := randFloats(r, n, false, 1)
		for _, wt := range []Type{F32, F16, BF16} {
			es := BlockBytes(wt)
			rowBytes := n*es + 6 // padded rows
			w := make([]byte, rows*rowBytes)
			for i := 0; i < rows; i++ {
				vals := randFloats(r, n, true, 1)
				for j, v := range vals {
					p := w[i*rowBytes+j*es:]
					switch wt {
					case F32:
						binary.LittleEndian.PutUint32(p, math.Float32bits(v))
					case F16:
						binary.LittleEndian.PutUint16(p, floatToHalf(v))
					case BF16:
						binary.LittleEndian.PutUint16(p, uint16(math.Float32bits(v)>>16))
					}
				}
			}
			out := make([]float32, rows)
			if err := MatVecFloat(wt, out, w, rowBytes, x, 0, rows); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < rows; i++ {
				row := w[i*rowBytes:]
				var ref, s float64
				for j := 0; j < n; j++ {
					var v float64
					switch wt {
					case F32:
						v = float64(math.Float32frombits(binary.LittleEndian.Uint32(row[4*j:])))
					case F16:
						v = float64(halfToFloat(binary.LittleEndian.Uint16(row[2*j:])))
					case BF16:
						v = float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(row[2*j:])) << 16))
					}
					ref += v * float64(x[j])
					s += math.Abs(v * float64(x[j]))
				}
				if math.Abs(float64(out[i])-ref) > float64(n+8)*u32*s {
					t.Fatalf("%v row %d: %g, reference %g", wt, i, out[i], ref)
				}
			}
			if err := MatVecFloat(wt, out, w, n*es-1, x, 0, 1); err == nil {
				t.Errorf("%v: short row size accepted", wt)
			}
			if err := MatVecFloat(wt, out, w[:rowBytes*3], rowBytes, x, 0, 4); err == nil {
				t.Errorf("%v: range past the weights accepted", wt)
			}
		}
		if err := MatVecFloat(Q8_0, make([]float32, 1), make([]byte, 64), 64, make([]float32, 4), 0, 1); err == nil {
			t.Error("MatVecFloat accepted Q8_0")
		}
	})
}

func TestTypes(t *testing.T) {
	for _, c := range []struct {
		t          Type
		bs, bb, id int
		act        Type
	}{
		{F32, 1, 4, 0, F32}, {F16, 1, 2, 1, F32}, {BF16, 1, 2, 30, F32},
		{Q4_0, 32, 18, 2, Q8_0}, {Q8_0, 32, 34, 8, Q8_0},
		{Q4_K, 256, 144, 12, Q8_K}, {Q5_K, 256, 176, 13, Q8_K}, {Q6_K, 256, 210, 14, Q8_K},
	} {
		if BlockSize(c.t) != c.bs || BlockBytes(c.t) != c.bb || int(c.t) != c.id {
			t.Errorf("%v: block %d/%d id %d", c.t, BlockSize(c.t), BlockBytes(c.t), int(c.t))
		}
		if a, err := ActivationType(c.t); err != nil || a != c.act {
			t.Errorf("%v: activation type %v, %v", c.t, a, err)
		}
		if rb, err := RowBytes(c.t, 4*c.bs); err != nil || rb != 4*c.bb {
			t.Errorf("%v: RowBytes = %d, %v", c.t, rb, err)
		}
	}
	if _, err := RowBytes(Q4_K, 100); err == nil {
		t.Error("RowBytes accepted a partial super-block")
	}
	if _, err := RowBytes(Type(99), 32); err == nil {
		t.Error("RowBytes accepted an unknown type")
	}
	if _, err := ActivationType(Q8_K); err == nil {
		t.Error("Q8_K has no weight dot kernel")
	}
	if Q5_K.String() != "q5_K" || Type(77).String() != "type(77)" {
		t.Error("Type.String")
	}
	t.Logf("implementation: %s", Implementation())
}

// TestNoAllocs: the hot kernels do not allocate (rows of up to 512 Q8_0 blocks for MatVec).
func TestNoAllocs(t *testing.T) {
	r := newRNG(5)
	const n = 4096
	x := randFloats(r, n, false, 1)
	for _, wt := range quantTypes {
		w := randWeights(r, wt, 8*n/BlockSize(wt), 0.02, false)
		xq, _ := QuantizeActivations(wt, nil, x)
		rowBytes, _ := RowBytes(wt, n)
		out := make([]float32, 8)
		dot := kernelFor(wt)
		allocs := testing.AllocsPerRun(20, func() {
			_ = MatVec(wt, out, w, rowBytes, xq, 0, 8)
			benchSink += dot(n, w, xq)
		})
		if allocs != 0 {
			t.Errorf("%v: %.1f allocations per MatVec+Dot", wt, allocs)
		}
	}
	q := make([]byte, n/256*BlockBytesQ8_K)
	if a := testing.AllocsPerRun(20, func() { QuantizeRowQ8K(q, x) }); a != 0 {
		t.Errorf("QuantizeRowQ8K: %.1f allocations", a)
	}
}
