package testenv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// The ggml golden vectors: testdata/golden/*.bin, one file per ggml type, holding inputs,
// ggml's quantized bytes and ggml's dequantized floats. The layout (version 1) is specified
// in testdata/golden/README.md; ParseGolden is its only reader.

// Golden file header flags.
const (
	GoldenImatrix = 1 << 0 // every case carries a second quantization made with an imatrix
	GoldenDequant = 1 << 1 // ggml's dequantized floats are stored
)

// Limits of a golden file beyond which ParseGolden calls it corrupt. The committed files
// have at most 6 cases of at most 16 × 1024 values and block sizes up to 256 bytes.
const (
	goldenMaxCases     = 64
	goldenMaxValues    = 1 << 22 // rows × columns of one case
	goldenMaxBlockSize = 1 << 16 // elements per block
	goldenMaxTypeSize  = 1 << 16 // bytes per block
)

// GoldenFile is one parsed golden-vector file.
type GoldenFile struct {
	TypeID    uint32 // enum ggml_type at the generator's ggml commit
	TypeName  string // ggml_type_name, e.g. "q4_K"
	Commit    string // ggml commit the vectors came from
	Producer  uint32 // 0 ggml_quantize_chunk, 1 from_float_ref, 2 the CPU backend's from_float
	BlockSize int    // elements per block
	TypeSize  int    // bytes per block
	Flags     uint32 // GoldenImatrix, GoldenDequant, …
	Cases     []GoldenCase
}

// GoldenCase is one case record: a Rows × Cols input matrix and what ggml made of it.
type GoldenCase struct {
	Name       string
	Rows, Cols int
	RowBytes   int       // bytes of one quantized row: Cols / BlockSize · TypeSize
	X          []float32 // inputs, row-major
	Imatrix    []float32 // one weight per column; nil without an imatrix run
	Q          []byte    // quantized without the imatrix
	Y          []float32 // ggml's dequantization of Q; nil without GoldenDequant
	QIm        []byte    // quantized with the imatrix; nil without an imatrix run
	YIm        []float32 // ggml's dequantization of QIm; nil without both
}

// HasImatrixRun reports whether the case carries the quantization made with the imatrix.
func (c *GoldenCase) HasImatrixRun() bool { return c.Imatrix != nil }

// goldenReader reads little-endian fields; the first failure sticks.
type goldenReader struct {
	b   []byte
	off int
	err error
}

func (r *goldenReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *goldenReader) u32(field string) uint32 {
	b := r.bytes(4, field)
	if b == nil {
		return 0
	}
	return binary.LittleEndian.Uint32(b)
}

// bytes returns the next n bytes (a sub-slice of the input) or nil, recording a truncation.
func (r *goldenReader) bytes(n uint64, field string) []byte {
	if r.err != nil {
		return nil
	}
	if left := uint64(len(r.b) - r.off); n > left {
		r.fail("%s: truncated: %d bytes needed at offset %d, %d left", field, n, r.off, left)
		return nil
	}
	v := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *goldenReader) str(field string) string {
	n := r.u32(field + " length")
	return string(r.bytes(uint64(n), field))
}

