// Package modelsrc reads models for every stage: a Hugging Face folder (config.json,
// *.safetensors, tokenizer files) of a supported architecture, seen as the tensors llama.cpp's
// converter would write, under their GGUF names, with their GGUF metadata.
//
// Architecture knowledge lives in one file per architecture (arch_*.go: tensor names, q/k
// permutation, expert stacking, value-head reorders, metadata keys, exactly as llama.cpp's
// convert_hf_to_gguf.py writes them). Tensors are read row range by row range with pread
// (BF16/F16/F32/FP8 with block scales decoded on the fly), so memory stays bounded whatever
// the model size. internal/convert writes GGUF files from an HFSource; calib and verify read
// its tensors to run the model in float32.
package modelsrc

import (
	"fmt"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/safetensors"
)

// TensorSource is a model's weights under their GGUF names, as float32, after every transform
// the converter applies (q/k permutation, expert stacking, FP8 dequantization): reading tensor T
// gives exactly the values an F32 GGUF converted from the same folder holds in T.
type TensorSource interface {
	// Metadata is the GGUF metadata an F32 conversion would carry (architecture keys,
	// tokenizer keys, general.file_type 0).
	Metadata() gguf.Metadata
	// Tensors lists the tensors in file order.
	Tensors() []TensorDesc
	// ReadFloat32 reads a whole tensor; len(dst) must equal its element count.
	ReadFloat32(name string, dst []float32) error
	// ReadRows reads rows [row0, row0+nrows) (a row has Shape[0] elements; rows of a 3-D
	// tensor run over Shape[1] then Shape[2]) into dst[:nrows*Shape[0]].
	ReadRows(name string, row0, nrows int64, dst []float32) error
	Close() error
}

// TensorDesc describes one tensor of a TensorSource.
type TensorDesc struct {
	Name string
	// Shape is in ggml order (ne0 = row length first), as in the GGUF file.
	Shape []int64
	// SourceType is the checkpoint dtype ("BF16", "F8_E4M3", ...).
	SourceType string
	// Sources are the checkpoint tensor names it was built from.
	Sources []string
}

// HFSource exposes a Hugging Face folder as GGUF-named float32 tensors (see TensorSource).
// It is safe for concurrent reads.
type HFSource struct {
	m      *hfModel
	md     gguf.Metadata
	descs  []TensorDesc
	byName map[string]*tensorPlan
}

var _ TensorSource = (*HFSource)(nil)

// OpenHF opens a Hugging Face model folder (config.json, safetensors, tokenizer) of a
// supported architecture and exposes it under GGUF names, so a runner can evaluate the HF
// weights directly (its forward pass equals the one over the F32 GGUF convert writes) and a
// converter can write them in any type.
func OpenHF(dir string) (*HFSource, error) {
	m, err := openHF(dir)
	if err != nil {
		return nil, err
	}
	md, err := hfMetadata(m)
	if err != nil {
		m.Close()
		return nil, err
	}
	md.Set("general.file_type", gguf.Uint32(uint32(policy.FileTypeAllF32)))
	md.Set("general.quantization_version", gguf.Uint32(2))
	s := &HFSource{m: m, md: md, byName: map[string]*tensorPlan{}}
	for _, p := range m.plans {
		src := "F32"
		if len(p.parts) > 0 {
			src = p.parts[0].src.info.DType.String()
		}
		s.descs = append(s.descs, TensorDesc{Name: p.name, Shape: append([]int64(nil), p.shape...), SourceType: src,
			Sources: append([]string(nil), p.sources...)})
		s.byName[p.name] = p
	}
	return s, nil
}

