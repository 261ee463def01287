package gguf

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// validRaw is a small valid file: two KVs, two F32 tensors of 8 elements.
func validRaw() []byte {
	r := (&raw{}).header(3, 2, 2)
	r.kvStr("general.architecture", "llama").kvU32("llama.block_count", 1)
	r.tensor("a", []uint64{8}, TypeF32, 0).tensor("b", []uint64{8}, TypeF32, 32)
	r.padTo(32).zeros(64)
	return r.b
}

func TestReadValidRaw(t *testing.T) {
	f, err := readBytes(validRaw(), "v.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 2 || f.DataOffset%32 != 0 || f.Tensors[1].Offset != 32 {
		t.Fatalf("%+v", f)
	}
	if probs := Check(bytes.NewReader(validRaw()), int64(len(validRaw())), "v.gguf"); len(probs) != 0 {
		t.Fatal(probs)
	}
}

// TestReadTruncated cuts a valid file at every length: each must fail with a clear
// error naming the file (the data section is needed since the tensors point into it).
func TestReadTruncated(t *testing.T) {
	b := validRaw()
	for n := 0; n < len(b); n++ {
		_, err := readBytes(b[:n], "cut.gguf")
		if err == nil {
			t.Fatalf("prefix of %d bytes accepted", n)
		}
		var p *Problem
		if !errors.As(err, &p) || p.File != "cut.gguf" || !strings.Contains(err.Error(), "cut.gguf") {
			t.Fatalf("prefix %d: error %v is not a *Problem naming the file", n, err)
		}
	}
	// A reader shorter than the size it claims.
	_, err := ReadFile(bytes.NewReader(b[:40]), int64(len(b)), "liar.gguf")
	if err == nil || !strings.Contains(err.Error(), "unexpected end of data") {
		t.Fatal(err)
	}
}

