package gguf

import (
	"fmt"
	"io"
	"os"

	"github.com/tq-project/tq/internal/boundedread"
)

// Check returns the structural problems of the GGUF file readable through r (size bytes;
// name is used in the problems). It reports everything ReadFile rejects, collecting all
// defects where parsing can continue, plus what llama.cpp's loader rejects although the
// file is readable:
//
//   - tensor types unknown, ne0 not a multiple of the block size, sizes overflowing;
//   - tensor data outside the file, misaligned or overlapping;
//   - offsets not back to back in info order (llama.cpp requires offset(i) =
//     offset(i-1) + PAD(nbytes(i-1), alignment), starting at 0);
//   - the data section's trailing padding missing (file shorter than DataOffset + DataSize);
//   - tensor names longer than 63 bytes, empty, non-UTF-8 or duplicated; keys likewise;
//   - general.alignment not a UINT32 power of two;
//   - nested arrays (rejected by llama.cpp's reader);
//   - split.no / split.count not UINT16, split.tensors.count not INT32.
//
// A file that cannot be parsed at all yields the single parse problem. An empty result
// means no problem was found.
func Check(r io.ReaderAt, size int64, name string) []Problem {
	f, probs, err := parse(r, size, name, true)
	if err != nil {
		return []Problem{*asProblem(err, name)}
	}
	return append(probs, extraProblems(f)...)
}

func asProblem(err error, name string) *Problem {
	if p, ok := err.(*Problem); ok {
		return p
	}
	return &Problem{File: name, Offset: -1, Msg: err.Error(), Err: err}
}

// CheckFile runs Check on the file at path. The error is only for failing to open it.
func CheckFile(path string) ([]Problem, error) {
	f, st, err := boundedread.Open(path, "GGUF file")
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer f.Close()
	return Check(f, st.Size(), path), nil
}

