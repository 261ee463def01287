package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// requireRef skips (or, with TQ_REQUIRE_REFS=1, fails) when a reference path is missing.
func requireRef(t testing.TB, path, what string) {
	t.Helper()
	if _, err := os.Stat(path); err == nil {
		return
	}
	msg := "reference missing: " + what + " (" + path + "); run testdata/llamacpp/setup.sh"
	if os.Getenv("TQ_REQUIRE_REFS") == "1" {
		t.Fatal(msg + " [TQ_REQUIRE_REFS=1]")
	}
	t.Skip(msg)
}

// allTypesMetadata has every scalar type, strings, arrays of every element type (incl.
// empty and nested arrays) and edge values.
func allTypesMetadata() Metadata {
	nan := math.Float32frombits(0x7fc00123)
	return Metadata{
		{"general.architecture", String("llama")},
		{"t.u8", Uint8(255)},
		{"t.i8", Int8(-128)},
		{"t.u16", Uint16(65535)},
		{"t.i16", Int16(-32768)},
		{"t.u32", Uint32(math.MaxUint32)},
		{"t.i32", Int32(math.MinInt32)},
		{"t.u64", Uint64(math.MaxUint64)},
		{"t.i64", Int64(math.MinInt64)},
		{"t.f32", Float32(-1.5e-39)}, // subnormal
		{"t.f32nan", Float32(nan)},
		{"t.f64", Float64(math.Copysign(0, -1))},
		{"t.f64inf", Float64(math.Inf(1))},
		{"t.true", Bool(true)},
		{"t.false", Bool(false)},
		{"t.str", String("héllo, 世界 \x00 \n")},
		{"t.empty", String("")},
		{"t.bad_utf8_value", String("\xff\xfe")},
		{"t.a.u8", Array([]uint8{0, 1, 255})},
		{"t.a.i8", Array([]int8{-128, 0, 127})},
		{"t.a.u16", Array([]uint16{0, 65535})},
		{"t.a.i16", Array([]int16{-32768, 32767})},
		{"t.a.u32", Array([]uint32{1, 2, math.MaxUint32})},
		{"t.a.i32", Array([]int32{-1, 0, 1})},
		{"t.a.u64", Array([]uint64{math.MaxUint64})},
		{"t.a.i64", Array([]int64{math.MinInt64, math.MaxInt64})},
		{"t.a.f32", Array([]float32{1.5, float32(math.Inf(-1)), nan})},
		{"t.a.f64", Array([]float64{math.Pi, -0.0})},
		{"t.a.bool", Array([]bool{true, false, true})},
		{"t.a.str", Array([]string{"a", "", "ü"})},
		{"t.a.empty", Array([]uint32{})},
		{"t.a.nested", Array([]Value{
			Array([]int32{1, 2}),
			Array([]string{"x"}),
			Array([]Value{Array([]float64{2.5}), Array([]bool{})}),
		})},
		{"t.a.bigstr", Array(makeStrings(3000))},
	}
}

func makeStrings(n int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	out := make([]string, n)
	for i := range out {
		b := make([]byte, r.IntN(12))
		for j := range b {
			b[j] = byte('a' + r.IntN(26))
		}
		out[i] = string(b)
	}
	return out
}

type testTensor struct {
	name string
	dims []uint64
	typ  GGMLType
	data []byte
}

// makeTensors builds tensors of several types with random bytes as data.
func makeTensors(seed uint64) []testTensor {
	r := rand.New(rand.NewPCG(seed, 7))
	specs := []struct {
		dims []uint64
		typ  GGMLType
	}{
		{[]uint64{7}, TypeF32},
		{[]uint64{5, 3}, TypeF16},
		{[]uint64{3, 1, 2}, TypeBF16},
		{[]uint64{64, 3}, TypeQ8_0},
		{[]uint64{256, 2, 1, 2}, TypeQ4_K},
		{[]uint64{512, 1}, TypeQ6_K},
		{[]uint64{256}, TypeIQ4_XS},
		{[]uint64{3, 3}, TypeI32},
		{[]uint64{33}, TypeI8},
		{[]uint64{0, 4}, TypeF32}, // zero elements
		{[]uint64{96, 5}, TypeQ5_0},
	}
	out := make([]testTensor, len(specs))
	for i, s := range specs {
		n, err := tensorBytes(s.dims, s.typ)
		if err != nil {
			panic(err)
		}
		d := make([]byte, n)
		for j := range d {
			d[j] = byte(r.Uint32())
		}
		out[i] = testTensor{name: "blk." + string(rune('a'+i)) + ".weight", dims: s.dims, typ: s.typ, data: d}
	}
	return out
}

// writeModel writes md and tensors with opts to path, failing the test on error.
func writeModel(t testing.TB, path string, md Metadata, tensors []testTensor, opts WriterOptions) *Writer {
	t.Helper()
	w, err := Create(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	w.Metadata = md.Clone()
	for _, tt := range tensors {
		if err := w.AddTensor(tt.name, tt.dims, tt.typ); err != nil {
			t.Fatal(err)
		}
	}
	for i, tt := range tensors {
		var err error
		if i%2 == 0 {
			err = w.WriteTensor(tt.name, bytes.NewReader(tt.data))
		} else {
			tw, e := w.TensorWriter(tt.name)
			if e != nil {
				t.Fatal(e)
			}
			// Hand over in small odd chunks.
			for off := 0; off < len(tt.data); off += 13 {
				if _, e := tw.Write(tt.data[off:min(off+13, len(tt.data))]); e != nil {
					t.Fatal(e)
				}
			}
			err = tw.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w
}

// raw is a hand-rolled little-endian GGUF builder used to forge hostile files
// independently of the package's encoder.
type raw struct{ b []byte }

func (r *raw) u8(v byte) *raw    { r.b = append(r.b, v); return r }
func (r *raw) u32(v uint32) *raw { r.b = binary.LittleEndian.AppendUint32(r.b, v); return r }
func (r *raw) u64(v uint64) *raw { r.b = binary.LittleEndian.AppendUint64(r.b, v); return r }
func (r *raw) str(s string) *raw { r.u64(uint64(len(s))); r.b = append(r.b, s...); return r }
func (r *raw) header(version uint32, nTensors, nKV uint64) *raw {
	r.b = append(r.b, "GGUF"...)
	return r.u32(version).u64(nTensors).u64(nKV)
}
func (r *raw) kvU32(key string, v uint32) *raw { return r.str(key).u32(uint32(ValueUint32)).u32(v) }
func (r *raw) kvStr(key, v string) *raw        { return r.str(key).u32(uint32(ValueString)).str(v) }
func (r *raw) tensor(name string, dims []uint64, typ GGMLType, off uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(off)
}
func (r *raw) padTo(a int) *raw {
	for len(r.b)%a != 0 {
		r.b = append(r.b, 0)
	}
	return r
}
func (r *raw) zeros(n int) *raw { r.b = append(r.b, make([]byte, n)...); return r }

func readBytes(b []byte, name string) (*File, error) {
	return ReadFile(bytes.NewReader(b), int64(len(b)), name)
}
