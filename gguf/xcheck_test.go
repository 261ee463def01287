package gguf

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	parser "github.com/gpustack/gguf-parser-go"
	"github.com/tq-project/tq/internal/testenv"
)

// fromParser converts a gguf-parser-go value into ours, so the two readers can be
// compared value by value.
func fromParser(t parser.GGUFMetadataValueType, v any) (Value, error) {
	switch t {
	case parser.GGUFMetadataValueTypeUint8:
		return Uint8(v.(uint8)), nil
	case parser.GGUFMetadataValueTypeInt8:
		return Int8(v.(int8)), nil
	case parser.GGUFMetadataValueTypeUint16:
		return Uint16(v.(uint16)), nil
	case parser.GGUFMetadataValueTypeInt16:
		return Int16(v.(int16)), nil
	case parser.GGUFMetadataValueTypeUint32:
		return Uint32(v.(uint32)), nil
	case parser.GGUFMetadataValueTypeInt32:
		return Int32(v.(int32)), nil
	case parser.GGUFMetadataValueTypeUint64:
		return Uint64(v.(uint64)), nil
	case parser.GGUFMetadataValueTypeInt64:
		return Int64(v.(int64)), nil
	case parser.GGUFMetadataValueTypeFloat32:
		return Float32(v.(float32)), nil
	case parser.GGUFMetadataValueTypeFloat64:
		return Float64(v.(float64)), nil
	case parser.GGUFMetadataValueTypeBool:
		return Bool(v.(bool)), nil
	case parser.GGUFMetadataValueTypeString:
		return String(v.(string)), nil
	case parser.GGUFMetadataValueTypeArray:
		av := v.(parser.GGUFMetadataKVArrayValue)
		if uint64(len(av.Array)) != av.Len {
			return Value{}, fmt.Errorf("parser skipped array items")
		}
		elems := make([]Value, len(av.Array))
		for i, e := range av.Array {
			ev, err := fromParser(av.Type, e)
			if err != nil {
				return Value{}, err
			}
			elems[i] = ev
		}
		return typedArray(ValueType(av.Type), elems), nil
	}
	return Value{}, fmt.Errorf("unknown parser type %v", t)
}

// typedArray builds an array of element type et from element Values.
func typedArray(et ValueType, elems []Value) Value {
	switch et {
	case ValueUint8:
		return Array(mapSlice(elems, func(v Value) uint8 { return uint8(v.num) }))
	case ValueInt8:
		return Array(mapSlice(elems, func(v Value) int8 { return int8(v.num) }))
	case ValueUint16:
		return Array(mapSlice(elems, func(v Value) uint16 { return uint16(v.num) }))
	case ValueInt16:
		return Array(mapSlice(elems, func(v Value) int16 { return int16(v.num) }))
	case ValueUint32:
		return Array(mapSlice(elems, func(v Value) uint32 { return uint32(v.num) }))
	case ValueInt32:
		return Array(mapSlice(elems, func(v Value) int32 { return int32(v.num) }))
	case ValueUint64:
		return Array(mapSlice(elems, func(v Value) uint64 { return v.num }))
	case ValueInt64:
		return Array(mapSlice(elems, func(v Value) int64 { return int64(v.num) }))
	case ValueFloat32:
		return Array(mapSlice(elems, func(v Value) float32 { f, _ := v.AsFloat(); return float32(f) }))
	case ValueFloat64:
		return Array(mapSlice(elems, func(v Value) float64 { f, _ := v.AsFloat(); return f }))
	case ValueBool:
		return Array(mapSlice(elems, func(v Value) bool { return v.num != 0 }))
	case ValueString:
		return Array(mapSlice(elems, func(v Value) string { return v.str }))
	}
	return Array(elems)
}