// CheckModel checks a model like Open opens it: every shard of a split model (a missing
// shard is a problem) and the consistency of the split keys and tensor names across
// shards. The error is only for failing to open the file at path itself.
func CheckModel(path string) ([]Problem, error) {
	prefix, _, count, ok := ParseSplitPath(path)
	if !ok {
		probs, err := CheckFile(path)
		if err != nil {
			return nil, err
		}
		if len(probs) == 0 {
			if f, err := ReadHeader(path); err == nil {
				probs = splitProblems([]*File{f}, 1)
			}
		}
		return probs, nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	var probs []Problem
	var files []*File
	for i := 0; i < count; i++ {
		p := SplitPath(prefix, i, count)
		ps, err := CheckFile(p)
		if err != nil {
			probs = append(probs, Problem{File: p, Offset: -1, Msg: fmt.Sprintf("shard %d of %d: %v", i+1, count, err), Err: err})
			continue
		}
		probs = append(probs, ps...)
		if len(ps) == 0 {
			if f, err := ReadHeader(p); err == nil {
				files = append(files, f)
			}
		}
	}
	if len(probs) == 0 {
		probs = splitProblems(files, count)
	}
	return probs, nil
}

// ReadHeader parses the header of the GGUF file at path (see ReadFile). It does not
// follow split sets; use Open for that.
func ReadHeader(path string) (*File, error) {
	fh, st, err := boundedread.Open(path, "GGUF file")
	if err != nil {
		return nil, fmt.Errorf("gguf: %w", err)
	}
	defer fh.Close()
	return ReadFile(fh, st.Size(), path)
}

// extraProblems are the llama.cpp compatibility checks on a leniently parsed file.
func extraProblems(f *File) []Problem {
	var out []Problem
	add := func(field, format string, args ...any) {
		out = append(out, Problem{File: f.Path, Offset: -1, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	for i, kv := range f.Metadata {
		if hasNested(kv.Value) {
			add(fmt.Sprintf("kv[%d] %q", i, kv.Key), "nested arrays are rejected by llama.cpp")
		}
	}
	wantType := map[string]ValueType{KeySplitNo: ValueUint16, KeySplitCount: ValueUint16, KeySplitTensorsCount: ValueInt32}
	for _, k := range []string{KeySplitNo, KeySplitCount, KeySplitTensorsCount} {
		if v, ok := f.Metadata.Get(k); ok && v.Type() != wantType[k] {
			add(k, "has type %s, llama.cpp requires %s", v.Type(), wantType[k])
		}
	}
	var expect uint64
	allValid := true
	for i, t := range f.Tensors {
		field := fmt.Sprintf("tensor[%d] %q", i, t.Name)
		if len(t.Name) > MaxNameLen {
			add(field+" name", "name is %d bytes; llama.cpp allows at most %d", len(t.Name), MaxNameLen)
		}
		n, err := t.Size()
		if err != nil {
			allValid = false
			continue
		}
		if t.Offset != expect {
			add(field+" offset", "offset %d, but llama.cpp requires %d (tensors back to back in info order, each padded to %d bytes)",
				t.Offset, expect, f.Alignment)
		}
		p, ok := alignUp(n, f.Alignment)
		e2 := t.Offset + p
		if !ok || e2 < t.Offset {
			allValid = false
			continue
		}
		expect = e2
	}
	if allValid && len(f.Tensors) > 0 {
		end := f.DataOffset + f.DataSize()
		if end > uint64(f.Size) {
			add("data section", "file has %d bytes but the padded data section ends at %d (trailing padding or data missing)", f.Size, end)
		}
	}
	return out
}

func hasNested(v Value) bool { return v.Type() == ValueArray && v.ElemType() == ValueArray }

// splitProblems checks the split keys of the files of one model (count shards expected,
// files in shard order) and tensor-name uniqueness across them.
func splitProblems(files []*File, count int) []Problem {
	var out []Problem
	add := func(f *File, field, format string, args ...any) {
		out = append(out, Problem{File: f.Path, Offset: -1, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	get := func(f *File, key string) (uint64, bool) {
		if !f.Metadata.Has(key) {
			return 0, false
		}
		v, err := f.Metadata.GetUint(key)
		if err != nil {
			add(f, key, "%v", err)
			return 0, false
		}
		return v, true
	}
	if len(files) == 0 {
		return nil
	}
	if count == 1 {
		f := files[0]
		if c, ok := get(f, KeySplitCount); ok && c > 1 {
			add(f, KeySplitCount, "is %d but the file is not named like a shard (NAME-00001-of-%05d.gguf)", c, c)
		}
		if no, ok := get(f, KeySplitNo); ok && no != 0 {
			add(f, KeySplitNo, "is %d in an unsplit file", no)
		}
		return out
	}
	if len(files) != count {
		return out // missing shards were reported by the caller
	}
	var total uint64
	for i, f := range files {
		no, hasNo := get(f, KeySplitNo)
		c, hasCount := get(f, KeySplitCount)
		tc, hasTC := get(f, KeySplitTensorsCount)
		switch {
		case !hasNo:
			add(f, KeySplitNo, "missing in shard %d of %d", i+1, count)
		case no != uint64(i):
			add(f, KeySplitNo, "is %d, expected %d from the file name", no, i)
		}
		switch {
		case !hasCount:
			add(f, KeySplitCount, "missing in shard %d of %d", i+1, count)
		case c != uint64(count):
			add(f, KeySplitCount, "is %d but the file name says %d shards", c, count)
		}
		if i == 0 {
			if !hasTC {
				add(f, KeySplitTensorsCount, "missing in the first shard")
			}
			total = tc
		} else if hasTC && tc != total {
			add(f, KeySplitTensorsCount, "is %d, the first shard says %d", tc, total)
		}
	}
	var sum uint64
	seen := map[string]string{}
	for _, f := range files {
		sum += uint64(len(f.Tensors))
		for _, t := range f.Tensors {
			if other, dup := seen[t.Name]; dup {
				add(f, fmt.Sprintf("tensor %q", t.Name), "also appears in %s", other)
			}
			seen[t.Name] = f.Path
		}
	}
	if files[0].Metadata.Has(KeySplitTensorsCount) && sum != total {
		add(files[0], KeySplitTensorsCount, "is %d but the %d shards hold %d tensors", total, count, sum)
	}
	return out
}
