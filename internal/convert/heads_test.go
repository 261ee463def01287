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
	"github.com/tq-project/tq/quant"
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

func (f *fakeHeadHessians) HeadGram(layer int, entry, tensor string, head int) ([]float64, int, int, bool, error) {
	f.calls.Add(1)
	seed := uint64(100 + head)
	if entry == "attn_gate.heads" {
		seed = uint64(200 + head)
	}
	return spdGram(f.n, seed), f.n, f.heads, true, nil
}

// With per-head matrices, a Gated DeltaNet attn_qkv's query and key rows are the bytes
// quant.QuantizeGPTQ gives with the plain matrix, each value head's rows those it gives with
// that head's matrix, and attn_gate's rows likewise per head.
func TestConvertUsesHeadHessians(t *testing.T) {
	o := fixtures.Preset("qwen35moe")
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
	heads := o.Hybrid.LinearValueHeads
	if cols == 0 || vd == 0 || heads < 2 {
		t.Fatalf("fixture: %d columns, %d value rows, %d heads", cols, vd, heads)
	}
	src := &fakeHeadHessians{n: int(cols), heads: heads, plain: spdGram(int(cols), 7)}
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
	ds := int(vd) / heads
	for _, name := range []string{"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight"} {
		ti, ok := m.Tensor(name)
		if !ok {
			t.Fatalf("%s missing", name)
		}
		got, err := m.TensorData(name)
		if err != nil {
			t.Fatal(err)
		}
		w := make([]float32, ti.NumElements())
		if err := hf.ReadFloat32(name, w); err != nil {
			t.Fatal(err)
		}
		rows := len(w) / int(cols)
		rb := len(got) / rows
		first, base := rows-int(vd), uint64(100)
		if strings.Contains(name, "attn_gate") {
			base = 200
		}
		enc := func(r0, r1 int, g []float64) []byte {
			h, err := quant.NewHessianFromGram(int(cols), g)
			if err != nil {
				t.Fatal(err)
			}
			b := make([]byte, (r1-r0)*rb)
			if err := quant.QuantizeGPTQ(ti.Type, b, w[r0*int(cols):r1*int(cols)], r1-r0, int(cols), h,
				&quant.GPTQOptions{Threads: 1, Refine: true, ActOrder: true}); err != nil {
				t.Fatal(err)
			}
			return b
		}
		if first > 0 && !bytes.Equal(got[:first*rb], enc(0, first, src.plain)) {
			t.Errorf("%s: the query and key rows differ from the plain matrix's encoding", name)
		}
		for h := 0; h < heads; h++ {
			r0 := first + h*ds
			if !bytes.Equal(got[r0*rb:(r0+ds)*rb], enc(r0, r0+ds, spdGram(int(cols), base+uint64(h)))) {
				t.Errorf("%s: value head %d's rows differ from its matrix's encoding", name, h)
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
