package safetensors

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile assembles a safetensors file from a header string and data bytes.
func rawFile(hdr string, data []byte) []byte {
	out := make([]byte, 8, 8+len(hdr)+len(data))
	binary.LittleEndian.PutUint64(out, uint64(len(hdr)))
	out = append(out, hdr...)
	return append(out, data...)
}

func writeTemp(t *testing.T, dir, name string, content []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHostileHeaders(t *testing.T) {
	withLen := func(n uint64, rest string) []byte {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, n)
		return append(b, rest...)
	}
	data16 := make([]byte, 16)
	cases := []struct {
		name    string
		content []byte
		want    []string // substrings of the error
	}{
		{"tiny file", []byte{1, 2, 3}, []string{"too small"}},
		{"header beyond file", withLen(1000, `{"a":1}`), []string{"exceeds the file"}},
		{"header over limit", withLen(MaxHeaderSize+1, `{}`), []string{"exceeds the 100000000-byte limit"}},
		{"huge header length", withLen(1<<63, `{}`), []string{"limit"}},
		{"invalid json", rawFile(`{"a":{"dtype":"F32",`, nil), []string{"invalid"}},
		{"not an object", rawFile(`[1,2]`, nil), []string{"not a JSON object"}},
		{"non utf8", rawFile("{\"\xff\":1}", nil), []string{"UTF-8"}},
		{"trailing garbage", rawFile(`{} xx`, nil), []string{"after the header"}},
		{"unknown dtype", rawFile(`{"w":{"dtype":"F7","shape":[4],"data_offsets":[0,16]}}`, data16), []string{`tensor "w"`, `unknown dtype "F7"`, "BF16"}},
		{"missing dtype", rawFile(`{"w":{"shape":[4],"data_offsets":[0,16]}}`, data16), []string{`tensor "w"`, `"dtype"`}},
		{"missing shape", rawFile(`{"w":{"dtype":"F32","data_offsets":[0,16]}}`, data16), []string{`"shape"`}},
		{"negative dim", rawFile(`{"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}}`, data16), []string{`tensor "w"`, "negative"}},
		{"float dim", rawFile(`{"w":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]}}`, data16), []string{"integer"}},
		{"string dim", rawFile(`{"w":{"dtype":"F32","shape":["4"],"data_offsets":[0,16]}}`, data16), []string{"integer"}},
		{"dim overflow int64", rawFile(`{"w":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,16]}}`, data16), []string{"int64"}},
		{"product overflow", rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}}`, data16), []string{"overflows"}},
		{"bytes overflow", rawFile(`{"w":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,16]}}`, data16), []string{"overflows"}},
		{"absurd but unchecked size", rawFile(`{"w":{"dtype":"F32","shape":[1000000000000],"data_offsets":[0,4000000000000]}}`, data16), []string{"exceeds the 16-byte data section"}},
		{"rank too large", rawFile(`{"w":{"dtype":"F32","shape":[`+strings.Repeat("1,", 40)+`1],"data_offsets":[0,4]}}`, data16), []string{"rank"}},
		{"offsets out of range", rawFile(`{"w":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}`, data16), []string{"exceeds the 16-byte data section"}},
		{"offsets reversed", rawFile(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}}`, data16), []string{"invalid range"}},
		{"offsets negative", rawFile(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, data16), []string{"invalid range"}},
		{"offsets size mismatch", rawFile(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}`, data16), []string{"holds 16 bytes", "needs 12"}},
		{"offsets wrong count", rawFile(`{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16,32]}}`, data16), []string{"want 2 integers"}},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, data16), []string{"overlap"}},
		{"duplicate tensor", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, data16), []string{`tensor "a"`, "duplicate"}},
		{"metadata not strings", rawFile(`{"__metadata__":{"k":1}}`, nil), []string{"__metadata__", "must be a string"}},
		{"metadata not object", rawFile(`{"__metadata__":[1]}`, nil), []string{"__metadata__"}},
		{"entry not object", rawFile(`{"w":7}`, nil), []string{`tensor "w"`}},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeTemp(t, dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors", c.content)
			m, err := Open(p)
			if err == nil {
				m.Close()
				t.Fatalf("Open succeeded, want error containing %q", c.want)
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.Contains(msg, p) {
				t.Errorf("error %q does not name the file", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
		})
	}
}

func TestHeaderAcceptsValidEdgeCases(t *testing.T) {
	dir := t.TempDir()
	// Zero-sized tensors at any offset, a scalar, a gap, padding spaces, keys out of order.
	hdr := `{"z":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]},"s":{"dtype":"I32","shape":[],"data_offsets":[12,16]},` +
		`"__metadata__":{"format":"pt"},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}    `
	data := []byte{7, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff}
	p := writeTemp(t, dir, "edge.safetensors", rawFile(hdr, data))
	m, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	names := []string{}
	for _, ti := range m.Tensors() {
		names = append(names, ti.Name)
	}
	if got := strings.Join(names, ","); got != "a,z,s" {
		t.Errorf("order %s, want a,z,s (by offset)", got)
	}
	s := make([]float32, 1)
	if err := m.ReadFloat32("s", s); err != nil || s[0] != -2 {
		t.Errorf("scalar = %v, %v; want -2", s, err)
	}
	z, err := m.Raw("z")
	if err != nil || len(z) != 0 {
		t.Errorf("zero-size raw = %v, %v", z, err)
	}
	if m.FileMetadata()["format"] != "pt" {
		t.Errorf("metadata %v", m.FileMetadata())
	}
	var he *HeaderError
	_, err = parseHeader("x", []byte(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}}`), 8)
	if !errors.As(err, &he) || he.Tensor != "w" || he.File != "x" {
		t.Errorf("want *HeaderError naming file and tensor, got %#v", err)
	}
}
