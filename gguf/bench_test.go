package gguf

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	parser "github.com/gpustack/gguf-parser-go"
)

// Benchmarks only run with -bench; they create multi-GB (sparse) and 1 GB files in
// os.TempDir(). Suggested: go test -run '^$' -bench . -benchtime 1x ./gguf/

// peakRSS returns VmHWM in MiB; resetPeakRSS restarts it (Linux >= 4.0).
func peakRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return -1
}

func resetPeakRSS() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// sparseModel writes a header shaped like a 7B-class model (Qwen2-sized vocab and
// merges, 28 layers × 11 tensors) whose data section (~4.3 GB of Q8_0/F32) is a hole.
func sparseModel(b *testing.B) (string, *File) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "sparse.gguf")
	md := Metadata{
		{"general.architecture", String("qwen2")},
		{"general.name", String("sparse benchmark")},
		{"qwen2.block_count", Uint32(28)},
		{"tokenizer.ggml.model", String("gpt2")},
		{"tokenizer.ggml.tokens", Array(makeStrings(151936))},
		{"tokenizer.ggml.token_type", Array(make([]int32, 151936))},
		{"tokenizer.ggml.merges", Array(makeStrings(151387))},
	}
	var ts []TensorInfo
	add := func(name string, dims []uint64, typ GGMLType) {
		ts = append(ts, TensorInfo{Name: name, Dims: dims, Type: typ})
	}
	add("token_embd.weight", []uint64{3584, 152064}, TypeQ8_0)
	for l := 0; l < 28; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", []uint64{3584}, TypeF32)
		add(p+"attn_q.weight", []uint64{3584, 3584}, TypeQ8_0)
		add(p+"attn_k.weight", []uint64{3584, 512}, TypeQ8_0)
		add(p+"attn_v.weight", []uint64{3584, 512}, TypeQ8_0)
		add(p+"attn_output.weight", []uint64{3584, 3584}, TypeQ8_0)
		add(p+"attn_q.bias", []uint64{3584}, TypeF32)
		add(p+"ffn_norm.weight", []uint64{3584}, TypeF32)
		add(p+"ffn_gate.weight", []uint64{3584, 18944}, TypeQ8_0)
		add(p+"ffn_up.weight", []uint64{3584, 18944}, TypeQ8_0)
		add(p+"ffn_down.weight", []uint64{18944, 3584}, TypeQ8_0)
	}
	add("output.weight", []uint64{3584, 152064}, TypeQ8_0)
	var off uint64
	for i := range ts {
		ts[i].Offset = off
		p, _ := alignUp(ts[i].NBytes(), DefaultAlignment)
		off += p
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	if err := writeHeader(bw, md, ts); err != nil {
		b.Fatal(err)
	}
	bw.Flush()
	st, _ := f.Stat()
	data, _ := alignUp(uint64(st.Size()), DefaultAlignment)
	if err := f.Truncate(int64(data + off)); err != nil {
		b.Fatal(err)
	}
	f.Close()
	hdr, err := ReadHeader(path)
	if err != nil {
		b.Fatal(err)
	}
	return path, hdr
}

// BenchmarkReadHeader parses the header of a 4.3 GB (sparse) GGUF. Bytes/s counts header
// bytes. Baseline: gguf-parser-go (mmap mode) on the same file.
func BenchmarkReadHeader(b *testing.B) {
	path, hdr := sparseModel(b)
	b.Logf("file %.2f GB, header %.1f MB, %d tensors", float64(hdr.Size)/1e9, float64(hdr.HeaderSize)/1e6, len(hdr.Tensors))
	run := func(b *testing.B, f func() error) {
		b.SetBytes(int64(hdr.HeaderSize))
		b.ReportAllocs()
		resetPeakRSS()
		c0 := cpuSeconds()
		for b.Loop() {
			if err := f(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric((cpuSeconds()-c0)*1e3/float64(b.N), "cpu-ms/op")
		b.ReportMetric(peakRSS(), "peakRSS-MiB")
	}
	b.Run("ours-Open", func(b *testing.B) {
		run(b, func() error {
			m, err := Open(path)
			if err == nil {
				m.Close()
			}
			return err
		})
	})
	b.Run("baseline-gguf-parser-go", func(b *testing.B) {
		run(b, func() error { _, err := parser.ParseGGUFFile(path, parser.UseMMap()); return err })
	})
}

const benchWriteBytes = 1 << 30

// BenchmarkStreamWrite writes a 1 GiB GGUF (64 Q8_0 tensors of 16 MiB) through the
// streaming Writer, the producer handing over 1 MiB chunks. Baselines in the same run:
// the same bytes written straight to a file (plus fsync), with and without SHA-256.
func BenchmarkStreamWrite(b *testing.B) {
	const nTensors = 64
	per := uint64(benchWriteBytes / nTensors)
	cols := uint64(4096)
	rows := per / (cols / 32 * 34)
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 31)
	}
	dir := b.TempDir()
	b.Run("ours-Writer", func(b *testing.B) {
		var total int64
		resetPeakRSS()
		c0 := cpuSeconds()
		for b.Loop() {
			w, err := Create(filepath.Join(dir, "w.gguf"), WriterOptions{})
			if err != nil {
				b.Fatal(err)
			}
			w.Metadata = Metadata{{"general.architecture", String("llama")}}
			for i := 0; i < nTensors; i++ {
				w.AddTensor(fmt.Sprintf("t%d", i), []uint64{cols, rows}, TypeQ8_0)
			}
			for i := 0; i < nTensors; i++ {
				tw, err := w.TensorWriter(fmt.Sprintf("t%d", i))
				if err != nil {
					b.Fatal(err)
				}
				n := w.sizes[i]
				for n > 0 {
					k := min(n, uint64(len(chunk)))
					if _, err := tw.Write(chunk[:k]); err != nil {
						b.Fatal(err)
					}
					n -= k
				}
				if err := tw.Close(); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			total = w.Files()[0].Size
		}
		b.SetBytes(total)
		b.ReportMetric((cpuSeconds()-c0)/float64(b.N), "cpu-s/op")
		b.ReportMetric(peakRSS(), "peakRSS-MiB")
	})
	baseline := func(b *testing.B, hash bool) {
		resetPeakRSS()
		b.SetBytes(int64(rows * (cols / 32 * 34) * nTensors))
		c0 := cpuSeconds()
		for b.Loop() {
			f, err := os.Create(filepath.Join(dir, "raw.bin"))
			if err != nil {
				b.Fatal(err)
			}
			h := sha256.New()
			for i := 0; i < nTensors; i++ {
				n := rows * (cols / 32 * 34)
				for n > 0 {
					k := min(n, uint64(len(chunk)))
					if _, err := f.Write(chunk[:k]); err != nil {
						b.Fatal(err)
					}
					if hash {
						h.Write(chunk[:k])
					}
					n -= k
				}
			}
			f.Sync()
			f.Close()
		}
		b.ReportMetric((cpuSeconds()-c0)/float64(b.N), "cpu-s/op")
		b.ReportMetric(peakRSS(), "peakRSS-MiB")
	}
	b.Run("baseline-raw-write", func(b *testing.B) { baseline(b, false) })
	b.Run("baseline-raw-write+sha256", func(b *testing.B) { baseline(b, true) })
}
