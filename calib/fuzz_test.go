package calib

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func decompressForTest(t testing.TB, b []byte) []byte {
	t.Helper()
	zr, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	out, err := zr.DecodeAll(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testEncoder is shared: creating a zstd encoder per call dominates the fuzzers' time.
var testEncoder = sync.OnceValue(func() *zstd.Encoder {
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err)
	}
	return zw
})

func recompressForTest(t testing.TB, raw []byte) []byte {
	t.Helper()
	return testEncoder().EncodeAll(raw, nil)
}

// FuzzReadStats feeds arbitrary decompressed content (re-compressed) to the statistics
// decoder: it must return an error or a self-consistent result, never panic or allocate
// beyond the data.
func FuzzReadStats(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteStats(&buf, randomStats(2)); err != nil {
		f.Fatal(err)
	}
	raw := decompressForTest(f, buf.Bytes())
	f.Add(raw)
	f.Add(raw[:len(raw)/2])
	f.Add([]byte(StatsMagic + "\x01\x00\x00\x00\xff\xff\xff\x7f"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadStats(bytes.NewReader(recompressForTest(t, data)))
		if err != nil {
			return
		}
		for _, n := range s.Names() {
			if err := s.Tensors[n].check(); err != nil {
				t.Fatalf("accepted inconsistent tensor: %v", err)
			}
			for e := 0; e < s.Tensors[n].NMat; e++ {
				s.Importance(n, e)
			}
		}
		var out bytes.Buffer
		if err := WriteStats(&out, s); err != nil {
			t.Fatalf("accepted statistics cannot be written back: %v", err)
		}
	})
}

// FuzzParseIMatrixDat checks the legacy imatrix parser on arbitrary bytes.
func FuzzParseIMatrixDat(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteIMatrixDat(&buf, randomStats(3), &IMatrixOptions{ChunkSize: 4}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:20])
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 127})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseIMatrixDat(data, &ImportOptions{ChunkSize: 8})
		if err != nil {
			return
		}
		for _, n := range s.Names() {
			if err := s.Tensors[n].check(); err != nil {
				t.Fatalf("accepted inconsistent entry: %v", err)
			}
		}
	})
}

// FuzzLoadIMatrixGGUF checks the GGUF imatrix importer on arbitrary files.
func FuzzLoadIMatrixGGUF(f *testing.F) {
	dir := f.TempDir()
	p := filepath.Join(dir, "seed.gguf")
	if err := WriteIMatrixGGUF(p, randomStats(4), &IMatrixOptions{ChunkSize: 4}); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)-7])
	path := filepath.Join(dir, "input.gguf") // one file per worker process, rewritten per input
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := LoadIMatrix(path, nil)
		if err != nil {
			return
		}
		for _, n := range s.Names() {
			if err := s.Tensors[n].check(); err != nil {
				t.Fatalf("accepted inconsistent entry: %v", err)
			}
		}
	})
}
