#!/usr/bin/env bash
# Reproduces docs/results.md, "Scaling": for generated checkpoints of SIZES bytes of BF16
# weights (default "1G 2G 4G 8G": about 0.5, 1, 2 and 4 billion parameters), the wall time and
# peak RSS (GNU time's maximum resident set) of, with MODE=stats (the default):
#   tq convert MODEL --outtype q4_k_m          (straight from the checkpoint)
#   tq calibrate MODEL --max-length 128 --no-hessians --sensitivity-tokens 0 --memory-budget 2G
#                                              (32 built-in prompts: statistics and search)
# and with MODE=full, the default calibrated pipeline:
#   tq calibrate MODEL --max-length 512        (32 built-in prompts: statistics, search, Gram
#                                              matrices, sensitivity pass; also its output's size)
#   tq convert MODEL --use-turboquant --calibration CALIB
# with THREADS threads (default 2). GENFLAGS are extra tq-genmodel flags (default "-arch qwen3");
# a size "preset" passes no -target-bytes (the model GENFLAGS describe).
# Prints one line per size; each model is deleted after use.
#
#   scripts/scaling.sh [OUT_DIR]      (default build/scaling)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/scaling}
SIZES=${SIZES:-"1G 2G 4G 8G"}
THREADS=${THREADS:-2}
MODE=${MODE:-stats}
GENFLAGS=${GENFLAGS:-"-arch qwen3"}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
go build -o "$OUT/tq" ./cmd/tq
go build -o "$OUT/tq-genmodel" ./internal/fixtures/cmd/tq-genmodel
timed() { # timed LOGNAME CMD...: runs CMD under GNU time, leaves "seconds KiB" in $OUT/time.txt
  local log=$1
  shift
  if ! /usr/bin/time -f "%e %M" -o "$OUT/time.txt" "$@" >"$OUT/$log.log" 2>&1; then
    echo "failed: $* (see $OUT/$log.log)" >&2
    exit 1
  fi
}
case $MODE in
stats) printf "%-6s %12s %10s %14s %10s %14s\n" size parameters convert_s convert_RSS_MiB calib_s calib_RSS_MiB ;;
full) printf "%-6s %12s %10s %14s %12s %10s %14s\n" size parameters calib_s calib_RSS_MiB calib_out_MB convert_s convert_RSS_MiB ;;
*) echo "MODE must be stats or full" >&2; exit 2 ;;
esac
for s in $SIZES; do
  d=$OUT/model-$s
  rm -rf "$d" "$OUT/calib" "$OUT/out.gguf"
  tb=(-target-bytes "$s")
  [ "$s" = preset ] && tb=()
  # shellcheck disable=SC2086
  "$OUT/tq-genmodel" $GENFLAGS "${tb[@]}" -out "$d" >/dev/null
  params=$(( $(cat "$d"/*.safetensors | wc -c) / 2 ))
  if [ "$MODE" = stats ]; then
    timed convert "$OUT/tq" convert "$d" --outtype q4_k_m -o "$OUT/out.gguf" --no-manifest --threads "$THREADS"
    read -r cs crss <"$OUT/time.txt"
    timed calibrate "$OUT/tq" calibrate "$d" -o "$OUT/calib" --max-length 128 --no-hessians \
      --sensitivity-tokens 0 --memory-budget 2G --threads "$THREADS"
    read -r ks krss <"$OUT/time.txt"
    printf "%-6s %12d %10s %14d %10s %14d\n" "$s" "$params" "$cs" $((crss / 1024)) "$ks" $((krss / 1024))
  else
    timed calibrate "$OUT/tq" calibrate "$d" -o "$OUT/calib" --max-length 512 --threads "$THREADS"
    read -r ks krss <"$OUT/time.txt"
    kb=$(du -sk "$OUT/calib" | cut -f1)
    timed convert "$OUT/tq" convert "$d" --use-turboquant --calibration "$OUT/calib" -o "$OUT/out.gguf" \
      --no-manifest --threads "$THREADS"
    read -r cs crss <"$OUT/time.txt"
    printf "%-6s %12d %10s %14d %12d %10s %14d\n" "$s" "$params" "$ks" $((krss / 1024)) $((kb * 1024 / 1000000)) "$cs" $((crss / 1024))
  fi
  rm -rf "$d" "$OUT/calib" "$OUT/out.gguf"
done
