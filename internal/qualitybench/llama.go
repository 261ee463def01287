package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// llamaLogProbs runs llama.cpp (node-llama-cpp through testdata/llamacpp/llama.mjs, op
// "logprobs") on every window and returns, per window, len(window) rows of vocab natural
// log-probabilities (-Inf where llama.cpp's float32 probability is 0).
// kvType "" keeps node-llama-cpp's default KV cache type (F16, as llama.cpp's tools).
func llamaLogProbs(bridgeDir, model string, wins [][]int32, vocab, threads int, kvType string, timeout time.Duration) ([][][]float64, error) {
	// One slot more than the longest window: with the context exactly full, node-llama-cpp
	// makes room before the last token (its context shift) and that position's distribution
	// no longer follows the whole window.
	ctxLen := 0
	for _, w := range wins {
		ctxLen = max(ctxLen, len(w)+1)
	}
	// the bridge runs in bridgeDir: a relative model path must not be resolved there
	if abs, err := filepath.Abs(model); err == nil {
		model = abs
	}
	req := map[string]any{"op": "logprobs", "model": model, "sequences": wins, "vocab": vocab,
		"threads": threads, "ctx": ctxLen}
	if kvType != "" {
		req["kvType"] = kvType
	}
	in, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(bridgeDir, "llama.mjs"))
	cmd.Dir = bridgeDir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("llama.cpp on %s: no answer within %v", model, timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("llama.cpp on %s: %v\n%s", model, err, stderr.String())
	}
	var resp struct {
		Vocab     int      `json:"vocab"`
		Sequences []string `json:"sequences"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("llama.cpp on %s: reply: %w", model, err)
	}
	if resp.Vocab != vocab || len(resp.Sequences) != len(wins) {
		return nil, fmt.Errorf("llama.cpp on %s: %d sequences of vocabulary %d, want %d of %d", model, len(resp.Sequences), resp.Vocab, len(wins), vocab)
	}
	res := make([][][]float64, len(wins))
	for s, b64 := range resp.Sequences {
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("llama.cpp on %s: sequence %d: %w", model, s, err)
		}
		if len(raw) != len(wins[s])*vocab*8 {
			return nil, fmt.Errorf("llama.cpp on %s: sequence %d: %d bytes, want %d", model, s, len(raw), len(wins[s])*vocab*8)
		}
		rows := make([][]float64, len(wins[s]))
		for i := range rows {
			row := make([]float64, vocab)
			for v := range row {
				row[v] = math.Float64frombits(binary.LittleEndian.Uint64(raw[(i*vocab+v)*8:]))
			}
			rows[i] = row
		}
		res[s] = rows
	}
	return res, nil
}

// findBridge returns testdata/llamacpp of the repository holding the working directory, or
// an error naming what is missing.
func findBridge() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above the working directory: run from the tq repository or pass --llama-dir")
		}
		dir = parent
	}
	return checkBridge(filepath.Join(dir, "testdata", "llamacpp"))
}

func checkBridge(d string) (string, error) {
	if _, err := os.Stat(filepath.Join(d, "node_modules", "node-llama-cpp")); err != nil {
		return "", fmt.Errorf("llama.cpp reference missing: %s/node_modules/node-llama-cpp (run make refs)", d)
	}
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("node not found in PATH (the llama.cpp reference runs under node)")
	}
	return d, nil
}
