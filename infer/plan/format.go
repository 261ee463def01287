package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// HumanBytes formats a byte count with binary units.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit || u == "TiB" {
			return fmt.Sprintf("%.2f %s", f, u)
		}
	}
	return ""
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprint(n)
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as text tables. perLayer lists every block (otherwise blocks
// with identical sizes are summarised).
func (r *Report) WriteTable(w io.Writer, perLayer bool) error {
	s, b, p := r.Shape, r.Memory, r.Placement
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "model\t%s (%s)\n", s.Arch, r.Source)
	shape := fmt.Sprintf("%d layers, hidden %d, heads %d/%d kv, head_dim %d, vocab %d", s.NLayer, s.NEmbd, s.NHead, s.NHeadKV, s.HeadDim, s.NVocab)
	if s.MoE() {
		shape += fmt.Sprintf(", %d experts (%d used) of %d", s.NExpert, s.NExpertUsed, s.NFFExp)
	} else {
		shape += fmt.Sprintf(", ffn %d", s.NFF)
	}
	fmt.Fprintf(tw, "shape\t%s\n", shape)
	if s.MoE() {
		fmt.Fprintf(tw, "parameters\t%s total, %s active per token\n", humanCount(b.Params), humanCount(b.ActiveParams))
	} else {
		fmt.Fprintf(tw, "parameters\t%s\n", humanCount(b.Params))
	}
	var types []string
	for _, t := range b.ByType {
		types = append(types, fmt.Sprintf("%s %s", t.Type, HumanBytes(t.Bytes)))
	}
	fmt.Fprintf(tw, "weights\t%s (%.2f bits/weight): %s\n", HumanBytes(b.Weights), b.BitsPerWeight, strings.Join(types, ", "))
	if b.MTPBytes > 0 {
		fmt.Fprintf(tw, "MTP blocks\t%s in the file, not loaded for plain inference\n", HumanBytes(b.MTPBytes))
	}
	if h := s.Hybrid; h != nil {
		fmt.Fprintf(tw, "hybrid\t%d of %d blocks Gated DeltaNet (%s recurrent state each), %d with KV cache\n",
			len(h.Linear)-h.nFull(), len(h.Linear), HumanBytes(h.RecurrentBytes()), h.nFull())
	}
	tw.Flush()

	fmt.Fprintln(w, "\nmemory by tensor group")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	groups := make([]string, 0, len(b.ByGroup))
	for g := range b.ByGroup {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return b.ByGroup[groups[i]] > b.ByGroup[groups[j]] })
	for _, g := range groups {
		fmt.Fprintf(tw, "  %s\t%s\t%.1f%%\t\n", g, HumanBytes(b.ByGroup[g]), 100*float64(b.ByGroup[g])/float64(max(b.Weights, 1)))
	}
	fmt.Fprintf(tw, "  KV cache (%d ctx, %s/%s)\t%s\t%s/token\t\n", r.Options.Ctx, r.Options.CacheTypeK, r.Options.CacheTypeV, HumanBytes(b.KV), HumanBytes(b.KVPerToken))
	fmt.Fprintf(tw, "  compute buffer (estimate)\t%s\t\t\n", HumanBytes(b.Compute))
	fmt.Fprintf(tw, "  total\t%s\t\t\n", HumanBytes(b.Total))
	tw.Flush()

	fmt.Fprintln(w, "\nmemory per layer")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	if s.MoE() {
		fmt.Fprintln(tw, "  layer\tattention\trouter\texperts\tnorms\tweights\tKV\t")
	} else {
		fmt.Fprintln(tw, "  layer\tattention\tffn\tnorms\tweights\tKV\t")
	}
	row := func(name string, l LayerBytes) {
		if s.MoE() {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, HumanBytes(l.Attention), HumanBytes(l.Router), HumanBytes(l.Experts), HumanBytes(l.Norms), HumanBytes(l.Total), HumanBytes(l.KV))
		} else {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t\n", name, HumanBytes(l.Attention), HumanBytes(l.FFN), HumanBytes(l.Norms), HumanBytes(l.Total), HumanBytes(l.KV))
		}
	}
	for i := 0; i < len(b.Layers); {
		j := i + 1
		for !perLayer && j < len(b.Layers) && sameLayer(b.Layers[i], b.Layers[j]) {
			j++
		}
		name := fmt.Sprint(i)
		if j-i > 1 {
			name = fmt.Sprintf("%d-%d", i, j-1)
		}
		row(name, b.Layers[i])
		i = j
	}
	tw.Flush()

	fmt.Fprintln(w, "\nplacement")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if r.Options.VRAM <= 0 {
		fmt.Fprintf(tw, "  device\tCPU only (no --vram budget given)\n")
	} else {
		fit := "fits"
		if !p.Fits {
			fit = "does not fit"
		}
		fmt.Fprintf(tw, "  VRAM budget\t%s (%s reserved), plan %s\n", HumanBytes(r.Options.VRAM), HumanBytes(r.Options.GPUReserve), fit)
		fmt.Fprintf(tw, "  GPU\t%d/%d layers, output %v, %s\n", p.GPULayers, s.NLayer, onOff(p.OutputOnGPU), HumanBytes(p.GPUBytes))
		if p.CPUMoE > 0 {
			fmt.Fprintf(tw, "  experts on CPU\tlayers 0-%d\n", p.CPUMoE-1)
		}
	}
	fmt.Fprintf(tw, "  CPU\t%s\n", HumanBytes(p.CPUBytes))
	writeDecode(tw, r)
	if p.PromptTokS > 0 {
		fmt.Fprintf(tw, "  predicted prompt\t%.0f tok/s\n", p.PromptTokS)
	}
	fmt.Fprintf(tw, "  llama.cpp\t%s\n", p.Args)
	if p.OverrideArg != "" {
		fmt.Fprintf(tw, "  (same as)\t-ot '%s'\n", p.OverrideArg)
	}
	return tw.Flush()
}

