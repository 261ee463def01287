package quant

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tq-project/tq/gguf"
)

// Reader and tests for testdata/golden (vectors produced by ggml's own quantizers;
// layout in testdata/golden/README.md).

type goldenCase struct {
	name     string
	R, C     int
	x        []float32
	im       []float32 // nil without an imatrix run
	q, qIm   []byte
	y, yIm   []float32 // nil without DEQUANT
	hasDeq   bool
	hasImRun bool
}

type goldenFile struct {
	typeID    gguf.GGMLType
	typeName  string
	producer  uint32
	blockSize int
	typeSize  int
	flags     uint32
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
		r.err = fmt.Errorf("truncated at offset %d", r.off)
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *goldenReader) bytes(n uint32) []byte {
	if r.err != nil {
		return nil
	}
	if uint64(len(r.b)-r.off) < uint64(n) {
		r.err = fmt.Errorf("truncated: need %d bytes at offset %d", n, r.off)
		return nil
	}
	v := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *goldenReader) str() string { return string(r.bytes(r.u32())) }

func (r *goldenReader) f32s(n int) []float32 {
	b := r.bytes(uint32(4 * n))
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
	if !bytes.HasPrefix(b, []byte("TQGV")) {
		return nil, errors.New("bad magic")
	}
	r.off = 4
	if v := r.u32(); v != 1 {
		return nil, fmt.Errorf("unknown version %d", v)
	}
	g := &goldenFile{}
	g.typeID = gguf.GGMLType(r.u32())
	g.typeName = r.str()
	_ = r.str() // commit
	g.producer = r.u32()
	g.blockSize = int(r.u32())
	g.typeSize = int(r.u32())
	g.flags = r.u32()
	n := r.u32()
	if r.err != nil {
		return nil, r.err
	}
	if n > 64 || g.blockSize <= 0 || g.typeSize <= 0 {
		return nil, fmt.Errorf("implausible header: %d cases, block %d, size %d", n, g.blockSize, g.typeSize)
	}
	for i := uint32(0); i < n; i++ {
		var c goldenCase
		c.name = r.str()
		c.R, c.C = int(r.u32()), int(r.u32())
		if r.err != nil {
			return nil, r.err
		}
		if c.R <= 0 || c.C <= 0 || c.R*c.C > 1<<22 || c.C%g.blockSize != 0 {
			return nil, fmt.Errorf("case %q: bad shape %dx%d", c.name, c.R, c.C)
		}
		N := c.R * c.C
		c.x = r.f32s(N)
		imFlag := r.u32()
		if imFlag != g.flags&1 {
			return nil, fmt.Errorf("case %q: imatrix flag %d disagrees with header", c.name, imFlag)
		}
		c.hasImRun = imFlag == 1
		if c.hasImRun {
			c.im = r.f32s(c.C)
		}
		want := uint32(c.R * (c.C / g.blockSize) * g.typeSize)
		if nb := r.u32(); nb != want && r.err == nil {
			return nil, fmt.Errorf("case %q: nbytes %d, want %d", c.name, nb, want)
		}
		c.q = r.bytes(want)
		c.hasDeq = g.flags&2 != 0
		if c.hasDeq {
			c.y = r.f32s(N)
		}
		if c.hasImRun {
			if nb := r.u32(); nb != want && r.err == nil {
				return nil, fmt.Errorf("case %q: nbytes_im %d, want %d", c.name, nb, want)
			}
			c.qIm = r.bytes(want)
			if c.hasDeq {
				c.yIm = r.f32s(N)
			}
		}
		if r.err != nil {
			return nil, fmt.Errorf("case %q: %v", c.name, r.err)
		}
		g.cases = append(g.cases, c)
	}
	if r.off != len(b) {
		return nil, fmt.Errorf("%d trailing bytes", len(b)-r.off)
	}
	return g, nil
}

