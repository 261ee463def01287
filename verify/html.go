package verify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/tq-project/tq/internal/safeout"
)

// Plot file names written by WriteHTML.
const (
	PlotQuantError  = "quant_error.png"
	PlotKLDHist     = "kld_hist.png"
	PlotSensitivity = "sensitivity.png"
	PlotRunningPPL  = "ppl_running.png"
)

// WriteHTML writes dir/index.html (the report with its plots), the PNG plots and
// dir/report.json. dir is created if needed. Plots whose data is missing are left out:
// quantization error by layer needs a reference, the KLD histogram a KLD run, sensitivity an
// imatrix.
func WriteHTML(dir string, r *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var plots []plotInfo
	add := func(name, title, caption string, p *plot.Plot, err error) error {
		if err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		if p == nil {
			return nil
		}
		wt, err := p.WriterTo(7*vg.Inch, 4*vg.Inch, "png")
		if err == nil {
			err = safeout.Write(filepath.Join(dir, name), safeout.Options{}, func(w io.Writer) error {
				_, err := wt.WriteTo(w)
				return err
			})
		}
		if err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		plots = append(plots, plotInfo{File: name, Title: title, Caption: caption})
		return nil
	}
	if r.Integrity != nil {
		p, err := quantErrorPlot(r.Integrity.Tensors)
		if err := add(PlotQuantError, "Quantization error by layer",
			"Relative RMS error sqrt(Σ(w−ŵ)²/Σw²) of each tensor's decoded rows against the reference weights (log scale), one series per tensor role.", p, err); err != nil {
			return err
		}
	}
	if r.KLD != nil {
		p, err := kldHistPlot(r.KLD.values)
		if err := add(PlotKLDHist, "KL divergence per position",
			"Histogram of log10 KL(reference ‖ model) over all scored positions (values below 1e-8 are shown at −8).", p, err); err != nil {
			return err
		}
	}
	p, err := sensitivityPlot(r.Layers)
	if err := add(PlotSensitivity, "Per-layer sensitivity",
		"Σ imatrix-weighted squared weight error / Σ imatrix-weighted squared weights per layer: the relative output error each layer's quantization causes, from the calibration statistics.", p, err); err != nil {
		return err
	}
	if r.Perplexity != nil && len(r.Perplexity.Running) > 1 {
		p, err := runningPlot(r.Perplexity.Running)
		if err := add(PlotRunningPPL, "Running perplexity", "Perplexity over the windows scored so far (llama-perplexity's [k] values).", p, err); err != nil {
			return err
		}
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := safeout.WriteFile(filepath.Join(dir, "report.json"), js, safeout.Options{}); err != nil {
		return err
	}
	var md bytes.Buffer
	r.WriteMarkdown(&md)
	var page bytes.Buffer
	if err := pageTmpl.Execute(&page, struct {
		R        *Report
		Plots    []plotInfo
		Markdown string
	}{r, plots, md.String()}); err != nil {
		return err
	}
	return safeout.WriteFile(filepath.Join(dir, "index.html"), page.Bytes(), safeout.Options{})
}

type plotInfo struct{ File, Title, Caption string }

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"deref": func(p *float64) float64 { return *p },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tq verify: {{.R.Verdict}}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}
.pass{color:#17803d}.fail{color:#b42318}.warn{color:#b54708}.skipped{color:#667085}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}
figure{margin:2em 0}img{max-width:100%}pre{background:#f6f6f6;padding:1em;overflow:auto;white-space:pre-wrap}
</style></head><body>
<h1>tq verify: <span class="{{.R.Verdict}}">{{.R.Verdict}}</span></h1>
<p>model <code>{{.R.Model}}</code>{{if .R.Reference}}, reference <code>{{.R.Reference}}</code> ({{.R.ReferenceKind}}){{end}}</p>
{{if .R.Failures}}<h2>Failures</h2><ul>{{range .R.Failures}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .R.Gates}}<h2>Gates</h2><table><tr><th>gate</th><th>metric</th><th>value</th><th>threshold</th><th>status</th></tr>
{{range .R.Gates}}<tr><td>{{.Name}}</td><td>{{.Metric}}</td><td>{{if .Value}}{{printf "%.6g" (deref .Value)}}{{else}}—{{end}}</td><td>{{.Op}} {{printf "%.6g" .Threshold}}</td><td class="{{.Status}}">{{.Status}}{{if .Detail}} ({{.Detail}}){{end}}</td></tr>{{end}}</table>{{end}}
{{if .R.Integrity}}<h2>Integrity</h2><table><tr><th>check</th><th>status</th><th>detail</th></tr>
{{range .R.Integrity.Checks}}<tr><td>{{.Name}}</td><td class="{{.Status}}">{{.Status}}</td><td>{{.Detail}}{{range .Problems}}<br>{{.}}{{end}}</td></tr>{{end}}</table>{{end}}
{{range .Plots}}<figure><h2>{{.Title}}</h2><img src="{{.File}}" alt="{{.Title}}"><figcaption>{{.Caption}}</figcaption></figure>{{end}}
<h2>Summary</h2><pre>{{.Markdown}}</pre>
<p>Full data: <a href="report.json">report.json</a></p>
</body></html>
`))

func quantErrorPlot(ts []TensorStat) (*plot.Plot, error) {
	byRole := map[string]plotter.XYs{}
	maxLayer := -1
	for _, t := range ts {
		if t.RelRMSE == nil || *t.RelRMSE <= 0 {
			continue
		}
		role := t.Role
		if role == "" {
			role = "other"
		}
		byRole[role] = append(byRole[role], plotter.XY{X: float64(t.Layer), Y: *t.RelRMSE})
		maxLayer = max(maxLayer, t.Layer)
	}
	if len(byRole) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Quantization error by layer"
	p.X.Label.Text = "layer (other: embeddings, output, final norm)"
	p.Y.Label.Text = "relative RMS error"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: 1}
	p.X.Min, p.X.Max = -1.5, float64(maxLayer)+0.5
	roles := slices.Sorted(mapsKeys(byRole))
	for i, role := range roles {
		// spread the roles of one layer side by side
		xy := make(plotter.XYs, len(byRole[role]))
		for j, v := range byRole[role] {
			xy[j] = plotter.XY{X: v.X + 0.5*(float64(i)+0.5)/float64(len(roles)) - 0.25, Y: v.Y}
		}
		s, err := plotter.NewScatter(xy)
		if err != nil {
			return nil, err
		}
		s.GlyphStyle.Color = plotutil.Color(i)
		s.GlyphStyle.Shape = plotutil.Shape(i)
		s.GlyphStyle.Radius = vg.Points(3)
		p.Add(s)
		p.Legend.Add(role, s)
	}
	p.Legend.Top, p.Legend.Left = false, false // bottom right: quantization errors sit high
	step := max(1, (maxLayer+2)/16)
	var ticks []plot.Tick
	for l := -1; l <= maxLayer; l += step {
		ticks = append(ticks, plot.Tick{Value: float64(l), Label: layerLabel(l)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.Add(plotter.NewGrid())
	return p, nil
}

func kldHistPlot(klds []float64) (*plot.Plot, error) {
	if len(klds) == 0 {
		return nil, nil
	}
	vals := make(plotter.Values, len(klds))
	for i, v := range klds {
		vals[i] = math.Log10(math.Max(v, 1e-8))
	}
	h, err := plotter.NewHist(vals, 40)
	if err != nil {
		return nil, err
	}
	h.FillColor = plotutil.Color(0)
	p := plot.New()
	p.Title.Text = "KL divergence per scored position"
	p.X.Label.Text = "log10 KLD (nats)"
	p.Y.Label.Text = "positions"
	p.Add(h)
	return p, nil
}

func sensitivityPlot(ls []LayerStat) (*plot.Plot, error) {
	var vals plotter.Values
	var names []string
	for _, l := range ls {
		if l.Sensitivity > 0 {
			vals = append(vals, l.Sensitivity)
			names = append(names, layerLabel(l.Layer))
		}
	}
	if len(vals) == 0 {
		return nil, nil
	}
	b, err := plotter.NewBarChart(vals, vg.Points(max(2, 300/float64(len(vals)))))
	if err != nil {
		return nil, err
	}
	b.Color = plotutil.Color(1)
	p := plot.New()
	p.Title.Text = "Per-layer sensitivity (imatrix-weighted relative output error)"
	p.Y.Label.Text = "relative output error"
	p.X.Label.Text = "layer"
	p.Add(b)
	if len(names) <= 48 {
		p.NominalX(names...)
	}
	return p, nil
}

func runningPlot(r []float64) (*plot.Plot, error) {
	xy := make(plotter.XYs, len(r))
	for i, v := range r {
		xy[i] = plotter.XY{X: float64(i + 1), Y: v}
	}
	l, s, err := plotter.NewLinePoints(xy)
	if err != nil {
		return nil, err
	}
	s.Shape = draw.CircleGlyph{}
	p := plot.New()
	p.Title.Text = "Running perplexity"
	p.X.Label.Text = "windows"
	p.Y.Label.Text = "PPL"
	p.Add(l, s)
	return p, nil
}
