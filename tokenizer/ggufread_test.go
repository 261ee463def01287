package tokenizer

// A minimal, test-only GGUF metadata reader (header + key/value section only), so the tests do
// not depend on package gguf. It converts values to the Go types MetadataSource documents.

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
)

type testGGUF map[string]any

func (g testGGUF) Lookup(key string) (any, bool) { v, ok := g[key]; return v, ok }

func readTestGGUF(path string) (testGGUF, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	var hdr struct {
		Magic   [4]byte
		Version uint32
		NTensor uint64
		NKV     uint64
	}
	if err := binary.Read(r, binary.LittleEndian, &hdr); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	if string(hdr.Magic[:]) != "GGUF" || hdr.Version < 2 || hdr.NKV > 1<<20 {
		return nil, fmt.Errorf("%s: not a GGUF v2/v3 file", path)
	}
	out := testGGUF{}
	for i := uint64(0); i < hdr.NKV; i++ {
		key, err := readGGUFString(r)
		if err != nil {
			return nil, fmt.Errorf("%s: kv %d key: %w", path, i, err)
		}
		var typ uint32
		if err := binary.Read(r, binary.LittleEndian, &typ); err != nil {
			return nil, err
		}
		v, err := readGGUFValue(r, typ)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, key, err)
		}
		out[key] = v
	}
	return out, nil
}

func readGGUFString(r io.Reader) (string, error) {
	var n uint64
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return "", err
	}
	if n > 1<<30 {
		return "", fmt.Errorf("string length %d too large", n)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return string(b), err
}

func readGGUFValue(r io.Reader, typ uint32) (any, error) {
	le := binary.LittleEndian
	switch typ {
	case 0, 1: // u8, i8
		var x uint8
		err := binary.Read(r, le, &x)
		return x, err
	case 2, 3:
		var x uint16
		err := binary.Read(r, le, &x)
		return x, err
	case 4:
		var x uint32
		err := binary.Read(r, le, &x)
		return x, err
	case 5:
		var x int32
		err := binary.Read(r, le, &x)
		return x, err
	case 6:
		var x uint32
		err := binary.Read(r, le, &x)
		return math.Float32frombits(x), err
	case 7:
		var x uint8
		err := binary.Read(r, le, &x)
		return x != 0, err
	case 8:
		return readGGUFString(r)
	case 10, 11, 12:
		var x uint64
		err := binary.Read(r, le, &x)
		return x, err
	case 9:
		var et uint32
		var n uint64
		if err := binary.Read(r, le, &et); err != nil {
			return nil, err
		}
		if err := binary.Read(r, le, &n); err != nil {
			return nil, err
		}
		if n > 1<<24 {
			return nil, fmt.Errorf("array too long (%d)", n)
		}
		switch et {
		case 8:
			s := make([]string, n)
			for i := range s {
				var err error
				if s[i], err = readGGUFString(r); err != nil {
					return nil, err
				}
			}
			return s, nil
		case 5:
			s := make([]int32, n)
			return s, binary.Read(r, le, s)
		case 6:
			s := make([]float32, n)
			return s, binary.Read(r, le, s)
		default:
			vals := make([]any, n)
			for i := range vals {
				v, err := readGGUFValue(r, et)
				if err != nil {
					return nil, err
				}
				vals[i] = v
			}
			return vals, nil
		}
	}
	return nil, fmt.Errorf("unknown GGUF type %d", typ)
}
