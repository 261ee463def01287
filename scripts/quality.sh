#!/usr/bin/env bash
# Reproduces docs/results.md, "Quality on trained models": for each committed model of
# testdata/trained, the F16 conversion (the reference), tq calibrate's output (imatrix, policy,
# Gram matrices), llama.cpp's algorithm and tq's files at the same sizes, measured with
# llama.cpp against F16 on the held-out text (internal/qualitybench kld).
#
#   scripts/quality.sh [OUT_DIR]        (default build/quality)
#
# Environment: MODELS (default "qwen3 qwen3moe qwen35moe"), THREADS (default 2), WINDOWS
# (held-out windows of 256 tokens, default 20), MAXLEN (calibration sequence length, default
# 256: the models' training context), BUDGETS (more presets compared with the budget at their
# size, default "q3_k_m q5_k_m"; empty for none), DATASET (calibration prompt files, space-separated, passed to
# tq calibrate --calibration-dataset; default: the built-in set). A calibration already in
# OUT_DIR/MODEL/calib (hessians/ present) is reused; delete it to recalibrate. HERR (default
# 1; 0 skips it) also calibrates on the held-out documents (OUT_DIR/MODEL/hocal, a measuring
# instrument only: no file is converted with it) and writes OUT_DIR/MODEL/herr.txt, every
# file's layer-wise error under the held-out text's Gram matrices (qualitybench herr;
# docs/results.md, "under the held-out text's own Gram matrices"): deterministic, and close to
# the KLD ratios except on the hybrid. Needs the llama.cpp reference (make refs) and node.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/quality}
MODELS=${MODELS:-"qwen3 qwen3moe qwen35moe"}
THREADS=${THREADS:-2}
WINDOWS=${WINDOWS:-20}
MAXLEN=${MAXLEN:-256}
BUDGETS=${BUDGETS-"q3_k_m q5_k_m"}
HERR=${HERR:-1}
ds=()
for f in ${DATASET:-}; do
  ds+=(--calibration-dataset "$f")
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
go build -o "$OUT/tq" ./cmd/tq
go build -o "$OUT/qualitybench" ./internal/qualitybench
TQ=$OUT/tq
if [ "$HERR" = 1 ]; then
  python3 testdata/trained/calib_set.py "$OUT/heldout.jsonl" --heldout >&2
fi
for m in $MODELS; do
  d=testdata/trained/$m
  o=$OUT/$m
  mkdir -p "$o"
  echo "== $m" >&2
  "$TQ" convert "$d" --outtype f16 -o "$o/f16.gguf" --no-manifest --threads "$THREADS" >&2
  if [ ! -f "$o/calib/hessians/index.json" ] || [ ! -f "$o/calib/sensitivity.json" ]; then
    "$TQ" calibrate "$d" -o "$o/calib" --max-length "$MAXLEN" --threads "$THREADS" "${ds[@]}" >&2
  fi
  # llama.cpp's algorithm (tq's reference mode reproduces llama-quantize's bytes) with the imatrix
  "$TQ" convert "$d" --outtype q4_k_m --imatrix "$o/calib/imatrix.gguf" -o "$o/llamacpp-q4km.gguf" --no-manifest --threads "$THREADS" >&2
  # tq with the whole calibration: the same preset, and a budget at the preset's size
  "$TQ" convert "$d" --outtype q4_k_m --calibration "$o/calib" -o "$o/tq-q4km.gguf" --no-manifest --threads "$THREADS" >&2
  bpw=$("$TQ" inspect "$o/llamacpp-q4km.gguf" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bits_per_weight"])')
  "$TQ" convert "$d" --target-bpw "$bpw" --calibration "$o/calib" -o "$o/tq-bpw.gguf" --no-manifest --threads "$THREADS" >&2
  # turboquant, and llama.cpp's algorithm with the identical type of every tensor
  "$TQ" convert "$d" --use-turboquant --calibration "$o/calib" -o "$o/tq-turbo.gguf" --no-manifest --threads "$THREADS" >&2
  mix=()
  while read -r name typ; do
    mix+=(--tensor-type "^${name//./\\.}\$=$typ")
  done < <("$TQ" inspect "$o/tq-turbo.gguf" --json | python3 -c '
import json,sys
for t in json.load(sys.stdin)["tensors"]:
    if t["type"] != "f32": print(t["name"], t["type"])')
  "$TQ" convert "$d" --outtype q8_0 --pure "${mix[@]}" --imatrix "$o/calib/imatrix.gguf" -o "$o/llamacpp-turbomix.gguf" --no-manifest --threads "$THREADS" >&2
  # more budgets: each preset of BUDGETS from llama.cpp's algorithm and from tq, and tq's
  # budget at that preset's size
  extra=()
  for pre in $BUDGETS; do
    "$TQ" convert "$d" --outtype "$pre" --imatrix "$o/calib/imatrix.gguf" -o "$o/llamacpp-$pre.gguf" --no-manifest --threads "$THREADS" >&2
    "$TQ" convert "$d" --outtype "$pre" --calibration "$o/calib" -o "$o/tq-$pre.gguf" --no-manifest --threads "$THREADS" >&2
    b=$("$TQ" inspect "$o/llamacpp-$pre.gguf" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bits_per_weight"])')
    "$TQ" convert "$d" --target-bpw "$b" --calibration "$o/calib" -o "$o/tq-bpw-$pre.gguf" --no-manifest --threads "$THREADS" >&2
    extra+=("$o/llamacpp-$pre.gguf" "$o/tq-$pre.gguf" "$o/tq-bpw-$pre.gguf")
  done
  "$OUT/qualitybench" kld --f16 "$o/f16.gguf" --baseline llamacpp-q4km.gguf --windows "$WINDOWS" --threads "$THREADS" \
    --json-out "$o/kld.json" "$o/llamacpp-q4km.gguf" "$o/tq-q4km.gguf" "$o/tq-bpw.gguf" \
    "$o/llamacpp-turbomix.gguf" "$o/tq-turbo.gguf" "${extra[@]}" | tee "$o/kld.txt"
  if [ "$HERR" = 1 ]; then
    if [ ! -f "$o/hocal/hessians/index.json" ]; then
      "$TQ" calibrate "$d" -o "$o/hocal" --max-length "$MAXLEN" --threads "$THREADS" \
        --calibration-dataset "$OUT/heldout.jsonl" --sensitivity-tokens 0 >&2
    fi
    "$OUT/qualitybench" herr --f16 "$o/f16.gguf" --calibration "$o/hocal" "$o/llamacpp-q4km.gguf" \
      "$o/tq-q4km.gguf" "$o/tq-bpw.gguf" "$o/llamacpp-turbomix.gguf" "$o/tq-turbo.gguf" "${extra[@]}" | tee "$o/herr.txt"
  fi
done