// repoRoot walks up from the test's directory to the directory holding go.mod.
func repoRoot(t testing.TB) string {
	t.Helper()
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

var goldenCache = map[string]*goldenFile{}

// loadGolden reads testdata/golden/<name>.bin. The vectors are part of the
// repository, so a missing file is a failure, not a skip.
func loadGolden(t testing.TB, name string) *goldenFile {
	t.Helper()
	if g, ok := goldenCache[name]; ok {
		return g
	}
	path := filepath.Join(repoRoot(t), "testdata", "golden", name+".bin")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden vectors missing: %v", err)
	}
	g, err := parseGolden(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	goldenCache[name] = g
	return g
}

var goldenWeightFiles = []string{"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
	"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"}

var goldenActFiles = []string{"Q8_0.cpu_from_float", "Q8_1.from_float_ref", "Q8_1.cpu_from_float", "Q8_K.cpu_from_float"}

func TestGoldenStructure(t *testing.T) {
	for _, name := range append(append([]string{}, goldenWeightFiles...), goldenActFiles...) {
		g := loadGolden(t, name)
		tr, ok := g.typeID.Traits()
		if !ok || !Supported(g.typeID) {
			t.Errorf("%s: type %d not supported", name, g.typeID)
			continue
		}
		if tr.BlockSize != g.blockSize || tr.TypeSize != g.typeSize || tr.Name != g.typeName {
			t.Errorf("%s: header %s/%d/%d, gguf traits %s/%d/%d", name, g.typeName, g.blockSize, g.typeSize, tr.Name, tr.BlockSize, tr.TypeSize)
		}
		if len(g.cases) < 5 {
			t.Errorf("%s: only %d cases", name, len(g.cases))
		}
	}
	if _, err := parseGolden([]byte("TQGX\x01\x00\x00\x00")); err == nil {
		t.Error("bad magic accepted")
	}
	g, _ := os.ReadFile(filepath.Join(repoRoot(t), "testdata", "golden", "Q4_0.bin"))
	if _, err := parseGolden(append(g, 0)); err == nil {
		t.Error("trailing byte accepted")
	}
	if _, err := parseGolden(g[:len(g)-1]); err == nil {
		t.Error("truncated file accepted")
	}
}

func bitsEqual(a, b []float32) (int, int) {
	diff, first := 0, -1
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			if first < 0 {
				first = i
			}
			diff++
		}
	}
	return diff, first
}

// TestGoldenDequantBitExact decodes every stored quantization with Dequantize and
// compares the float32 bit patterns with ggml's.
func TestGoldenDequantBitExact(t *testing.T) {
	for _, name := range append(append([]string{}, goldenWeightFiles...), goldenActFiles...) {
		g := loadGolden(t, name)
		for _, c := range g.cases {
			if !c.hasDeq {
				continue
			}
			runs := []struct {
				q []byte
				y []float32
				k string
			}{{c.q, c.y, "q"}}
			if c.hasImRun {
				runs = append(runs, struct {
					q []byte
					y []float32
					k string
				}{c.qIm, c.yIm, "q_im"})
			}
			for _, run := range runs {
				got := make([]float32, c.R*c.C)
				if err := Dequantize(g.typeID, got, run.q); err != nil {
					t.Fatalf("%s/%s: %v", name, c.name, err)
				}
				if n, i := bitsEqual(got, run.y); n != 0 {
					t.Errorf("%s/%s/%s: %d of %d values differ; first at %d: got %v (%#x) want %v (%#x)",
						name, c.name, run.k, n, len(got), i, got[i], math.Float32bits(got[i]), run.y[i], math.Float32bits(run.y[i]))
				}
			}
		}
	}
}

// TestGoldenQuantBitExact: F16/BF16/legacy types (both runs for Q4_0..Q5_1) and the
// activation formats must reproduce ggml's bytes exactly.
func TestGoldenQuantBitExact(t *testing.T) {
	for _, name := range []string{"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"} {
		g := loadGolden(t, name)
		for _, c := range g.cases {
			got := make([]byte, len(c.q))
			if c.name == "float_specials" {
				// NaN/Inf/overflow: Quantize rejects these (llama.cpp's validation would),
				// so check the element conversion itself.
				for i, v := range c.x {
					var h uint16
					if g.typeID == gguf.TypeF16 {
						h = FP32ToFP16(v)
					} else {
						h = FP32ToBF16(v)
					}
					binary.LittleEndian.PutUint16(got[2*i:], h)
				}
			} else if err := Quantize(g.typeID, got, c.x, c.R, c.C, &Options{TensorName: c.name}); err != nil {
				t.Fatalf("%s/%s: %v", name, c.name, err)
			}
			if !bytes.Equal(got, c.q) {
				t.Errorf("%s/%s: %d of %d blocks differ", name, c.name, diffBlocks(got, c.q, g.typeSize), len(c.q)/g.typeSize)
			}
			if c.hasImRun {
				if err := Quantize(g.typeID, got, c.x, c.R, c.C, &Options{Importance: c.im}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, c.qIm) {
					t.Errorf("%s/%s imatrix run: %d of %d blocks differ", name, c.name, diffBlocks(got, c.qIm, g.typeSize), len(c.q)/g.typeSize)
				}
			}
		}
	}
	acts := map[string]func([]byte, []float32){
		"Q8_0.cpu_from_float": QuantizeRowQ8_0,
		"Q8_1.cpu_from_float": QuantizeRowQ8_1,
		"Q8_1.from_float_ref": QuantizeRowQ8_1Ref,
		"Q8_K.cpu_from_float": QuantizeRowQ8K,
	}
	for name, f := range acts {
		g := loadGolden(t, name)
		for _, c := range g.cases {
			got := make([]byte, len(c.q))
			rs := len(c.q) / c.R
			for r := 0; r < c.R; r++ {
				f(got[r*rs:(r+1)*rs], c.x[r*c.C:(r+1)*c.C])
			}
			if !bytes.Equal(got, c.q) {
				t.Errorf("%s/%s: %d of %d blocks differ", name, c.name, diffBlocks(got, c.q, g.typeSize), len(c.q)/g.typeSize)
			}
		}
	}
}

