#!/usr/bin/env bash
# Reproduces docs/results.md, "Scaling": for generated qwen3 checkpoints of SIZES bytes of BF16
# weights (default "1G 2G 4G 8G": about 0.5, 1, 2 and 4 billion parameters), the wall time and
# peak RSS (GNU time's maximum resident set) of
#   tq convert MODEL --outtype q4_k_m          (straight from the checkpoint)
#   tq calibrate MODEL --max-length 128 --no-hessians --sensitivity-tokens 0 --memory-budget 2G
#                                              (32 built-in prompts: statistics and search)
# with THREADS threads (default 2). Prints one line per size; each model is deleted after use.
#
#   scripts/scaling.sh [OUT_DIR]      (default build/scaling)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/scaling}
SIZES=${SIZES:-"1G 2G 4G 8G"}
THREADS=${THREADS:-2}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
go build -o "$OUT/tq" ./cmd/tq
go build -o "$OUT/tq-genmodel" ./internal/fixtures/cmd/tq-genmodel
printf "%-6s %12s %10s %14s %10s %14s\n" size parameters convert_s convert_RSS_MiB calib_s calib_RSS_MiB
for s in $SIZES; do
  d=$OUT/model-$s
  rm -rf "$d" "$OUT/calib" "$OUT/q4km.gguf"
  "$OUT/tq-genmodel" -arch qwen3 -target-bytes "$s" -out "$d" >/dev/null
  params=$(( $(cat "$d"/*.safetensors | wc -c) / 2 ))
  /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$OUT/tq" convert "$d" --outtype q4_k_m -o "$OUT/q4km.gguf" \
    --no-manifest --threads "$THREADS" >/dev/null 2>&1
  read -r cs crss <"$OUT/time.txt"
  /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$OUT/tq" calibrate "$d" -o "$OUT/calib" --max-length 128 \
    --no-hessians --sensitivity-tokens 0 --memory-budget 2G --threads "$THREADS" >/dev/null 2>&1
  read -r ks krss <"$OUT/time.txt"
  printf "%-6s %12d %10s %14d %10s %14d\n" "$s" "$params" "$cs" $((crss / 1024)) "$ks" $((krss / 1024))
  rm -rf "$d" "$OUT/calib" "$OUT/q4km.gguf"
done
