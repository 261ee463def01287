package gguf

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzReadFile feeds arbitrary bytes to the strict reader and the lenient checker. Neither
// may panic or allocate beyond the input's bound; an accepted file must satisfy the
// reader's guarantees and survive re-encoding unchanged.
func FuzzReadFile(f *testing.F) {
	f.Add(validRaw())
	f.Add((&raw{}).header(2, 0, 1).kvStr("general.name", "v2").b)
	f.Add((&raw{}).header(3, 0, 1).str("n").u32(uint32(ValueArray)).u32(uint32(ValueArray)).u64(2).
		u32(uint32(ValueUint8)).u64(1).u8(7).u32(uint32(ValueString)).u64(1).str("s").b)
	f.Add((&raw{}).header(3, 1, 1).kvU32(KeyAlignment, 64).tensor("t", []uint64{32, 2}, TypeQ8_0, 0).padTo(64).zeros(128).b)
	f.Add((&raw{}).header(3, 1<<60, 0).b)
	// A file from the writer with every metadata type and several tensor types.
	dir := f.TempDir()
	p := filepath.Join(dir, "seed.gguf")
	w, err := Create(p, WriterOptions{NoManifest: true})
	if err != nil {
		f.Fatal(err)
	}
	md := allTypesMetadata()
	md.Delete("t.a.bigstr")
	w.Metadata = md
	for _, tt := range makeTensors(1)[:5] {
		w.AddTensor(tt.name, tt.dims, tt.typ)
	}
	for _, tt := range makeTensors(1)[:5] {
		w.WriteTensorData(tt.name, tt.data)
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(p)
	f.Add(seed)

	f.Fuzz(checkFuzzInput)
}

func checkFuzzInput(t *testing.T, data []byte) {
	{
		probs := Check(bytes.NewReader(data), int64(len(data)), "fuzz.gguf")
		file, err := readBytes(data, "fuzz.gguf")
		if err != nil {
			if len(probs) == 0 {
				t.Fatalf("ReadFile failed (%v) but Check found nothing", err)
			}
			return
		}
		names := map[string]bool{}
		for _, ti := range file.Tensors {
			n, err := ti.Size()
			if err != nil {
				t.Fatalf("accepted tensor %q with bad size: %v", ti.Name, err)
			}
			if ti.Offset%file.Alignment != 0 || file.DataOffset+ti.Offset+n > uint64(len(data)) {
				t.Fatalf("accepted tensor %q outside the file or misaligned", ti.Name)
			}
			if names[ti.Name] {
				t.Fatalf("duplicate tensor %q accepted", ti.Name)
			}
			names[ti.Name] = true
		}
		// Re-encode the header, copy the data section and parse again.
		var buf bytes.Buffer
		bw := bufio.NewWriter(&buf)
		if err := writeHeader(bw, file.Metadata, file.Tensors); err != nil {
			t.Fatal(err)
		}
		bw.Flush()
		if uint64(buf.Len()) != file.HeaderSize { // v2 and v3 share the layout

			t.Fatalf("re-encoded header is %d bytes, original %d", buf.Len(), file.HeaderSize)
		}
		for uint64(buf.Len()) < file.DataOffset {
			buf.WriteByte(0)
		}
		if file.DataOffset < uint64(len(data)) {
			buf.Write(data[file.DataOffset:])
		}
		again, err := readBytes(buf.Bytes(), "again.gguf")
		if err != nil {
			t.Fatalf("re-encoded file rejected: %v", err)
		}
		if len(again.Metadata) != len(file.Metadata) || len(again.Tensors) != len(file.Tensors) {
			t.Fatal("re-encoded file differs in counts")
		}
		for i := range file.Metadata {
			if again.Metadata[i].Key != file.Metadata[i].Key || !again.Metadata[i].Value.Equal(file.Metadata[i].Value) {
				t.Fatalf("kv %d differs after re-encoding", i)
			}
		}
		for i, ti := range file.Tensors {
			a := again.Tensors[i]
			if a.Name != ti.Name || a.Type != ti.Type || a.Offset != ti.Offset || !slices.Equal(a.Dims, ti.Dims) {
				t.Fatalf("tensor %d differs after re-encoding", i)
			}
		}
	}
}
