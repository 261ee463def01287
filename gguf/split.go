package gguf

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// MaxShards is the largest shard count split.count (UINT16) can express.
const MaxShards = 65535

var splitRe = regexp.MustCompile(`^(.+)-([0-9]{5})-of-([0-9]{5})\.gguf$`)

// SplitPath returns the llama.cpp shard name "{prefix}-{NNNNN}-of-{MMMMM}.gguf" of the
// shard with 0-based index (its file number is index+1) in a set of count shards.
func SplitPath(prefix string, index, count int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, index+1, count)
}

// ParseSplitPath reports whether path is named like a shard of a split model and returns
// its prefix, 0-based index and the shard count.
func ParseSplitPath(path string) (prefix string, index, count int, ok bool) {
	m := splitRe.FindStringSubmatch(path)
	if m == nil {
		return "", 0, 0, false
	}
	no, _ := strconv.Atoi(m[2])
	count, _ = strconv.Atoi(m[3])
	if no < 1 || no > count {
		return "", 0, 0, false
	}
	return m[1], no - 1, count, true
}

// splitPrefix turns an output path into the prefix shard names are built from:
// "dir/model.gguf" -> "dir/model".
func splitPrefix(path string) string {
	return strings.TrimSuffix(path, ".gguf")
}

// shardRange is the half-open range of tensor indices one shard holds.
type shardRange struct{ first, end int }

// planShards distributes tensors (with their sizes already padded to the alignment) in
// order, as llama-gguf-split does: a new shard starts before a tensor when the current
// shard already holds maxTensors tensors, or when adding the tensor would take the
// shard's data above maxBytes. A shard never starts empty, so a tensor larger than
// maxBytes gets a shard of its own (llama-gguf-split aborts instead). Zero limits are off.
func planShards(padded []uint64, maxBytes uint64, maxTensors int) []shardRange {
	var out []shardRange
	cur := shardRange{}
	var curBytes uint64
	for i, n := range padded {
		count := i - cur.first
		if count > 0 && ((maxTensors > 0 && count >= maxTensors) ||
			(maxBytes > 0 && (curBytes+n > maxBytes || curBytes+n < curBytes))) {
			cur.end = i
			out = append(out, cur)
			cur = shardRange{first: i}
			curBytes = 0
		}
		curBytes += n
	}
	cur.end = len(padded)
	return append(out, cur)
}
