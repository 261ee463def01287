package infer

import (
	"errors"
	"math"
	"testing"

	"github.com/tq-project/tq/gguf"
	"github.com/tq-project/tq/infer/cuda"
	"github.com/tq-project/tq/infer/internal/testmodel"
	"github.com/tq-project/tq/internal/convert"
)

// TestGPUEmulatedGraphs runs the same script on the emulator with recorded graphs
// (Options.GPUGraphs) and kernel by kernel: a 12-token prompt, 6 single-token steps, a Reset, a 4-token prompt
// and 3 more steps (the graph replayed at earlier positions), then a Reset and a one-token
// prompt (position 0, eager). Every logit must be bit-identical, since the graph runs
// the same kernels in the same order. The steps after position 0 must replay one graph where
// every device block keeps its work on the device; with experts on the host the recording fails
// once with ErrCapturing and the session runs eagerly.
func TestGPUEmulatedGraphs(t *testing.T) {
	dev := emulatorBackend(t)
	spec := func(arch string, typ gguf.GGMLType) Source {
		s := testmodel.Default(arch)
		s.Types = typesAll(typ)
		return buildSource(t, s)
	}
	hybrid := func(arch string) Source {
		g, err := OpenGGUF(convertFixture(t, hybridFixture(t, arch), convert.Options{Types: convert.TypeOptions{TurboQuant: true}}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close() })
		return g
	}
	cases := []struct {
		name       string
		src        Source
		gpuLayers  int
		cpuMoE     int
		cache      string
		wantGraphs bool
	}{
		{"qwen3-q4_K-all", spec("qwen3", gguf.TypeQ4_K), 3, 0, "", true},
		{"llama-q8_0-split-q8_0-cache", spec("llama", gguf.TypeQ8_0), 1, 0, "q8_0", true},
		{"qwen3moe-q8_0-all", spec("qwen3moe", gguf.TypeQ8_0), 3, 0, "", true},
		{"qwen3moe-q4_K-cpu-experts", spec("qwen3moe", gguf.TypeQ4_K), 3, 2, "", false},
		{"qwen35moe-turbo-all", hybrid("qwen35moe"), 5, 0, "", true},
		{"qwen35-turbo-last3", hybrid("qwen35"), 3, 0, "q8_0", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prompt, steps := randTokens(7, 12, 512), randTokens(8, 9, 512) // every fixture has ≥ 512 tokens
			run := func(eager bool) ([][]float32, *gpuSession) {
				s := loadSession(t, tc.src, Options{Threads: 2, CtxSize: 64, CacheTypeK: tc.cache, CacheTypeV: tc.cache,
					Backend: dev, GPULayers: tc.gpuLayers, CPUMoE: tc.cpuMoE, FullPrecision: true, GPUGraphs: !eager})
				var out [][]float32
				eval := func(toks []int32) {
					lg, err := s.Eval(toks, LogitsLast)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, lg[0])
				}
				eval(prompt)
				for _, tok := range steps[:6] {
					eval([]int32{tok})
				}
				s.Reset() // (hybrid states cannot be truncated)
				eval(prompt[:4])
				for _, tok := range steps[6:] {
					eval([]int32{tok})
				}
				s.Reset()
				eval(steps[:1])
				return out, s.gpu
			}
			eagerOut, eds := run(true)
			graphOut, gds := run(false)
			for i := range eagerOut {
				for j := range eagerOut[i] {
					if math.Float32bits(eagerOut[i][j]) != math.Float32bits(graphOut[i][j]) {
						t.Fatalf("evaluation %d, logit %d: graph %v, eager %v", i, j, graphOut[i][j], eagerOut[i][j])
					}
				}
			}
			if eds.graph != nil || eds.graphLaunches != 0 {
				t.Fatalf("without GPUGraphs a graph was recorded (%d launches)", eds.graphLaunches)
			}
			if tc.wantGraphs {
				if gds.graph == nil || gds.graphLaunches != 9 || gds.graphErr != nil {
					t.Fatalf("graph %v, %d launches (want 9), error %v", gds.graph != nil, gds.graphLaunches, gds.graphErr)
				}
				t.Logf("%s: one graph of %d launches replayed at 9 steps", tc.name, gds.graph.Nodes())
			} else if gds.graph != nil || gds.graphLaunches != 0 || !errors.Is(gds.graphErr, cuda.ErrCapturing) {
				t.Fatalf("host experts: graph %v, %d launches, error %v (want ErrCapturing)", gds.graph != nil, gds.graphLaunches, gds.graphErr)
			}
		})
	}
}
