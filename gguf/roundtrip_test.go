package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func assertMetadataEqual(t *testing.T, got, want Metadata) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("metadata has %d keys, want %d: %v", len(got), len(want), got.Keys())
	}
	for i := range want {
		if got[i].Key != want[i].Key {
			t.Fatalf("kv[%d] key %q, want %q", i, got[i].Key, want[i].Key)
		}
		if !got[i].Value.Equal(want[i].Value) {
			t.Fatalf("kv[%d] %q = %v (%s), want %v (%s)", i, want[i].Key, got[i].Value, got[i].Value.Type(), want[i].Value, want[i].Value.Type())
		}
	}
}

func assertTensorsEqual(t *testing.T, m *Model, want []testTensor) {
	t.Helper()
	got := m.Tensors()
	if len(got) != len(want) {
		t.Fatalf("%d tensors, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Name != w.name || !slices.Equal(g.Dims, w.dims) || g.Type != w.typ {
			t.Fatalf("tensor %d = %s %v %s, want %s %v %s", i, g.Name, g.Dims, g.Type, w.name, w.dims, w.typ)
		}
		data, err := m.TensorData(w.name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, w.data) {
			t.Fatalf("tensor %s: mmap data differs", w.name)
		}
		sr, err := m.TensorReader(w.name)
		if err != nil {
			t.Fatal(err)
		}
		rd, err := io.ReadAll(sr)
		if err != nil || !bytes.Equal(rd, w.data) {
			t.Fatalf("tensor %s: pread data differs (err %v)", w.name, err)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []uint32{0, 64, 1} {
		t.Run(fmt.Sprint("align", align), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "m.gguf")
			md := allTypesMetadata()
			// Keys the writer owns are replaced, wherever they are.
			md = append(md, KV{KeySplitCount, Uint16(9)}, KV{KeyAlignment, Uint32(4096)})
			tensors := makeTensors(1)
			w := writeModel(t, path, md, tensors, WriterOptions{Alignment: align, BufferSize: 100})
			if got := w.Paths(); !slices.Equal(got, []string{path}) {
				t.Fatalf("paths %v", got)
			}
			m, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			wantMD := allTypesMetadata()
			wantAlign := uint64(DefaultAlignment)
			if align != 0 {
				wantAlign = uint64(align)
			}
			if wantAlign != DefaultAlignment {
				wantMD = append(wantMD, KV{KeyAlignment, Uint32(uint32(wantAlign))})
			}
			assertMetadataEqual(t, m.Metadata(), wantMD)
			assertTensorsEqual(t, m, tensors)
			f := m.Files()[0]
			if m.Version() != 3 || m.Alignment() != wantAlign || f.DataOffset%wantAlign != 0 {
				t.Fatalf("version %d alignment %d data offset %d", m.Version(), m.Alignment(), f.DataOffset)
			}
			// Layout is exactly what llama.cpp expects: back to back, padded, with the
			// trailing padding present.
			var off uint64
			for _, ti := range f.Tensors {
				if ti.Offset != off {
					t.Fatalf("tensor %s offset %d, want %d", ti.Name, ti.Offset, off)
				}
				p, _ := alignUp(ti.NBytes(), wantAlign)
				off += p
			}
			if uint64(f.Size) != f.DataOffset+off || f.DataSize() != off {
				t.Fatalf("file size %d, want %d", f.Size, f.DataOffset+off)
			}
			// The only problem: nested arrays, which llama.cpp rejects.
			if probs, err := CheckModel(path); err != nil || len(probs) != 1 || !strings.Contains(probs[0].Field, "t.a.nested") {
				t.Fatalf("CheckModel: %v %v", probs, err)
			}
			if _, err := VerifyManifest(path); err != nil {
				t.Fatal(err)
			}
			files := w.Files()
			st, _ := os.Stat(path)
			if len(files) != 1 || files[0].Size != st.Size() || files[0].Path != path {
				t.Fatalf("Files() = %+v", files)
			}
		})
	}
}

func TestVocabOnlyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.gguf")
	md := Metadata{{"general.architecture", String("llama")}, {"tokenizer.ggml.tokens", Array([]string{"a", "b"})}}
	w, err := Create(path, WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Metadata = md
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	assertMetadataEqual(t, m.Metadata(), md)
	if len(m.Tensors()) != 0 || m.Files()[0].Size%32 != 0 {
		t.Fatalf("tensors %d size %d", len(m.Tensors()), m.Files()[0].Size)
	}
}

