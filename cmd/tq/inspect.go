package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/convert/policy"
	"github.com/tq-project/tq/internal/hf"
)

type inspectOptions struct {
	json       bool
	noTensors  bool
	maxArray   int
	filterName string
}

func init() {
	o := &inspectOptions{}
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Show the architecture, metadata, tensors and quantization of a GGUF or HF folder",
		Long: `inspect reads only headers (GGUF header, safetensors headers, config.json), so it is
fast on files of any size. PATH is a .gguf file (any shard of a split model opens all
shards) or a Hugging Face model folder.

Shown: architecture and key hyperparameters, metadata (long arrays summarised), every
tensor with shape, type and size, a per-type summary with total bytes and bits per weight,
and the turboquant / quantization provenance keys when present.`,
		Example: `  tq inspect model.gguf
  tq inspect model-00001-of-00003.gguf --json
  tq inspect ./Qwen3-0.6B --no-tensors
  tq inspect model.gguf --filter blk.0.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInspect(cmd.OutOrStdout(), args[0], o)
		},
	}
	cmd.Flags().BoolVar(&o.json, "json", false, "print a JSON document instead of tables")
	cmd.Flags().BoolVar(&o.noTensors, "no-tensors", false, "omit the per-tensor listing")
	cmd.Flags().IntVar(&o.maxArray, "max-array", 8, "show at most this many elements of a metadata array")
	cmd.Flags().StringVar(&o.filterName, "filter", "", "list only tensors whose name contains this string")
	rootCmd.AddCommand(cmd)
}

// inspectReport is the --json shape of `tq inspect`.
type inspectReport struct {
	Path         string            `json:"path"`
	Format       string            `json:"format"` // "gguf" or "hf"
	Architecture string            `json:"architecture"`
	Hyper        map[string]any    `json:"hyperparameters"`
	GGUFVersion  uint32            `json:"gguf_version,omitempty"`
	Shards       []string          `json:"shards,omitempty"`
	Metadata     []inspectKV       `json:"metadata,omitempty"`
	Provenance   map[string]string `json:"provenance,omitempty"`
	Tensors      []inspectTensor   `json:"tensors,omitempty"`
	Types        []inspectType     `json:"types"`
	TotalBytes   uint64            `json:"total_bytes"`
	TotalParams  uint64            `json:"total_params"`
	BitsPerW     float64           `json:"bits_per_weight"`
	ActiveParams int64             `json:"active_params,omitempty"`
	// FileType names general.file_type (a llama_ftype) when the GGUF has it; MostlyType is the
	// quantized type holding the most weights and MostlyPercent its share of all weights: the
	// types table gives the whole mix.
	FileType      string  `json:"file_type,omitempty"`
	MostlyType    string  `json:"mostly_type,omitempty"`
	MostlyPercent float64 `json:"mostly_percent_params,omitempty"`
}

type inspectKV struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value string `json:"value"`
}

type inspectTensor struct {
	Name  string  `json:"name"`
	Shape []int64 `json:"shape"` // GGUF: ggml order (ne0 first); HF: PyTorch order
	Type  string  `json:"type"`
	Bytes uint64  `json:"bytes"`
	Shard int     `json:"shard,omitempty"`
}

type inspectType struct {
	Type    string  `json:"type"`
	Tensors int     `json:"tensors"`
	Params  uint64  `json:"params"`
	Bytes   uint64  `json:"bytes"`
	BPW     float64 `json:"bits_per_weight"`
	Percent float64 `json:"percent_bytes"`
}

func runInspect(w io.Writer, path string, o *inspectOptions) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	var rep *inspectReport
	switch {
	case st.IsDir() && !hasWeights(path):
		rep, err = inspectConfig(filepath.Join(path, "config.json"))
	case st.IsDir():
		rep, err = inspectHF(path, o)
	case strings.HasSuffix(path, ".json"):
		rep, err = inspectConfig(path)
	default:
		rep, err = inspectGGUF(path, o)
	}
	if err != nil {
		return err
	}
	if o.json {
		return writeJSON(w, rep)
	}
	printInspect(w, rep, o)
	return nil
}

// provenancePrefixes are the metadata key prefixes shown as quantization provenance.
var provenancePrefixes = []string{"turboquant.", "quantize.", "general.file_type", "general.quantization_version"}

// hyperKeys are the architecture keys shown first ({arch}.<suffix>).
var hyperKeys = []string{"context_length", "embedding_length", "block_count", "feed_forward_length",
	"attention.head_count", "attention.head_count_kv", "attention.key_length", "attention.value_length",
	"attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.dimension_count", "rope.scaling.type",
	"rope.scaling.factor", "expert_count", "expert_used_count", "expert_feed_forward_length",
	"expert_shared_feed_forward_length", "vocab_size"}

func inspectGGUF(path string, o *inspectOptions) (*inspectReport, error) {
	m, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	md := m.Metadata()
	rep := &inspectReport{Path: path, Format: "gguf", GGUFVersion: m.Version(), Hyper: map[string]any{}}
	for _, f := range m.Files() {
		rep.Shards = append(rep.Shards, filepath.Base(f.Path))
	}
	rep.Architecture, _ = md.GetString("general.architecture")
	for _, k := range hyperKeys {
		if v, ok := md.Get(rep.Architecture + "." + k); ok {
			rep.Hyper[k] = valueJSON(v)
		}
	}
	rep.Provenance = map[string]string{}
	for _, kv := range md {
		rep.Metadata = append(rep.Metadata, inspectKV{Key: kv.Key, Type: valueTypeName(kv.Value), Value: summarizeValue(kv.Value, o.maxArray)})
		for _, p := range provenancePrefixes {
			if strings.HasPrefix(kv.Key, p) {
				rep.Provenance[kv.Key] = summarizeValue(kv.Value, o.maxArray)
			}
		}
	}
	byType := map[gguf.GGMLType]*inspectType{}
	for _, t := range m.Tensors() {
		shape := make([]int64, len(t.Dims))
		for i, d := range t.Dims {
			shape[i] = int64(d)
		}
		n := t.NumElements()
		rep.TotalBytes += t.Bytes
		rep.TotalParams += n
		it := byType[t.Type]
		if it == nil {
			it = &inspectType{Type: t.Type.String()}
			byType[t.Type] = it
		}
		it.Tensors++
		it.Params += n
		it.Bytes += t.Bytes
		if !o.noTensors && (o.filterName == "" || strings.Contains(t.Name, o.filterName)) {
			rep.Tensors = append(rep.Tensors, inspectTensor{Name: t.Name, Shape: shape, Type: t.Type.String(), Bytes: t.Bytes, Shard: t.Shard})
		}
	}
	rep.Types = typeSummary(byType, rep.TotalBytes)
	if rep.TotalParams > 0 {
		rep.BitsPerW = float64(rep.TotalBytes) * 8 / float64(rep.TotalParams)
	}
	if v, err := md.GetUint("general.file_type"); err == nil && v <= math.MaxUint32 {
		rep.FileType = policy.FileType(v).String()
	}
	var most uint64
	var mostType gguf.GGMLType
	for typ, it := range byType {
		tr, ok := typ.Traits()
		if ok && tr.Quantized && (it.Params > most || it.Params == most && typ < mostType) {
			most, mostType, rep.MostlyType = it.Params, typ, it.Type
		}
	}
	if most > 0 {
		rep.MostlyPercent = 100 * float64(most) / float64(rep.TotalParams)
	}
	return rep, nil
}

func typeSummary[K comparable](byType map[K]*inspectType, total uint64) []inspectType {
	out := make([]inspectType, 0, len(byType))
	for _, it := range byType {
		if it.Params > 0 {
			it.BPW = float64(it.Bytes) * 8 / float64(it.Params)
		}
		if total > 0 {
			it.Percent = 100 * float64(it.Bytes) / float64(total)
		}
		out = append(out, *it)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Bytes > out[j].Bytes })
	return out
}

// hasWeights reports whether a folder holds safetensors weights (or an index of them).
func hasWeights(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	_, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json"))
	return len(m) > 0 || err == nil
}

// inspectConfig describes a model from its config.json alone: hyperparameters and the
// parameter counts the configuration implies (no weights needed).
func inspectConfig(path string) (*inspectReport, error) {
	c, err := hf.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	rep := &inspectReport{Path: path, Format: "config", Hyper: map[string]any{}}
	describeConfig(rep, c)
	total, active, err := c.ParamCount()
	if err != nil {
		return nil, err
	}
	rep.TotalParams, rep.ActiveParams = uint64(total), active
	rep.Types = []inspectType{}
	return rep, nil
}

func inspectHF(dir string, o *inspectOptions) (*inspectReport, error) {
	f, err := hf.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rep := &inspectReport{Path: dir, Format: "hf", Hyper: map[string]any{}}
	describeConfig(rep, f.Config)
	if _, active, err := f.ParamCount(); err == nil {
		rep.ActiveParams = active
	}
	byType := map[string]*inspectType{}
	for _, t := range f.Weights.Tensors() {
		n := uint64(1)
		for _, d := range t.Shape {
			n *= uint64(d)
		}
		rep.TotalBytes += uint64(t.Size)
		rep.TotalParams += n
		key := t.DType.String()
		it := byType[key]
		if it == nil {
			it = &inspectType{Type: key}
			byType[key] = it
		}
		it.Tensors++
		it.Params += n
		it.Bytes += uint64(t.Size)
		if !o.noTensors && (o.filterName == "" || strings.Contains(t.Name, o.filterName)) {
			rep.Tensors = append(rep.Tensors, inspectTensor{Name: t.Name, Shape: append([]int64(nil), t.Shape...), Type: key, Bytes: uint64(t.Size)})
		}
	}
	rep.Types = typeSummary(byType, rep.TotalBytes)
	if rep.TotalParams > 0 {
		rep.BitsPerW = float64(rep.TotalBytes) * 8 / float64(rep.TotalParams)
	}
	return rep, nil
}

func describeConfig(rep *inspectReport, c *hf.Config) {
	arch, err := c.Arch()
	if err != nil {
		rep.Architecture = strings.Join(c.Architectures, ",") + " (unsupported: " + err.Error() + ")"
	} else {
		rep.Architecture = arch
	}
	h := rep.Hyper
	h["hidden_size"] = c.HiddenSize
	h["num_hidden_layers"] = c.NumHiddenLayers
	h["intermediate_size"] = c.IntermediateSize
	h["num_attention_heads"] = c.NumAttentionHeads
	h["num_key_value_heads"] = c.NumKeyValueHeads
	h["head_dim"] = c.HeadDim
	h["vocab_size"] = c.VocabSize
	h["rope_theta"] = c.RopeTheta
	h["rms_norm_eps"] = c.RMSNormEps
	h["max_position_embeddings"] = c.MaxPositionEmbeddings
	h["tie_word_embeddings"] = c.TieWordEmbeddings
	h["torch_dtype"] = c.TorchDType
	if c.NumExperts > 0 {
		h["num_experts"] = c.NumExperts
		h["num_experts_per_tok"] = c.NumExpertsPerTok
		h["moe_intermediate_size"] = c.MoeIntermediateSize
	}
}

func valueTypeName(v gguf.Value) string {
	if v.Type() == gguf.ValueArray {
		return fmt.Sprintf("array[%v]", v.ElemType())
	}
	return v.Type().String()
}

func valueJSON(v gguf.Value) any {
	if v.Type() == gguf.ValueFloat32 {
		x, _ := v.AsFloat()
		return float32(x)
	}
	if x, ok := v.AsUint(); ok {
		return x
	}
	if x, ok := v.AsInt(); ok {
		return x
	}
	if x, ok := v.AsFloat(); ok {
		return x
	}
	if x, ok := v.AsBool(); ok {
		return x
	}
	if x, ok := v.AsString(); ok {
		return x
	}
	return v.String()
}

// summarizeValue renders a metadata value, eliding long arrays and long strings.
func summarizeValue(v gguf.Value, maxArray int) string {
	if v.Type() == gguf.ValueArray {
		n := v.Len()
		parts := make([]string, 0, maxArray+1)
		for i := 0; i < n && i < maxArray; i++ {
			parts = append(parts, summarizeValue(v.Index(i), maxArray))
		}
		if n > maxArray {
			parts = append(parts, fmt.Sprintf("... (%d elements)", n))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	if s, ok := v.AsString(); ok {
		s = fmt.Sprintf("%q", s)
		if len(s) > 120 {
			s = s[:100] + fmt.Sprintf("...\" (%d bytes)", len(s))
		}
		return s
	}
	return v.String()
}

func printInspect(w io.Writer, r *inspectReport, o *inspectOptions) {
	fmt.Fprintf(w, "%s  (%s", r.Path, r.Format)
	if r.Format == "gguf" {
		fmt.Fprintf(w, " v%d, %d shard(s)", r.GGUFVersion, len(r.Shards))
	}
	fmt.Fprintf(w, ")\narchitecture: %s\n", r.Architecture)
	keys := make([]string, 0, len(r.Hyper))
	for k := range r.Hyper {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "  %-36s %v\n", k, r.Hyper[k])
	}
	fmt.Fprintf(w, "parameters: %s", humanCount(r.TotalParams))
	if r.ActiveParams > 0 && uint64(r.ActiveParams) != r.TotalParams {
		fmt.Fprintf(w, " (%s active per token)", humanCount(uint64(r.ActiveParams)))
	}
	if r.Format == "config" {
		fmt.Fprintf(w, "\n(no weights: counts implied by config.json; `tq plan %s --type TYPE` gives sizes per type)\n", r.Path)
		return
	}
	fmt.Fprintf(w, "   size: %s   %.3f bits/weight\n", humanBytes(r.TotalBytes), r.BitsPerW)
	if r.Format == "gguf" {
		ft := r.FileType
		if ft == "" {
			ft = "none (no general.file_type)"
		}
		fmt.Fprintf(w, "file type: %s", ft)
		if r.MostlyType != "" {
			fmt.Fprintf(w, "; most weights are %s (%.1f%%), the full mix is under types", r.MostlyType, r.MostlyPercent)
		}
		fmt.Fprintln(w)
	}
	if len(r.Provenance) > 0 {
		fmt.Fprintln(w, "\nquantization provenance:")
		pk := make([]string, 0, len(r.Provenance))
		for k := range r.Provenance {
			pk = append(pk, k)
		}
		sort.Strings(pk)
		for _, k := range pk {
			fmt.Fprintf(w, "  %-40s %s\n", k, r.Provenance[k])
		}
	}
	if len(r.Metadata) > 0 {
		fmt.Fprintf(w, "\nmetadata (%d keys):\n", len(r.Metadata))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, kv := range r.Metadata {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", kv.Key, kv.Type, kv.Value)
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\ntypes:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  type\ttensors\tparams\tbytes\tbits/weight\t%% of size\t\n")
	for _, t := range r.Types {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%.3f\t%.1f\t\n", t.Type, t.Tensors, humanCount(t.Params), humanBytes(t.Bytes), t.BPW, t.Percent)
	}
	tw.Flush()
	if !o.noTensors {
		fmt.Fprintf(w, "\ntensors (%d listed):\n", len(r.Tensors))
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, t := range r.Tensors {
			fmt.Fprintf(tw, "  %s\t%v\t%s\t%s\n", t.Name, t.Shape, t.Type, humanBytes(t.Bytes))
		}
		tw.Flush()
	}
}

func humanBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

func humanCount(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprintf("%d", n)
}
