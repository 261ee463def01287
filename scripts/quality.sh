#!/usr/bin/env bash
# Reproduces the table "Quality on trained models" of docs/results.md from the committed models
# of testdata/trained: for each model, the F16 conversion (the reference), tq calibrate's
# importance matrix, and four quantized files measured with llama.cpp against F16 on the
# held-out text (internal/qualitybench kld).
#
#   scripts/quality.sh [OUT_DIR]        (default build/quality)
#
# Environment: MODELS (default "qwen3 qwen3moe qwen35moe"), THREADS (default 2), WINDOWS
# (held-out windows of 256 tokens, default 20). A calibration already in OUT_DIR/MODEL/calib
# (imatrix.gguf present) is reused; delete it to recalibrate. Needs the llama.cpp reference
# (make refs) and node.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/quality}
MODELS=${MODELS:-"qwen3 qwen3moe qwen35moe"}
THREADS=${THREADS:-2}
WINDOWS=${WINDOWS:-20}
mkdir -p "$OUT"
go build -o "$OUT/tq" ./cmd/tq
go build -o "$OUT/qualitybench" ./internal/qualitybench
TQ=$OUT/tq
for m in $MODELS; do
  d=testdata/trained/$m
  o=$OUT/$m
  mkdir -p "$o"
  echo "== $m" >&2
  # reference: F16, as llama.cpp's convert_hf_to_gguf.py --outtype f16
  "$TQ" convert "$d" --outtype f16 -o "$o/f16.gguf" --no-manifest --threads "$THREADS" >&2
  # importance matrix and turboquant policy from tq's built-in calibration set
  if [ ! -f "$o/calib/imatrix.gguf" ]; then
    "$TQ" calibrate "$d" -o "$o/calib" --threads "$THREADS" >&2
  fi
  # llama.cpp's algorithm: Q4_K_M with the imatrix, tq's reference mode (llama-quantize's bytes)
  "$TQ" convert "$d" --outtype q4_k_m --imatrix "$o/calib/imatrix.gguf" -o "$o/q4km-llamacpp.gguf" --no-manifest --threads "$THREADS" >&2
  # the same from the F16 file, as llama-quantize is run in practice
  "$TQ" quantize "$o/f16.gguf" "$o/q4km-llamacpp-from-f16.gguf" q4_k_m --imatrix "$o/calib/imatrix.gguf" --threads "$THREADS" >&2
  # tq's improved search for the same preset and imatrix
  "$TQ" convert "$d" --outtype q4_k_m --imatrix "$o/calib/imatrix.gguf" --improved -o "$o/q4km-tq-improved.gguf" --no-manifest --threads "$THREADS" >&2
  # turboquant with the calibrated policy
  "$TQ" convert "$d" --use-turboquant --config "$o/calib/quantize_config.json" -o "$o/turboquant.gguf" --no-manifest --threads "$THREADS" >&2
  files=("$o/q4km-llamacpp.gguf" "$o/q4km-llamacpp-from-f16.gguf" "$o/q4km-tq-improved.gguf" "$o/turboquant.gguf")
  "$OUT/qualitybench" kld --f16 "$o/f16.gguf" --baseline q4km-llamacpp.gguf --windows "$WINDOWS" --threads "$THREADS" \
    --json-out "$o/kld.json" "${files[@]}" | tee "$o/kld.txt"
done
