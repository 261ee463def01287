package convert

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/tq-project/tq/gguf"
)

// Plan is what a conversion (or requantization) will write: one entry per tensor, in file
// order, and totals. --dry-run prints it; --json emits it.
type Plan struct {
	Input     string         `json:"input"`
	Arch      string         `json:"arch"`
	Policy    string         `json:"policy"`    // "preset", "turboquant" or "budget"
	FileType  string         `json:"file_type"` // llama_ftype name written as general.file_type
	Tensors   []PlanTensor   `json:"tensors"`
	Elements  int64          `json:"elements"`
	Bytes     int64          `json:"bytes"`      // tensor data, unpadded
	BPW       float64        `json:"bpw"`        // Bytes*8/Elements
	InputBPW  float64        `json:"input_bpw"`  // of the source tensors
	TypeCount map[string]int `json:"type_count"` // tensors per type
	Types     []TypeMix      `json:"types"`      // the mix of types, most bytes first
	Fallbacks int            `json:"fallbacks"`
	// Importance is the number of tensors quantized with importance weights.
	Importance int `json:"importance_tensors"`
	// Rotation is the residual-stream rotation folded into the weights (rotate.MetaKey), "" for none.
	Rotation string   `json:"rotation,omitempty"`
	Warnings []string `json:"warnings,omitempty"`

	metadata gguf.Metadata
	jobs     []*job
	// hessPool shares factorised Hessians between the tensors that read one input.
	hessPool *hessianPool
	// onWarn is ReportOptions.Warn.
	onWarn func(msg string)
}

// warn records a warning in Warnings and passes it on as it arises.
func (p *Plan) warn(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	p.Warnings = append(p.Warnings, msg)
	if p.onWarn != nil {
		p.onWarn(msg)
	}
}

// PlanTensor is one tensor of a Plan.
type PlanTensor struct {
	Name       string   `json:"name"`
	Type       string   `json:"type"`
	Shape      []int64  `json:"shape"` // ggml order (ne0 first)
	Bytes      int64    `json:"bytes"`
	BPW        float64  `json:"bpw"`
	Rule       string   `json:"rule"`
	SourceType string   `json:"source_type"`
	Sources    []string `json:"sources,omitempty"`
	Importance bool     `json:"importance,omitempty"`
	// Hessian: quantized with the error-compensating search where the calibration has the
	// input's Gram matrix.
	Hessian bool `json:"hessian,omitempty"`
}

// TypeMix is one ggml type's share of a Plan: how many tensors, weights and bytes it holds.
type TypeMix struct {
	Type     string  `json:"type"`
	Tensors  int     `json:"tensors"`
	Elements int64   `json:"elements"`
	Bytes    int64   `json:"bytes"`
	BPW      float64 `json:"bpw"`
}

// Metadata returns the GGUF metadata the output will carry (tensor data excluded).
func (p *Plan) Metadata() gguf.Metadata { return p.metadata.Clone() }

func (p *Plan) finish() {
	p.TypeCount = map[string]int{}
	p.Elements, p.Bytes = 0, 0
	var inBytes float64
	for i := range p.Tensors {
		t := &p.Tensors[i]
		n := int64(1)
		for _, d := range t.Shape {
			n *= d
		}
		p.Elements += n
		p.Bytes += t.Bytes
		if n > 0 {
			t.BPW = float64(t.Bytes) * 8 / float64(n)
		}
		p.TypeCount[t.Type]++
		if t.Importance {
			p.Importance++
		}
		inBytes += float64(n) * srcBits(t.SourceType) / 8
	}
	if p.Elements > 0 {
		p.BPW = float64(p.Bytes) * 8 / float64(p.Elements)
		p.InputBPW = inBytes * 8 / float64(p.Elements)
	}
	p.Types = typeMix(p.Tensors)
}

// typeMix sums tensors, weights and bytes per type, most bytes first.
func typeMix(ts []PlanTensor) []TypeMix {
	idx := map[string]int{}
	var out []TypeMix
	for _, t := range ts {
		i, ok := idx[t.Type]
		if !ok {
			i = len(out)
			idx[t.Type] = i
			out = append(out, TypeMix{Type: t.Type})
		}
		n := int64(1)
		for _, d := range t.Shape {
			n *= d
		}
		out[i].Tensors++
		out[i].Elements += n
		out[i].Bytes += t.Bytes
	}
	for i := range out {
		if out[i].Elements > 0 {
			out[i].BPW = float64(out[i].Bytes) * 8 / float64(out[i].Elements)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Type < out[j].Type
	})
	return out
}

func srcBits(t string) float64 {
	switch strings.ToUpper(t) {
	case "F32", "I32", "U32":
		return 32
	case "F64":
		return 64
	case "F8_E4M3", "F8_E5M2", "U8", "I8":
		return 8
	case "F16", "BF16":
		return 16
	}
	if gt, err := gguf.ParseType(t); err == nil {
		if tr, ok := gt.Traits(); ok {
			return tr.BitsPerWeight()
		}
	}
	return 16
}

// WriteTable prints the plan as a table (name, type, shape, size, bpw, rule) and totals.
// Warnings are not repeated (they reach ReportOptions.Warn as they arise).
func (p *Plan) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENSOR\tTYPE\tSHAPE\tSIZE\tBPW\tFROM\tRULE")
	for _, t := range p.Tensors {
		dims := make([]string, len(t.Shape))
		for i, d := range t.Shape {
			dims[i] = fmt.Sprint(d)
		}
		fmt.Fprintf(tw, "%s\t%s\t[%s]\t%s\t%.2f\t%s\t%s\n", t.Name, t.Type, strings.Join(dims, " "), humanBytes(t.Bytes), t.BPW, t.SourceType, t.Rule)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	types := make([]string, 0, len(p.TypeCount))
	for k := range p.TypeCount {
		types = append(types, k)
	}
	sort.Strings(types)
	var tc []string
	for _, k := range types {
		tc = append(tc, fmt.Sprintf("%s:%d", k, p.TypeCount[k]))
	}
	_, err := fmt.Fprintf(w, "\n%d tensors, %d weights, %s (%.3f bpw, input %.2f bpw), file type %s; types %s; %d fallback(s), %d with importance\n",
		len(p.Tensors), p.Elements, humanBytes(p.Bytes), p.BPW, p.InputBPW, p.FileType, strings.Join(tc, " "), p.Fallbacks, p.Importance)
	return err
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
