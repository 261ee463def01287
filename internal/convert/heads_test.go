package convert

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/internal/fixtures"
	"github.com/tq-project/tq/internal/modelsrc"
)

// fakeHeadHessians serves one plain Gram matrix to every Gated DeltaNet projection and a
// different one per value head (seed 100+head for attn_qkv, 200+head for attn_gate).
type fakeHeadHessians struct {
	n, heads int
	plain    []float64
	calls    atomic.Int64
}

func (f *fakeHeadHessians) Gram(tensor string, m int) ([]float64, int, bool, error) {
	if strings.Contains(tensor, "attn_qkv.") || strings.Contains(tensor, "attn_gate.") {
		return f.plain, f.n, true, nil
	}
	return nil, 0, false, nil
}

func (f *fakeHeadHessians) HeadGroups(int, string) int { return f.heads }

func (f *fakeHeadHessians) HeadGram(layer int, entry, tensor string, head int) ([]float64, int, bool, error) {
	f.calls.Add(1)
	seed := uint64(100 + head)
	if entry == "attn_gate.heads" {
		seed = uint64(200 + head)
	}
	return spdGram(f.n, seed), f.n, true, nil
}

// With per-head matrices, a Gated DeltaNet attn_qkv's query and key rows are the bytes
// quant.QuantizeGPTQ gives with the plain matrix, each head group's rows those it gives with
// that group's matrix, and attn_gate's rows likewise per group: one matrix per head (4 value
// heads), and 4 groups of 3 heads over 12 value heads, whose groups do not start at multiples
// of the query and key rows' count (work items must split there too).
func TestConvertUsesHeadHessians(t *testing.T) {
	for _, c := range []struct{ heads, groups int }{{4, 4}, {12, 4}} {
		o := fixtures.Preset("qwen35moe")
		o.Hybrid.LinearValueHeads = c.heads
		dir := genModel(t, o)
		hf, err := modelsrc.OpenHF(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer hf.Close()
		var cols, vd int64
		for _, d := range hf.Tensors() {
			switch d.Name {
			case "blk.0.attn_qkv.weight":
				cols = d.Shape[0]
			case "blk.0.attn_gate.weight":
				vd = d.Shape[1]
			}
		}
		if cols == 0 || vd == 0 || vd%int64(c.groups) != 0 {
			t.Fatalf("fixture: %d columns, %d value rows for %d groups", cols, vd, c.groups)
		}
		src := &fakeHeadHessians{n: int(cols), heads: c.groups, plain: spdGram(int(cols), 7)}
		out := filepath.Join(t.TempDir(), "h.gguf")
		if _, err := Convert(context.Background(), dir, out, Options{Types: TypeOptions{TurboQuant: true, Hessians: src}}); err != nil {
			t.Fatal(err)
		}
		if src.calls.Load() == 0 {
			t.Fatal("no per-head matrix was asked for")
		}
		m, err := gguf.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		ds := int(vd) / c.groups
		for _, name := range []string{"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight"} {
			got, typ, w := fileAndSource(t, m, hf, name)
			n := int(cols)
			rows := len(w) / n
			rb := len(got) / rows
			first, base := rows-int(vd), uint64(100)
			if strings.Contains(name, "attn_gate") {
				base = 200
			}
			if first > 0 && !bytes.Equal(got[:first*rb], gptqBytes(t, typ, w[:first*n], n, src.plain, first*rb)) {
				t.Errorf("%d heads: %s: the query and key rows differ from the plain matrix's encoding", c.heads, name)
			}
			for h := 0; h < c.groups; h++ {
				r0 := first + h*ds
				want := gptqBytes(t, typ, w[r0*n:(r0+ds)*n], n, spdGram(n, base+uint64(h)), ds*rb)
				if !bytes.Equal(got[r0*rb:(r0+ds)*rb], want) {
					t.Errorf("%d heads: %s: head group %d's rows differ from its matrix's encoding", c.heads, name, h)
				}
			}
		}
	}
}

// With --rotate the per-head matrices are rotated like the plain ones: the conversion asks for
// them and succeeds.
func TestConvertRotatedHeadHessians(t *testing.T) {
	o := fixtures.Preset("qwen35moe")
	o.Hybrid.MTPLayers = 0 // the rotation refuses multi-token-prediction layers
	dir := genModel(t, o)
	hf, err := modelsrc.OpenHF(dir)
	if err != nil {
		t.Fatal(err)
	}
	var cols int64
	for _, d := range hf.Tensors() {
		if d.Name == "blk.0.attn_qkv.weight" {
			cols = d.Shape[0]
		}
	}
	hf.Close()
	src := &fakeHeadHessians{n: int(cols), heads: o.Hybrid.LinearValueHeads, plain: spdGram(int(cols), 7)}
	out := filepath.Join(t.TempDir(), "r.gguf")
	_, err = Convert(context.Background(), dir, out, Options{Types: TypeOptions{TurboQuant: true, Hessians: src, Rotate: true}})
	if err != nil {
		t.Fatal(err)
	}
	if src.calls.Load() == 0 {
		t.Fatal("no per-head matrix was asked for")
	}
}