func TestWriterRejectsBadDeclarations(t *testing.T) {
	w, err := Create(filepath.Join(t.TempDir(), "x.gguf"), WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	long := string(bytes.Repeat([]byte("n"), 64))
	cases := []struct {
		name string
		dims []uint64
		typ  GGMLType
	}{
		{"", []uint64{4}, TypeF32},
		{"\xff", []uint64{4}, TypeF32},
		{long, []uint64{4}, TypeF32},
		{"a", nil, TypeF32},
		{"a", []uint64{1, 1, 1, 1, 1}, TypeF32},
		{"a", []uint64{4}, GGMLType(99)},
		{"a", []uint64{31}, TypeQ8_0},
		{"a", []uint64{1 << 62, 1 << 62}, TypeF32},
	}
	for _, c := range cases {
		if err := w.AddTensor(c.name, c.dims, c.typ); err == nil {
			t.Errorf("AddTensor(%q, %v, %v) succeeded", c.name, c.dims, c.typ)
		}
	}
	if err := w.AddTensor("ok", []uint64{4}, TypeF32); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTensor("ok", []uint64{4}, TypeF32); err == nil {
		t.Error("duplicate name accepted")
	}
	for _, md := range []Metadata{
		{{"", Uint8(1)}},
		{{"\xff", Uint8(1)}},
		{{"a", Uint8(1)}, {"a", Uint8(2)}},
		{{"a", Value{}}},
		{{"a", Array([]Value{Uint8(1)})}},
	} {
		if err := validateMetadata(md); err == nil {
			t.Errorf("metadata %v accepted", md)
		}
	}
}

func TestValueAccessors(t *testing.T) {
	md := allTypesMetadata()
	if v, err := md.GetUint("t.u64"); err != nil || v != 1<<64-1 {
		t.Fatal(v, err)
	}
	if v, err := md.GetUint("t.u8"); err != nil || v != 255 {
		t.Fatal(v, err)
	}
	if _, err := md.GetUint("t.i8"); err == nil {
		t.Fatal("negative accepted as uint")
	}
	if v, err := md.GetInt("t.i8"); err != nil || v != -128 {
		t.Fatal(v, err)
	}
	if _, err := md.GetInt("t.u64"); err == nil {
		t.Fatal("uint64 max accepted as int64")
	}
	if v, err := md.GetFloat("t.f32"); err != nil || float32(v) != -1.5e-39 {
		t.Fatal(v, err)
	}
	if _, err := md.GetFloat("t.u8"); err == nil {
		t.Fatal("int accepted as float")
	}
	if v, err := md.GetBool("t.true"); err != nil || !v {
		t.Fatal(v, err)
	}
	if v, err := md.GetString("t.str"); err != nil || v != "héllo, 世界 \x00 \n" {
		t.Fatal(v, err)
	}
	if v, err := md.GetStringArray("t.a.str"); err != nil || !slices.Equal(v, []string{"a", "", "ü"}) {
		t.Fatal(v, err)
	}
	if _, err := md.GetStringArray("t.a.i32"); err == nil {
		t.Fatal("int array accepted as string array")
	}
	if _, err := md.GetString("missing"); err == nil || !errors.Is(err, ErrKeyNotFound) {
		t.Fatal(err)
	}
	a, err := md.GetArray("t.a.i32")
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := ArrayOf[int32](a); !ok || !slices.Equal(s, []int32{-1, 0, 1}) {
		t.Fatal(s)
	}
	if _, ok := ArrayOf[uint32](a); ok {
		t.Fatal("ArrayOf with wrong element type succeeded")
	}
	if a.Index(0).Type() != ValueInt32 || a.Len() != 3 || a.ElemType() != ValueInt32 {
		t.Fatal(a.Index(0), a.Len())
	}
	n, _ := md.Get("t.a.nested")
	if n.ElemType() != ValueArray || n.Index(2).Index(0).Index(0).String() != "2.5" {
		t.Fatalf("nested %v", n)
	}
	if s := Array([]uint8{1, 2}).String(); s != "[2×uint8] [1, 2]" {
		t.Fatal(s)
	}
	if Int8(-1).Equal(Uint8(255)) || !Float32(1).Equal(Float32(1)) || Float64(0).Equal(Float64(math.Copysign(0, -1))) {
		t.Fatal("Equal")
	}
	var m2 Metadata
	m2.Set("a", Uint8(1))
	m2.Set("b", Uint8(2))
	m2.Set("a", Uint8(3))
	if !slices.Equal(m2.Keys(), []string{"a", "b"}) || !m2.Delete("a") || m2.Delete("a") || len(m2) != 1 {
		t.Fatal(m2)
	}
}
