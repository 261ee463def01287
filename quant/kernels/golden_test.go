package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// goldenCase is one case record of a /testdata/golden/*.bin file (see its README).
type goldenCase struct {
	name   string
	rows   int
	cols   int
	x      []float32 // inputs, rows×cols
	q      []byte    // quantized without imatrix
	y      []float32 // ggml's dequantization of q (nil without DEQUANT)
	qIm    []byte    // quantized with imatrix (nil without)
	yIm    []float32
	rowLen int // bytes per quantized row
}

type goldenFile struct {
	typeID    uint32
	typeName  string
	blockSize int
	typeSize  int
	cases     []goldenCase
}

type goldenReader struct {
	b   []byte
	off int
	err error
}

func (r *goldenReader) u32() uint32 {
	if r.err != nil {
		return 0
	}
	if len(r.b)-r.off < 4 {
		r.err = errors.New("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *goldenReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.b)-r.off < n {
		r.err = errors.New("truncated")
		return nil
	}
	v := r.b[r.off : r.off+n]
	r.off += n
	return v
}

func (r *goldenReader) str() string { return string(r.bytes(int(r.u32()))) }

func (r *goldenReader) f32s(n int) []float32 {
	b := r.bytes(4 * n)
	if b == nil {
		return nil
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func parseGolden(b []byte) (*goldenFile, error) {
	r := &goldenReader{b: b}
	if string(r.bytes(4)) != "TQGV" {
		return nil, errors.New("bad magic")
	}
	if v := r.u32(); v != 1 {
		return nil, fmt.Errorf("unknown version %d", v)
	}
	g := &goldenFile{typeID: r.u32(), typeName: r.str()}
	r.str() // commit
	r.u32() // producer
	g.blockSize = int(r.u32())
	g.typeSize = int(r.u32())
	flags := r.u32()
	ncases := int(r.u32())
	if r.err != nil || g.blockSize <= 0 || ncases > 64 {
		return nil, fmt.Errorf("bad header: %v", r.err)
	}
	for i := 0; i < ncases; i++ {
		var c goldenCase
		c.name = r.str()
		c.rows, c.cols = int(r.u32()), int(r.u32())
		if c.rows > 1<<12 || c.cols > 1<<14 || c.cols%g.blockSize != 0 {
			return nil, fmt.Errorf("case %d: bad shape %d×%d", i, c.rows, c.cols)
		}
		n := c.rows * c.cols
		c.x = r.f32s(n)
		imFlag := r.u32()
		if imFlag == 1 {
			r.f32s(c.cols)
		}
		c.rowLen = c.cols / g.blockSize * g.typeSize
		if nb := int(r.u32()); nb != c.rows*c.rowLen {
			return nil, fmt.Errorf("case %q: nbytes %d, want %d", c.name, nb, c.rows*c.rowLen)
		}
		c.q = r.bytes(c.rows * c.rowLen)
		if flags&2 != 0 {
			c.y = r.f32s(n)
		}
		if imFlag == 1 {
			if nb := int(r.u32()); nb != c.rows*c.rowLen {
				return nil, fmt.Errorf("case %q: nbytes_im %d", c.name, nb)
			}
			c.qIm = r.bytes(c.rows * c.rowLen)
			if flags&2 != 0 {
				c.yIm = r.f32s(n)
			}
		}
		if r.err != nil {
			return nil, fmt.Errorf("case %d: %v", i, r.err)
		}
		g.cases = append(g.cases, c)
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("%d trailing bytes", len(b)-r.off)
	}
	return g, nil
}

// repoRoot walks up from the working directory to the directory holding go.mod.
func repoRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test directory")
		}
		dir = parent
	}
}

// loadGolden reads testdata/golden/<name>; a missing file skips the test unless
// TQ_REQUIRE_REFS=1.
func loadGolden(t testing.TB, name string, typeSize int) *goldenFile {
	t.Helper()
	path := filepath.Join(repoRoot(t), "testdata", "golden", name)
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) && os.Getenv("TQ_REQUIRE_REFS") != "1" {
			t.Skipf("golden vectors %s not present (set TQ_REQUIRE_REFS=1 to require them)", path)
		}
		t.Fatalf("reading golden vectors: %v", err)
	}
	g, err := parseGolden(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if g.typeSize != typeSize {
		t.Fatalf("%s: type size %d, want %d", path, g.typeSize, typeSize)
	}
	return g
}
