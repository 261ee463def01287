package modelsrc

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"

	"github.com/tq-project/tq/internal/safetensors"
	"github.com/tq-project/tq/quant/kernels"
)

// decodeFloats converts little-endian elements of a floating-point dtype to float32.
func decodeFloats(d safetensors.DType, b []byte, dst []float32) error {
	switch d {
	case safetensors.F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case safetensors.BF16:
		kernels.WidenBF16(dst, b) // bits << 16, eight at a time with AVX2
	case safetensors.F16:
		for i := range dst {
			dst[i] = safetensors.F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case safetensors.F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case safetensors.F8E4M3:
		for i := range dst {
			dst[i] = safetensors.F8E4M3ToFloat32(b[i])
		}
	case safetensors.F8E5M2:
		for i := range dst {
			dst[i] = safetensors.F8E5M2ToFloat32(b[i])
		}
	default:
		return fmt.Errorf("dtype %s is not a floating-point type", d)
	}
	return nil
}

// hfTensor is one checkpoint tensor seen as rows: rows = product of all but the last dimension,
// cols = the last dimension (a 1-D tensor is one row). FP8 weights carry their block scales.
type hfTensor struct {
	info       safetensors.TensorInfo
	rows, cols int64
	scale      *fp8Scale
	// sec reads the tensor's bytes with pread: the checkpoint is never mapped, so resident
	// memory does not grow with the files read.
	sec *io.SectionReader
}

// fp8Scale is a weight_scale_inv tensor: value = fp8(w) * scale[r/br][c/bc] (block scales, the
// converter's dequant_simple), or one scalar when the scale has a single element.
type fp8Scale struct {
	name       string
	vals       []float32
	rows, cols int64 // scale grid of one matrix
	br, bc     int64 // block size in weight rows / cols; 0 for a scalar scale
	// matRows is the number of weight rows per matrix: a 3-D weight [E, R, C] (fused experts)
	// has one [ceil(R/br), ceil(C/bc)] grid per matrix, so blocks never span two experts.
	matRows int64
}

func newHFTensor(st *safetensors.Model, info safetensors.TensorInfo) (*hfTensor, error) {
	sec, err := st.Section(info.Name)
	if err != nil {
		return nil, fmt.Errorf("tensor %s in %s: %w", info.Name, info.File, err)
	}
	t := &hfTensor{info: info, rows: 1, cols: 1, sec: sec}
	if len(info.Shape) == 0 {
		return t, nil
	}
	t.cols = info.Shape[len(info.Shape)-1]
	for _, d := range info.Shape[:len(info.Shape)-1] {
		t.rows *= d
	}
	if t.cols <= 0 || t.rows <= 0 {
		return nil, fmt.Errorf("tensor %s in %s has an empty shape %v", info.Name, info.File, info.Shape)
	}
	if !info.DType.IsFloat() {
		return nil, fmt.Errorf("tensor %s in %s has dtype %s; only floating-point weights can be converted", info.Name, info.File, info.DType)
	}
	return t, nil
}

// attachScale validates and loads the block scales of an FP8 weight. block is the
// quantization_config weight_block_size ([rows, cols]) or nil.
func (t *hfTensor) attachScale(st *safetensors.Model, sinfo safetensors.TensorInfo, block []int64) error {
	n := sinfo.NumElements()
	if !sinfo.DType.IsFloat() || n <= 0 || n > 1<<26 {
		return fmt.Errorf("scale tensor %s in %s: dtype %s shape %v is not a valid FP8 scale", sinfo.Name, sinfo.File, sinfo.DType, sinfo.Shape)
	}
	s := &fp8Scale{name: sinfo.Name, vals: make([]float32, n)}
	if err := st.ReadFloat32(sinfo.Name, s.vals); err != nil {
		return fmt.Errorf("scale tensor %s: %w", sinfo.Name, err)
	}
	for i, v := range s.vals {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("scale tensor %s: non-finite value %v at element %d", sinfo.Name, v, i)
		}
	}
	if n > 1 {
		if len(block) != 2 || block[0] <= 0 || block[1] <= 0 {
			return fmt.Errorf("FP8 weight %s has a block scale %s %v but config.json quantization_config has no valid weight_block_size", t.info.Name, sinfo.Name, sinfo.Shape)
		}
		ws := t.info.Shape
		if (len(ws) != 2 && len(ws) != 3) || len(sinfo.Shape) != len(ws) {
			return fmt.Errorf("FP8 weight %s %v / scale %s %v: block scales need 2-D tensors (or 3-D stacked experts with one grid per expert)", t.info.Name, ws, sinfo.Name, sinfo.Shape)
		}
		s.br, s.bc = block[0], block[1]
		nd := len(ws)
		s.matRows = ws[nd-2]
		s.rows, s.cols = ceilDiv(ws[nd-2], s.br), ceilDiv(ws[nd-1], s.bc)
		want := []int64{s.rows, s.cols}
		if nd == 3 {
			want = []int64{ws[0], s.rows, s.cols}
		}
		if !slices.Equal(sinfo.Shape, want) {
			return fmt.Errorf("FP8 scale %s has shape %v, want %v for weight %v with blocks %v", sinfo.Name, sinfo.Shape, want, ws, block)
		}
	}
	t.scale = s
	return nil
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

var bytePool = sync.Pool{}

// readRows converts rows [r0, r0+n) to float32 (FP8 scales applied) into dst[:n*cols].
func (t *hfTensor) readRows(r0, n int64, dst []float32) error {
	dst = dst[:n*t.cols]
	es := t.info.DType.Size()
	nb := n * t.cols * es
	var buf []byte
	if p, _ := bytePool.Get().(*[]byte); p != nil && int64(cap(*p)) >= nb {
		buf = (*p)[:nb]
	} else {
		buf = make([]byte, nb)
	}
	defer bytePool.Put(&buf)
	if _, err := t.sec.ReadAt(buf, r0*t.cols*es); err != nil {
		return fmt.Errorf("reading %s from %s: %w", t.info.Name, t.info.File, err)
	}
	if err := decodeFloats(t.info.DType, buf, dst); err != nil {
		return fmt.Errorf("tensor %s in %s: %w", t.info.Name, t.info.File, err)
	}
	if s := t.scale; s != nil {
		if s.br == 0 {
			k := s.vals[0]
			for i := range dst {
				dst[i] = dst[i] * k
			}
			return nil
		}
		for r := int64(0); r < n; r++ {
			row := dst[r*t.cols : (r+1)*t.cols]
			m, rl := (r0+r)/s.matRows, (r0+r)%s.matRows
			g := m*s.rows + rl/s.br
			srow := s.vals[g*s.cols : (g+1)*s.cols]
			for c0 := int64(0); c0 < t.cols; c0 += s.bc {
				k := srow[c0/s.bc]
				end := min(c0+s.bc, t.cols)
				for c := c0; c < end; c++ {
					row[c] = row[c] * k
				}
			}
		}
	}
	return nil
}

// part is a run of rows of one checkpoint tensor that makes up a GGUF tensor (several parts are
// concatenated along rows: stacked experts, halves of a fused gate_up projection).
type part struct {
	src    *hfTensor
	rowOff int64 // first source row
	rows   int64
	// perm, when set, reorders rows (llama q/k within heads, Qwen3.5 value heads): row r of
	// the part comes from source row rowOff+perm.src(r); for a one-row (1-D) tensor it
	// reorders elements.
	perm rowMap
}

// rowMap maps a destination index to the source index it is copied from.
type rowMap interface {
	src(r int64) int64
}

// headPerm is convert_hf_to_gguf's LlamaModel.permute: within each of nHead heads of hd rows,
// new row 2i+s comes from old row s*hd/2+i (rotate-half layout to adjacent pairs).
type headPerm struct {
	nHead, hd int64
}

func (p *headPerm) src(r int64) int64 {
	h, j := r/p.hd, r%p.hd
	i, s := j/2, j%2
	return h*p.hd + s*(p.hd/2) + i
}

// tensorPlan describes how one GGUF tensor is produced from the checkpoint.
type tensorPlan struct {
	name    string
	shape   []int64 // ggml order
	rows    int64   // product of shape[1:]
	cols    int64   // shape[0]
	parts   []part
	gen     []float32 // generated values (rope_freqs)
	sources []string  // checkpoint names (without FP8 scale names)
	// rowsPerMatrix is the number of rows of one 2-D matrix (rows/ne[2] for stacked experts).
	rowsPerMatrix int64
	// colPerm, when set, reorders the elements of every row: element c comes from source
	// column colPerm.src(c) (Qwen3.5 out_proj input columns).
	colPerm rowMap
	// elem, when set, transforms every value after reading (Qwen3.5: 1 + w for RMSNorm
	// weights, -exp(A_log)); elemF16 rounds its result to float16 (the converter computes in
	// the checkpoint's float16 when the source is F16).
	elem    func(float32) float32
	elemF16 bool
}

func (p *tensorPlan) elements() int64 { return p.rows * p.cols }

// read fills dst[:n*cols] with rows [r0, r0+n) of the GGUF tensor and rejects non-finite values.
func (p *tensorPlan) read(r0, n int64, dst []float32) error {
	dst = dst[:n*p.cols]
	if p.gen != nil {
		copy(dst, p.gen[r0*p.cols:(r0+n)*p.cols])
		return nil
	}
	r := r0
	end := r0 + n
	base := int64(0)
	for _, pt := range p.parts {
		if r >= end {
			break
		}
		if r >= base+pt.rows {
			base += pt.rows
			continue
		}
		lo := r - base
		cnt := min(pt.rows-lo, end-r)
		out := dst[(r-r0)*p.cols : (r-r0+cnt)*p.cols]
		switch {
		case pt.perm == nil:
			if err := pt.src.readRows(pt.rowOff+lo, cnt, out); err != nil {
				return err
			}
		case p.rows == 1:
			tmp := make([]float32, p.cols)
			if err := pt.src.readRows(pt.rowOff, 1, tmp); err != nil {
				return err
			}
			for i := range out {
				out[i] = tmp[pt.perm.src(int64(i))]
			}
		default:
			for i := int64(0); i < cnt; i++ {
				if err := pt.src.readRows(pt.rowOff+pt.perm.src(lo+i), 1, out[i*p.cols:(i+1)*p.cols]); err != nil {
					return err
				}
			}
		}
		r += cnt
		base += pt.rows
	}
	if r != end {
		return fmt.Errorf("tensor %s: internal error: rows %d..%d not covered", p.name, r0, end)
	}
	if p.colPerm != nil {
		tmp := make([]float32, p.cols)
		for i := int64(0); i < n; i++ {
			row := dst[i*p.cols : (i+1)*p.cols]
			copy(tmp, row)
			for c := range row {
				row[c] = tmp[p.colPerm.src(int64(c))]
			}
		}
	}
	if p.elem != nil {
		for i, v := range dst {
			v = p.elem(v)
			if p.elemF16 {
				v = safetensors.F16ToFloat32(safetensors.Float32ToF16(v))
			}
			dst[i] = v
		}
	}
	if i := kernels.FirstNonFinite(dst); i >= 0 {
		row := r0 + int64(i)/p.cols
		return &BadValueError{Tensor: p.name, Source: p.sourceOf(row), Row: row, Col: int64(i) % p.cols, Value: dst[i]}
	}
	return nil
}

func (p *tensorPlan) sourceOf(row int64) string {
	base := int64(0)
	for _, pt := range p.parts {
		if row < base+pt.rows {
			return pt.src.info.Name + " in " + pt.src.info.File
		}
		base += pt.rows
	}
	return ""
}

// BadValueError reports a NaN or infinite weight.
type BadValueError struct {
	Tensor string // GGUF tensor name
	Source string // checkpoint tensor and file
	Row    int64
	Col    int64
	Value  float32
}

func (e *BadValueError) Error() string {
	s := fmt.Sprintf("tensor %s: non-finite weight %v at row %d, column %d", e.Tensor, e.Value, e.Row, e.Col)
	if e.Source != "" {
		s += " (from " + e.Source + ")"
	}
	return s
}
