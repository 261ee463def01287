#!/usr/bin/env bash
# make demo: the whole tq pipeline, end to end, on small models the project makes itself.
#
# Part 1 — a generated qwen3-shaped HF folder (random heavy-tailed weights, byte-level BPE
#   tokenizer, chat template): generate, calibrate, convert (F16 and turboquant), inspect, run.
# Part 2 — the tiny tool-calling Qwen3 trained by testdata/verify/toolmodel/train.py (committed,
#   0.5 M parameters): calibrate, convert with turboquant, and gate the result with tq verify
#   (integrity, perplexity, KL divergence, template fidelity, tool-call validity) — then ask it
#   for a tool call with tq run.
set -euo pipefail
out=${1:-build/demo}
tq=${TQ:-bin/tq}
cd "$(dirname "$0")/.."
rm -rf "$out"
mkdir -p "$out"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. generate a small qwen3 model ($out/gen/hf)"
go run ./internal/fixtures/cmd/tq-genmodel -arch qwen3 -out "$out/gen/hf"

step "1. calibrate it (built-in 32 prompts, layer by layer: statistics and input Gram matrices)"
$tq calibrate "$out/gen/hf" -o "$out/gen/calib" --max-length 512

step "1. convert: F16 and turboquant (Q4_K q/k/v/gate/up, Q8_0 o_proj/down_proj, F16 lm_head; error-compensating search)"
$tq convert "$out/gen/hf" --outtype f16 -o "$out/gen/model-f16.gguf"
$tq convert "$out/gen/hf" --use-turboquant --calibration "$out/gen/calib" -o "$out/gen/model-tq.gguf"

step "1. inspect the turboquant file"
$tq inspect "$out/gen/model-tq.gguf" --no-tensors

step "1. run it (random weights: expect word salad, at full speed)"
$tq run "$out/gen/model-tq.gguf" -p "The history of printing" -n 24 --temp 0

tm=testdata/verify/toolmodel
step "2. calibrate the trained tool-calling model ($tm)"
$tq calibrate "$tm" -o "$out/tool/calib" --max-length 512

step "2. convert it with turboquant"
$tq convert "$tm" --use-turboquant --calibration "$out/tool/calib" -o "$out/tool/model-tq.gguf"

step "2. verify: the quality gate CI would run (exit 0 = pass)"
$tq verify "$out/tool/model-tq.gguf" --reference "$tm" --report "$out/tool/report"

step "2. run: a tool call from the quantized model"
$tq run "$out/tool/model-tq.gguf" --temp 0 -n 96 \
  --tools testdata/demo/tools-weather.json -p "What's the weather like in Lisbon right now?"

printf '\nDemo outputs are in %s; the verify report is %s/tool/report/index.html\n' "$out" "$out"