// Info is what a converter needs to know about an HF model beyond its tensors and metadata.
type Info struct {
	// Dir is the model folder as given to OpenHF.
	Dir string
	// Arch is general.architecture.
	Arch string
	// Blocks is block_count (decoder blocks plus multi-token-prediction blocks); Heads,
	// HeadsKV and Experts are the attention heads, KV heads and routed experts (0: dense).
	Blocks, Heads, HeadsKV, Experts int
	// SharedExperts: llama.cpp's architecture loads ffn_*_shexp tensors.
	SharedExperts bool
	// Skipped counts the vision/audio tensors the text model leaves out; SkippedExample names
	// one of them.
	Skipped        int
	SkippedExample string
	// SourceDType is the dtype of the first BF16 or F16 checkpoint tensor of two or more
	// dimensions (F16 when there is none): the precision `--outtype auto` keeps.
	SourceDType safetensors.DType
}

// Info describes the model (see Info).
func (s *HFSource) Info() Info {
	c := s.m.ctx
	return Info{Dir: s.m.dir, Arch: c.arch.name, Blocks: int(c.nBlocks()), Heads: int(c.nHead), HeadsKV: int(c.nHeadKV),
		Experts: int(c.nExpert), SharedExperts: c.arch.sharedExperts, Skipped: c.skipped, SkippedExample: c.skippedExample,
		SourceDType: s.m.srcDType}
}

// Metadata implements TensorSource.
func (s *HFSource) Metadata() gguf.Metadata { return s.md.Clone() }

// Tensors implements TensorSource.
func (s *HFSource) Tensors() []TensorDesc { return s.descs }

// Arch returns general.architecture.
func (s *HFSource) Arch() string { return s.m.ctx.arch.name }

// ReadFloat32 implements TensorSource.
func (s *HFSource) ReadFloat32(name string, dst []float32) error {
	p, ok := s.byName[name]
	if !ok {
		return fmt.Errorf("no tensor %q in %s", name, s.m.dir)
	}
	if int64(len(dst)) != p.elements() {
		return fmt.Errorf("tensor %s has %d elements, destination holds %d", name, p.elements(), len(dst))
	}
	return p.read(0, p.rows, dst)
}

// ReadRows implements TensorSource.
func (s *HFSource) ReadRows(name string, row0, nrows int64, dst []float32) error {
	p, ok := s.byName[name]
	if !ok {
		return fmt.Errorf("no tensor %q in %s", name, s.m.dir)
	}
	if row0 < 0 || nrows < 0 || row0+nrows > p.rows || row0+nrows < row0 {
		return fmt.Errorf("tensor %s: rows [%d, %d) out of range (%d rows)", name, row0, row0+nrows, p.rows)
	}
	if int64(len(dst)) < nrows*p.cols {
		return fmt.Errorf("tensor %s: destination holds %d values, %d rows need %d", name, len(dst), nrows, nrows*p.cols)
	}
	return p.read(row0, nrows, dst)
}

// Close releases the checkpoint files.
func (s *HFSource) Close() error { return s.m.Close() }

// hfModel is an opened HF folder with its tensor plans.
type hfModel struct {
	dir   string
	h     *hparams
	ctx   *archCtx
	st    *safetensors.Model
	plans []*tensorPlan
	// srcDType is the dominant checkpoint dtype of 2-D weights (for --outtype auto).
	srcDType safetensors.DType
}

func openHF(dir string) (*hfModel, error) {
	h, err := loadHParams(dir)
	if err != nil {
		return nil, err
	}
	a, _, err := findArch(h)
	if err != nil {
		return nil, err
	}
	c, err := newArchCtx(h, a)
	if err != nil {
		return nil, err
	}
	st, err := safetensors.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("model folder %s: %w", dir, err)
	}
	plans, err := buildPlans(c, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	m := &hfModel{dir: dir, h: h, ctx: c, st: st, plans: plans, srcDType: safetensors.F16}
	// first >=2-D BF16/F16 tensor decides --outtype auto (F32 tensors are skipped)
	for _, ti := range st.Tensors() {
		if len(ti.Shape) >= 2 && (ti.DType == safetensors.BF16 || ti.DType == safetensors.F16) {
			m.srcDType = ti.DType
			break
		}
	}
	return m, nil
}

func (m *hfModel) Close() error { return m.st.Close() }