func TestReadHostile(t *testing.T) {
	kvHeader := func(nKV uint64) *raw { return (&raw{}).header(3, 0, nKV) }
	nested := func(depth int) []byte {
		r := kvHeader(1).str("deep").u32(uint32(ValueArray))
		for i := 0; i < depth; i++ {
			r.u32(uint32(ValueArray)).u64(1)
		}
		return r.u32(uint32(ValueUint8)).u64(0).b
	}
	oneTensor := func(name string, dims []uint64, typ GGMLType, off uint64, data int) []byte {
		r := (&raw{}).header(3, 1, 0).tensor(name, dims, typ, off)
		return r.padTo(32).zeros(data).b
	}
	cases := []struct {
		name  string
		data  []byte
		field string // substring of the error
		msg   string
	}{
		{"not gguf", []byte("GGML\x03\x00\x00\x00"), "magic", "not a GGUF file"},
		{"big endian magic", append([]byte("FUGG"), make([]byte, 20)...), "magic", "big-endian"},
		{"big endian version", (&raw{}).header(0x03000000, 0, 0).b, "header.version", "byte-swapped"},
		{"version 1", (&raw{}).header(1, 0, 0).b, "header.version", "v1"},
		{"version 4", (&raw{}).header(4, 0, 0).b, "header.version", "unsupported GGUF version 4"},
		{"version 0", (&raw{}).header(0, 0, 0).b, "header.version", "unsupported"},
		{"2^60 tensors", (&raw{}).header(3, 1<<60, 0).zeros(100).b, "header.n_tensors", "cannot fit"},
		{"2^63 tensors", (&raw{}).header(3, 1<<63, 0).b, "header.n_tensors", "cannot fit"},
		{"2^60 kvs", (&raw{}).header(3, 0, 1<<60).b, "header.n_kv", "cannot fit"},
		{"2^40 string key", kvHeader(1).u64(1 << 40).zeros(50).b, "kv[0] key", "string length 1099511627776 exceeds"},
		{"2^40 string value", kvHeader(1).str("k").u32(uint32(ValueString)).u64(1 << 40).b, `kv[0] "k"`, "exceeds"},
		{"2^62 array", kvHeader(1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueUint32)).u64(1 << 62).b, `kv[0] "k"`, "array of 4611686018427387904 uint32"},
		{"2^62 string array", kvHeader(1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueString)).u64(1 << 62).b, `kv[0] "k"`, "needs at least 8 bytes"},
		{"2^62 nested array", kvHeader(1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueArray)).u64(1 << 62).b, `kv[0] "k"`, "needs at least 12 bytes"},
		{"huge string in array", kvHeader(1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueString)).u64(2).str("ok").u64(1 << 50).zeros(8).b, `kv[0] "k" element 1`, "exceeds"},
		{"deep nesting", nested(100), `kv[0] "deep"`, "nested deeper than 8"},
		{"unknown value type", kvHeader(1).str("k").u32(13).u32(0).b, `kv[0] "k" type`, "unknown value type 13"},
		{"unknown element type", kvHeader(1).str("k").u32(uint32(ValueArray)).u32(77).u64(0).b, `kv[0] "k"`, "unknown array element type 77"},
		{"invalid utf8 key", kvHeader(1).kvU32("k\xff", 1).b, "kv[0]", "not valid UTF-8"},
		{"empty key", kvHeader(1).kvU32("", 1).b, "kv[0]", "empty key"},
		{"duplicate key", kvHeader(2).kvU32("k", 1).kvU32("k", 2).b, `kv[1] "k"`, "duplicate key"},
		{"alignment type", kvHeader(1).str(KeyAlignment).u32(uint32(ValueUint64)).u64(32).b, KeyAlignment, "must be uint32"},
		{"alignment not pow2", kvHeader(1).kvU32(KeyAlignment, 48).b, KeyAlignment, "not a power of two"},
		{"alignment zero", kvHeader(1).kvU32(KeyAlignment, 0).b, KeyAlignment, "not a power of two"},
		{"5 dims", oneTensor("t", []uint64{1, 1, 1, 1, 1}, TypeF32, 0, 32), `tensor[0] "t" n_dims`, "5 dimensions"},
		{"negative dim", oneTensor("t", []uint64{1 << 63}, TypeF32, 0, 32), `tensor[0] "t" ne[0]`, "negative"},
		{"dims overflow", oneTensor("t", []uint64{1 << 40, 1 << 40}, TypeF32, 0, 32), `tensor[0] "t"`, "overflows int64"},
		{"bytes overflow", oneTensor("t", []uint64{1 << 31, 1 << 31}, TypeF32, 0, 32), `tensor[0] "t"`, "overflows int64"},
		{"unknown ggml type", oneTensor("t", []uint64{8}, GGMLType(4), 0, 32), `tensor[0] "t"`, "unknown ggml type id 4"},
		{"type id 1000", oneTensor("t", []uint64{8}, GGMLType(1000), 0, 32), `tensor[0] "t"`, "unknown ggml type id 1000"},
		{"block multiple", oneTensor("t", []uint64{33}, TypeQ8_0, 0, 64), `tensor[0] "t"`, "not a multiple of the q8_0 block size 32"},
		{"offset out of range", oneTensor("t", []uint64{8}, TypeF32, 32, 32), `tensor[0] "t" offset`, "outside"},
		{"offset overflow", oneTensor("t", []uint64{8}, TypeF32, 1<<64-32, 32), `tensor[0] "t" offset`, "outside"},
		{"size beyond file", oneTensor("t", []uint64{1 << 20}, TypeF32, 0, 32), `tensor[0] "t" offset`, "outside"},
		{"misaligned", oneTensor("t", []uint64{4}, TypeF32, 4, 64), `tensor[0] "t" offset`, "not a multiple of the alignment"},
		{"overlap", (&raw{}).header(3, 2, 0).tensor("a", []uint64{16}, TypeF32, 0).tensor("b", []uint64{8}, TypeF32, 32).padTo(32).zeros(128).b,
			`tensor[1] "b" offset`, `overlaps tensor "a"`},
		{"duplicate tensor", (&raw{}).header(3, 2, 0).tensor("a", []uint64{8}, TypeF32, 0).tensor("a", []uint64{8}, TypeF32, 32).padTo(32).zeros(64).b,
			`tensor[1] "a"`, "duplicate tensor name"},
		{"invalid utf8 tensor name", oneTensor("\xc3", []uint64{8}, TypeF32, 0, 32), "tensor[0]", "not valid UTF-8"},
		{"empty tensor name", oneTensor("", []uint64{8}, TypeF32, 0, 32), "tensor[0]", "empty tensor name"},
		{"data section past end", (&raw{}).header(3, 1, 0).tensor("t", []uint64{0}, TypeF32, 0).b, "data section", "past the end"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := readBytes(c.data, "evil.gguf")
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("accepted")
			}
			var p *Problem
			if !errors.As(err, &p) || p.File != "evil.gguf" {
				t.Fatalf("error %v is not a *Problem naming the file", err)
			}
			if !strings.Contains(p.Field, c.field) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %q: want field containing %q and message containing %q", err, c.field, c.msg)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
				t.Fatalf("allocated %d bytes for a %d-byte file", grew, len(c.data))
			}
			// The lenient checker must not panic either and must report something.
			if probs := Check(bytes.NewReader(c.data), int64(len(c.data)), "evil.gguf"); len(probs) == 0 {
				t.Fatal("Check found no problem")
			}
		})
	}
}