func diffBlocks(a, b []byte, bs int) int {
	n := 0
	for i := 0; i+bs <= len(a); i += bs {
		if !bytes.Equal(a[i:i+bs], b[i:i+bs]) {
			n++
		}
	}
	return n
}

// blockErr is Σ w·(x−y)² over one block (w = 1 when im is nil).
func blockErr(x, y, im []float32, c0 int) float64 {
	var e float64
	for i := range x {
		d := float64(x[i]) - float64(y[i])
		w := 1.0
		if im != nil {
			w = float64(im[c0+i])
		}
		e += w * d * d
	}
	return e
}

// TestGoldenKQuantBlocks compares the K-quants and IQ4 types block by block with the
// README's policy: ideally 0 differing blocks; at most 1% (min 1) per case, each
// differing block's error <= 1.01× ggml's, and the case total <= 1.001× ggml's.
func TestGoldenKQuantBlocks(t *testing.T) {
	for _, name := range []string{"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"} {
		g := loadGolden(t, name)
		for _, c := range g.cases {
			for _, withIm := range []bool{false, true} {
				want, im := c.q, []float32(nil)
				if withIm {
					want, im = c.qIm, c.im
				}
				got := make([]byte, len(want))
				if err := Quantize(g.typeID, got, c.x, c.R, c.C, &Options{Importance: im}); err != nil {
					t.Fatal(err)
				}
				checkBlockPolicy(t, fmt.Sprintf("%s/%s/im=%v", name, c.name, withIm), g.typeID, c, got, want, im)
			}
		}
	}
}

func checkBlockPolicy(t *testing.T, label string, typ gguf.GGMLType, c goldenCase, got, want []byte, im []float32) {
	t.Helper()
	tr, _ := typ.Traits()
	nblocks := len(want) / tr.TypeSize
	bpr := c.C / tr.BlockSize
	yg := make([]float32, tr.BlockSize)
	yw := make([]float32, tr.BlockSize)
	diff := 0
	var sumGo, sumGG float64
	for b := 0; b < nblocks; b++ {
		qb := got[b*tr.TypeSize : (b+1)*tr.TypeSize]
		wb := want[b*tr.TypeSize : (b+1)*tr.TypeSize]
		if bytes.Equal(qb, wb) {
			continue
		}
		diff++
		x := c.x[b*tr.BlockSize : (b+1)*tr.BlockSize]
		_ = Dequantize(typ, yg, qb)
		_ = Dequantize(typ, yw, wb)
		c0 := (b % bpr) * tr.BlockSize
		eg, ew := blockErr(x, yg, im, c0), blockErr(x, yw, im, c0)
		sumGo += eg
		sumGG += ew
		if eg > 1.01*ew {
			t.Errorf("%s: block %d differs and has error %g > 1.01 × ggml's %g", label, b, eg, ew)
		}
	}
	if diff > 0 {
		t.Logf("%s: %d of %d blocks differ from ggml (err go %g, ggml %g)", label, diff, nblocks, sumGo, sumGG)
	}
	if diff > 0 && runtime.GOARCH == "amd64" {
		// Verified exact on amd64 (no FMA contraction there); the 1 % allowance below
		// is the README's policy for platforms where that is not established.
		t.Errorf("%s: %d blocks differ from ggml on amd64, where the port is exact", label, diff)
	}
	if allowed := max(1, nblocks/100); diff > allowed {
		t.Errorf("%s: %d of %d blocks differ (allowed %d)", label, diff, nblocks, allowed)
	}
	if sumGo > 1.001*sumGG {
		t.Errorf("%s: differing blocks' error %g > 1.001 × ggml's %g", label, sumGo, sumGG)
	}
}
