package tokenizer

// A minimal, test-only GGUF v3 writer for metadata-only files (no tensors), used to hand an
// exported vocabulary to llama.cpp.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math"
	"os"
)

func writeTestGGUF(path string, kvs []KeyValue) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	le := binary.LittleEndian
	u32 := func(v uint32) { _ = binary.Write(w, le, v) }
	u64 := func(v uint64) { _ = binary.Write(w, le, v) }
	str := func(s string) { u64(uint64(len(s))); _, _ = w.WriteString(s) }
	_, _ = w.WriteString("GGUF")
	u32(3)
	u64(0)
	u64(uint64(len(kvs)))
	for _, kv := range kvs {
		str(kv.Key)
		switch v := kv.Value.(type) {
		case string:
			u32(8)
			str(v)
		case uint32:
			u32(4)
			u32(v)
		case int32:
			u32(5)
			u32(uint32(v))
		case float32:
			u32(6)
			u32(math.Float32bits(v))
		case bool:
			u32(7)
			b := byte(0)
			if v {
				b = 1
			}
			_ = w.WriteByte(b)
		case []string:
			u32(9)
			u32(8)
			u64(uint64(len(v)))
			for _, s := range v {
				str(s)
			}
		case []int32:
			u32(9)
			u32(5)
			u64(uint64(len(v)))
			_ = binary.Write(w, le, v)
		case []float32:
			u32(9)
			u32(6)
			u64(uint64(len(v)))
			_ = binary.Write(w, le, v)
		default:
			f.Close()
			return fmt.Errorf("writeTestGGUF: %s: unsupported value type %T", kv.Key, kv.Value)
		}
	}
	// Alignment padding after the (empty) tensor-info section.
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	off, _ := f.Seek(0, 1)
	if pad := (32 - off%32) % 32; pad > 0 {
		_, _ = f.Write(make([]byte, pad))
	}
	return f.Close()
}
