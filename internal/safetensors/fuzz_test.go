package safetensors

import (
	"strings"
	"testing"
)

// FuzzParseHeader feeds arbitrary header JSON and data sizes to the header parser: it must
// never panic and every accepted tensor must lie inside the data section without overlap.
func FuzzParseHeader(f *testing.F) {
	seeds := []string{
		`{}`,
		`{"__metadata__":{"format":"pt"}}`,
		`{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`,
		`{"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]},"b":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[8,16]}}`,
		`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`,
		`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}}`,
		`{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,16]}}`,
		`{"w":{"dtype":"U8","shape":[],"data_offsets":[15,16]}}   `,
		`{"w":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}}`,
		`{"w":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},"v":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`,
		`{"__metadata__":{"k":1}}`,
		`{"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`,
		`{"w":`,
		"{\"\xff\":1}",
	}
	for _, s := range seeds {
		f.Add([]byte(s), int64(16))
	}
	f.Fuzz(func(t *testing.T, hdr []byte, dataLen int64) {
		if dataLen < 0 {
			dataLen = -dataLen
		}
		if dataLen < 0 {
			dataLen = 0
		}
		h, err := parseHeader("fuzz", hdr, dataLen)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "safetensors: fuzz: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		var end int64
		for _, ti := range h.tensors {
			size, err := ByteSize(ti.DType, ti.Shape)
			if err != nil || size != ti.Size {
				t.Fatalf("%s: size %d, computed %d (%v)", ti.Name, ti.Size, size, err)
			}
			if ti.Offset < 0 || ti.Offset+ti.Size > dataLen {
				t.Fatalf("%s: [%d,+%d) outside %d bytes", ti.Name, ti.Offset, ti.Size, dataLen)
			}
			if ti.Size > 0 {
				if ti.Offset < end {
					t.Fatalf("%s overlaps", ti.Name)
				}
				end = ti.Offset + ti.Size
			}
		}
	})
}

// FuzzParseIndex feeds arbitrary index JSON to the index parser: no panic, and every
// accepted shard name is a local relative path.
func FuzzParseIndex(f *testing.F) {
	seeds := []string{
		`{"metadata":{"total_size":16},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`,
		`{"weight_map":{"a":"../../etc/passwd"}}`,
		`{"weight_map":{"a":"/etc/passwd"}}`,
		`{"weight_map":{"a":"sub/dir/x.safetensors"}}`,
		`{"weight_map":{"a":"x\u0000.safetensors"}}`,
		`{"weight_map":{"a":1}}`,
		`{"weight_map":{}}`,
		`{"weight_map":{"a":"x","a":"y"}}`,
		`{"metadata":[1,{"x":null}],"weight_map":{"":"x"}}`,
		`[]`,
		`{"weight_map":`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		wm, err := parseIndex("fuzz.json", data)
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.json") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(wm) == 0 {
			t.Fatal("accepted an empty weight_map")
		}
		for name, shard := range wm {
			if name == "" || checkShardName(shard) != nil || strings.Contains(shard, "..") && !localDots(shard) {
				t.Fatalf("accepted %q -> %q", name, shard)
			}
		}
	})
}

// localDots reports whether every ".." in s is part of a longer name component (such as
// "a..b"), which stays inside the folder.
func localDots(s string) bool {
	for _, c := range strings.Split(s, "/") {
		if c == ".." {
			return false
		}
	}
	return true
}