// writeDecode prints the predicted decode speed and what it assumes: the time of each term,
// the bandwidths, the context depth and the overheads.
func writeDecode(tw io.Writer, r *Report) {
	p, d, o := r.Placement, r.Placement.Decode, r.Options
	h := o.Overheads
	fmt.Fprintf(tw, "  predicted decode\t%.1f tok/s at depth %d (%.3f ms/token, %s-bound); %.1f tok/s with the %d-token context full\n",
		p.DecodeTokS, d.Depth, d.TotalMS, d.Bound, p.DecodeFullTokS, o.Ctx)
	fmt.Fprintf(tw, "    reads\t%.3f ms: active weights + %s of KV cache per token; CPU %.3f ms at %g GB/s, GPU %.3f ms at %g GB/s\n",
		d.CPUReadMS+d.GPUReadMS, HumanBytes(d.KVReadBytes), d.CPUReadMS, o.CPUBandwidth, d.GPUReadMS, o.GPUBandwidth)
	fmt.Fprintf(tw, "    CPU arithmetic\t%.3f ms: %.3g FLOP/token at %g GFLOP/s, overlapping the CPU reads (the longer counts)\n",
		d.CPUComputeMS, d.CPUFLOP, h.CPUGFLOPS)
	parts := []string{fmt.Sprintf("%g µs per step", h.TokenUS), fmt.Sprintf("sampling %d × %g ns", r.Shape.NVocab, h.SampleNS),
		fmt.Sprintf("%d CPU blocks × %g µs", d.CPUBlocks, h.CPUBlockUS)}
	if d.GPUUsed {
		parts = append(parts, fmt.Sprintf("%d GPU blocks × %g µs", d.GPUBlocks, h.GPUBlockUS), fmt.Sprintf("%g µs per GPU step", h.GPUTokenUS),
			fmt.Sprintf("%d CPU↔GPU hand-overs × %g µs", d.Switches, h.SwitchUS))
	}
	fmt.Fprintf(tw, "    overheads\t%.3f ms: %s\n", d.OverheadMS, strings.Join(parts, " + "))
}

func onOff(b bool) string {
	if b {
		return "on GPU"
	}
	return "on CPU"
}

func sameLayer(a, b LayerBytes) bool {
	a.Layer, b.Layer = 0, 0
	return a == b
}

// ParseSize parses a memory size: a number with an optional unit — K/M/G/T or KiB/MiB/GiB/TiB
// (powers of 1024), KB/MB/GB/TB (powers of 1000), B for bytes. A bare number means GiB.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("size %q: not a number with an optional unit (e.g. 24GiB, 8G, 512MiB)", s)
	}
	mult := map[string]float64{
		"": 1 << 30, "b": 1,
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q", s, unit)
	}
	b := v * mult
	if math.IsInf(b, 0) || b > 1<<60 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(b), nil
}