// TestCheckCompatibility covers files ReadFile accepts but llama.cpp rejects.
func TestCheckCompatibility(t *testing.T) {
	long := strings.Repeat("n", 64)
	cases := []struct {
		name string
		data []byte
		want []string
	}{
		{"gap between tensors", (&raw{}).header(3, 2, 0).tensor("a", []uint64{8}, TypeF32, 0).tensor("b", []uint64{8}, TypeF32, 64).padTo(32).zeros(96).b,
			[]string{`tensor[1] "b" offset: offset 64, but llama.cpp requires 32`}},
		{"first tensor not at 0", (&raw{}).header(3, 1, 0).tensor("a", []uint64{8}, TypeF32, 32).padTo(32).zeros(64).b,
			[]string{"requires 0"}},
		{"missing trailing padding", (&raw{}).header(3, 1, 0).tensor("a", []uint64{4}, TypeF32, 0).padTo(32).zeros(16).b,
			[]string{"trailing padding"}},
		{"long name", (&raw{}).header(3, 1, 0).tensor(long, []uint64{8}, TypeF32, 0).padTo(32).zeros(32).b,
			[]string{"name is 64 bytes"}},
		{"nested array", (&raw{}).header(3, 0, 1).str("n").u32(uint32(ValueArray)).u32(uint32(ValueArray)).u64(1).u32(uint32(ValueUint8)).u64(0).b,
			[]string{"nested arrays"}},
		{"split key types", (&raw{}).header(3, 0, 2).kvU32(KeySplitCount, 1).kvU32(KeySplitTensorsCount, 0).b,
			[]string{"split.count: has type uint32, llama.cpp requires uint16", "split.tensors.count: has type uint32, llama.cpp requires int32"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := readBytes(c.data, "c.gguf"); err != nil {
				t.Fatalf("ReadFile rejected a readable file: %v", err)
			}
			probs := Check(bytes.NewReader(c.data), int64(len(c.data)), "c.gguf")
			if len(probs) != len(c.want) {
				t.Fatalf("problems %v, want %d", probs, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(probs[i].Error(), w) {
					t.Fatalf("problem %q lacks %q", probs[i].Error(), w)
				}
			}
		})
	}
	// Lenient checking collects several layout problems at once.
	multi := (&raw{}).header(3, 3, 1).kvU32("k\xff", 1).
		tensor("a", []uint64{8}, GGMLType(5), 0).tensor("b", []uint64{8}, TypeF32, 8).tensor("c", []uint64{8}, TypeF32, 4096).
		padTo(32).zeros(64).b
	probs := Check(bytes.NewReader(multi), int64(len(multi)), "m.gguf")
	var all []string
	for _, p := range probs {
		all = append(all, p.Error())
	}
	joined := strings.Join(all, "\n")
	for _, w := range []string{"not valid UTF-8", "unknown ggml type id 5", "not a multiple of the alignment", "outside"} {
		if !strings.Contains(joined, w) {
			t.Errorf("Check output lacks %q:\n%s", w, joined)
		}
	}
	// CheckFile/CheckModel on disk.
	path := filepath.Join(t.TempDir(), "m.gguf")
	os.WriteFile(path, multi, 0o644)
	if p2, err := CheckModel(path); err != nil || len(p2) != len(probs) {
		t.Fatalf("CheckModel: %v %v", p2, err)
	}
	if _, err := CheckFile(path + ".missing"); err == nil {
		t.Fatal("CheckFile of a missing file succeeded")
	}
}

// zeroTail serves head followed by zeros up to limit (a file that claims to be huge).
type zeroTail struct {
	head  []byte
	limit int64
}

func (z zeroTail) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) && off+int64(n) < z.limit {
		if i := off + int64(n); i < int64(len(z.head)) {
			n += copy(p[n:], z.head[i:])
		} else {
			k := min(int64(len(p)-n), z.limit-i)
			clear(p[n : n+int(k)])
			n += int(k)
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// TestReadHugeDeclaredSizes uses readers that claim terabytes: counts within the claimed
// size must still not allocate by the declared length, and llama.cpp's per-value limits
// apply.
func TestReadHugeDeclaredSizes(t *testing.T) {
	const tb = int64(1) << 40
	kv := func() *raw { return (&raw{}).header(3, 0, 1).str("k") }
	cases := []struct {
		name  string
		head  []byte
		limit int64 // bytes actually served; the declared size is 1 TB
		msg   string
	}{
		{"string over 1 GiB", kv().u32(uint32(ValueString)).u64(1<<30 + 1).b, tb, "llama.cpp's limit"},
		{"array over 2^30", kv().u32(uint32(ValueArray)).u32(uint32(ValueUint8)).u64(1<<30 + 1).b, tb, "llama.cpp's limit"},
		{"u32 array, data stops early", kv().u32(uint32(ValueArray)).u32(uint32(ValueUint32)).u64(1 << 29).b, 1 << 20, "unexpected end of data"},
		{"string array, data stops early", kv().u32(uint32(ValueArray)).u32(uint32(ValueString)).u64(1 << 29).b, 1 << 20, "unexpected end of data"},
		{"long string, data stops early", kv().u32(uint32(ValueString)).u64(1 << 30).b, 1 << 20, "unexpected end of data"},
		{"2^34 tensors, zeros after one", (&raw{}).header(3, 1<<34, 0).tensor("t", []uint64{8}, TypeF32, 0).b, tb, `tensor[1] "": empty tensor name`},
		{"2^34 kvs, zeros after one", (&raw{}).header(3, 0, 1<<34).kvU32("a", 1).b, tb, `kv[1] "": empty key`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := ReadFile(zeroTail{c.head, c.limit}, tb, "huge.gguf")
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), "huge.gguf") {
				t.Fatalf("err %v, want %q", err, c.msg)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Fatalf("allocated %d MB while reading %d bytes", grew>>20, c.limit)
			}
		})
	}
}