// f32s reads n float32 values; the bytes are checked to be there before anything is allocated.
func (r *goldenReader) f32s(n int, field string) []float32 {
	b := r.bytes(4*uint64(n), field)
	if b == nil {
		return nil
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// ParseGolden parses a golden-vector file (testdata/golden/README.md, version 1). It rejects
// a wrong magic, an unknown version, implausible sizes, a size field that disagrees with the
// shape, an imatrix flag that disagrees with the header, truncation and trailing bytes. Every
// allocation is bounded by the bytes present. The returned byte slices alias b.
func ParseGolden(b []byte) (*GoldenFile, error) {
	r := &goldenReader{b: b}
	if magic := r.bytes(4, "magic"); magic == nil || string(magic) != "TQGV" {
		return nil, errors.New("not a golden-vector file (magic is not TQGV)")
	}
	if v := r.u32("version"); r.err == nil && v != 1 {
		return nil, fmt.Errorf("unknown version %d (want 1)", v)
	}
	g := &GoldenFile{}
	g.TypeID = r.u32("type_id")
	g.TypeName = r.str("type_name")
	g.Commit = r.str("commit")
	g.Producer = r.u32("producer")
	bs, ts := r.u32("block_size"), r.u32("type_size")
	g.Flags = r.u32("flags")
	n := r.u32("ncases")
	if r.err != nil {
		return nil, fmt.Errorf("header: %v", r.err)
	}
	switch {
	case bs == 0 || bs > goldenMaxBlockSize:
		return nil, fmt.Errorf("header: block_size %d out of range [1, %d]", bs, goldenMaxBlockSize)
	case ts == 0 || ts > goldenMaxTypeSize:
		return nil, fmt.Errorf("header: type_size %d out of range [1, %d]", ts, goldenMaxTypeSize)
	case n > goldenMaxCases:
		return nil, fmt.Errorf("header: %d cases (at most %d)", n, goldenMaxCases)
	}
	g.BlockSize, g.TypeSize = int(bs), int(ts)
	for i := uint32(0); i < n; i++ {
		c, err := r.goldenCase(g)
		if err != nil {
			return nil, fmt.Errorf("case %d %q: %v", i, c.Name, err)
		}
		g.Cases = append(g.Cases, c)
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("%d trailing bytes after the last case", len(b)-r.off)
	}
	return g, nil
}

func (r *goldenReader) goldenCase(g *GoldenFile) (GoldenCase, error) {
	var c GoldenCase
	c.Name = r.str("name")
	rows, cols := r.u32("rows"), r.u32("cols")
	if r.err != nil {
		return c, r.err
	}
	if rows == 0 || cols == 0 || uint64(rows)*uint64(cols) > goldenMaxValues || cols%uint32(g.BlockSize) != 0 {
		return c, fmt.Errorf("bad shape %d×%d (block size %d, at most %d values)", rows, cols, g.BlockSize, goldenMaxValues)
	}
	c.Rows, c.Cols = int(rows), int(cols)
	c.RowBytes = c.Cols / g.BlockSize * g.TypeSize
	nvals := c.Rows * c.Cols
	nbytes := uint64(c.Rows) * uint64(c.RowBytes) // ≤ 2^22 · 2^16
	c.X = r.f32s(nvals, "x")
	imFlag := r.u32("imatrix_flag")
	if r.err == nil && imFlag != g.Flags&GoldenImatrix {
		return c, fmt.Errorf("imatrix_flag %d disagrees with the header flags %#x", imFlag, g.Flags)
	}
	if imFlag == 1 {
		c.Imatrix = r.f32s(c.Cols, "imatrix")
	}
	if nb := r.u32("nbytes"); r.err == nil && uint64(nb) != nbytes {
		return c, fmt.Errorf("nbytes %d, want rows·(cols/block_size)·type_size = %d", nb, nbytes)
	}
	c.Q = r.bytes(nbytes, "q")
	if g.Flags&GoldenDequant != 0 {
		c.Y = r.f32s(nvals, "y")
	}
	if imFlag == 1 {
		if nb := r.u32("nbytes_im"); r.err == nil && uint64(nb) != nbytes {
			return c, fmt.Errorf("nbytes_im %d, want %d", nb, nbytes)
		}
		c.QIm = r.bytes(nbytes, "q_im")
		if g.Flags&GoldenDequant != 0 {
			c.YIm = r.f32s(nvals, "y_im")
		}
	}
	return c, r.err
}

// goldenMaxFile bounds the size of a golden file (the committed ones are under 600 KB).
const goldenMaxFile = 64 << 20

// readGoldenFile reads a regular file of at most goldenMaxFile bytes.
func readGoldenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, goldenMaxFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(b) > goldenMaxFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, goldenMaxFile)
	}
	return b, nil
}

var goldenCache struct {
	sync.Mutex
	files map[string]*GoldenFile
}

// LoadGolden reads and parses testdata/golden/<name>.bin (name without the extension, e.g.
// "Q4_K" or "Q8_0.cpu_from_float"). The vectors are committed to the repository, so a missing
// or corrupt file fails t. Files are parsed once per test process; callers must not modify
// the result.
func LoadGolden(t testing.TB, name string) *GoldenFile {
	t.Helper()
	goldenCache.Lock()
	defer goldenCache.Unlock()
	if g, ok := goldenCache.files[name]; ok {
		return g
	}
	path := filepath.Join(RepoRoot(t), "testdata", "golden", name+".bin")
	b, err := readGoldenFile(path)
	if err != nil {
		t.Fatalf("golden vectors: %v", err)
	}
	g, err := ParseGolden(b)
	if err != nil {
		t.Fatalf("golden vectors %s: %v", path, err)
	}
	if goldenCache.files == nil {
		goldenCache.files = map[string]*GoldenFile{}
	}
	goldenCache.files[name] = g
	return g
}