func mapSlice[S, T any](in []S, f func(S) T) []T {
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// trimmed returns v with every string passed through bytes.TrimSpace: gguf-parser-go
// v0.28.1 trims whitespace from every string it reads (file.go ReadString), so that is
// what it can be compared against. Exact string content is checked by the round-trip
// tests and by llama.cpp itself (TestLlamaCppTokenizesOurCopy).
func trimmed(v Value) Value {
	switch v.Type() {
	case ValueString:
		return String(strings.TrimSpace(v.str))
	case ValueArray:
		switch s := v.arr.(type) {
		case []string:
			return Array(mapSlice(s, func(x string) string { return string(bytes.TrimSpace([]byte(x))) }))
		case []Value:
			return Array(mapSlice(s, trimmed))
		}
	}
	return v
}

// compareWithParser parses path with gguf-parser-go and requires the same metadata (for
// split models: every shard's KVs in order, minus split.no, which the parser drops) and
// the same tensor listing as our reader.
func compareWithParser(t *testing.T, path string) {
	t.Helper()
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	compareFilesWithParser(t, path, m.Files())
}

// compareFilesWithParser compares our parsed files (all shards of path) with gguf-parser-go.
func compareFilesWithParser(t *testing.T, path string, files []*File) {
	t.Helper()
	pf, err := parser.ParseGGUFFile(path, parser.UseMMap())
	if err != nil {
		t.Fatalf("gguf-parser-go: %s: %v", path, err)
	}
	var want Metadata
	var ts []TensorInfo
	for _, f := range files {
		ts = append(ts, f.Tensors...)
		for _, kv := range f.Metadata {
			if kv.Key != KeySplitNo {
				want = append(want, kv)
			}
		}
	}
	kvs := pf.Header.MetadataKV
	if len(kvs) != len(want) {
		t.Fatalf("%s: parser has %d KVs, we have %d", path, len(kvs), len(want))
	}
	for i, kv := range kvs {
		v, err := fromParser(kv.ValueType, kv.Value)
		if err != nil {
			t.Fatalf("%s: key %q: %v", path, kv.Key, err)
		}
		if kv.Key != want[i].Key || !v.Equal(trimmed(want[i].Value)) {
			t.Fatalf("%s: kv[%d] parser %q=%v (%s), ours %q=%v (%s)", path, i, kv.Key, v, v.Type(), want[i].Key, want[i].Value, want[i].Value.Type())
		}
	}
	if len(pf.TensorInfos) != len(ts) {
		t.Fatalf("%s: parser has %d tensors, we have %d", path, len(pf.TensorInfos), len(ts))
	}
	for i, pt := range pf.TensorInfos {
		o := ts[i]
		if pt.Name != o.Name || !slices.Equal(pt.Dimensions, o.Dims) || uint32(pt.Type) != uint32(o.Type) || pt.Offset != o.Offset {
			t.Fatalf("%s: tensor %d parser %s %v %d @%d, ours %s %v %d @%d", path, i,
				pt.Name, pt.Dimensions, pt.Type, pt.Offset, o.Name, o.Dims, o.Type, o.Offset)
		}
	}
	for i, f := range files {
		// The parser always adds alignment padding; llama.cpp (and we) only with tensors.
		start := uint64(pf.SplitTensorDataStartOffsets[i])
		if len(f.Tensors) > 0 && start != f.DataOffset || start-uint64(pf.SplitPaddings[i]) != f.HeaderSize {
			t.Fatalf("%s shard %d: parser data offset %d (padding %d), ours %d (header %d)",
				path, i, start, pf.SplitPaddings[i], f.DataOffset, f.HeaderSize)
		}
		if int64(pf.SplitSizes[i]) != f.Size {
			t.Fatalf("%s: size %d vs %d", path, pf.SplitSizes[i], f.Size)
		}
	}
}

// TestCrossCheckParserOnOurFiles: an independent reader sees exactly what we wrote.
func TestCrossCheckParserOnOurFiles(t *testing.T) {
	md := allTypesMetadata()
	md.Delete("t.a.nested") // see below
	md = append(md, KV{"general.file_type", Uint32(7)})
	tensors := makeTensors(21)
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		opts WriterOptions
	}{
		{"single.gguf", WriterOptions{}},
		{"align64.gguf", WriterOptions{Alignment: 64}},
		{"split.gguf", WriterOptions{MaxShardTensors: 4}},
	} {
		w := writeModel(t, filepath.Join(dir, c.name), md, tensors, c.opts)
		compareWithParser(t, w.Paths()[0])
	}
	// Nested arrays: the parser reads them too.
	w := writeModel(t, filepath.Join(dir, "nested.gguf"), Metadata{allTypesMetadata()[31]}, nil, WriterOptions{})
	if allTypesMetadata()[31].Key != "t.a.nested" {
		t.Fatal("fixture order changed")
	}
	compareWithParser(t, w.Paths()[0])
}

// TestLlamaCppVocabFiles parses every real ggml-vocab-*.gguf that ships with llama.cpp,
// compares it with gguf-parser-go, and re-encodes its header: the bytes must equal the
// original's, which checks string contents byte for byte (the parser trims whitespace).
func TestLlamaCppVocabFiles(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(testenv.RepoRoot(t), "testdata", "llamacpp", "src", "models")
	requireRef(t, filepath.Join(dir, "ggml-vocab-qwen2.gguf"), "llama.cpp vocab GGUF files")
	paths, err := filepath.Glob(filepath.Join(dir, "ggml-vocab-*.gguf"))
	if err != nil || len(paths) < 10 {
		t.Fatalf("found only %d vocab files (%v)", len(paths), err)
	}
	sort.Strings(paths)
	versions := map[uint32]int{}
	for _, p := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".gguf"), func(t *testing.T) {
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			f, err := readBytes(orig, p)
			if err != nil {
				t.Fatal(err)
			}
			versions[f.Version]++
			compareFilesWithParser(t, p, []*File{f})
			toks, err := f.Metadata.GetStringArray("tokenizer.ggml.tokens")
			if err != nil || len(toks) < 1000 {
				t.Fatalf("tokens: %d %v", len(toks), err)
			}
			if probs := Check(bytes.NewReader(orig), int64(len(orig)), p); len(probs) != 0 {
				t.Fatalf("Check: %v", probs)
			}
			var buf bytes.Buffer
			bw := bufio.NewWriter(&buf)
			if err := writeHeader(bw, f.Metadata, f.Tensors); err != nil {
				t.Fatal(err)
			}
			bw.Flush()
			got, want := buf.Bytes(), orig[:f.HeaderSize]
			if f.Version == 2 {
				want = append([]byte(nil), want...)
				want[4] = 3 // we always write v3; the layout is the same
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Fatalf("re-encoded header differs at byte %d (len %d vs %d)", i, len(got), len(want))
			}
		})
	}
	if versions[2] == 0 || versions[3] == 0 {
		t.Errorf("expected both v2 and v3 files among the references, saw %v", versions)
	}
}
