#!/usr/bin/env bash
# gpu-check.sh: the CUDA device checks of package infer/cuda in one script (a few minutes on an
# H200; hard limits: 180 s of tests, 90 s of benchmarks).
#
#   scripts/gpu-check.sh build   build build/cuda.test (the infer/cuda test binary) and bin/tq,
#                                both with CGO_ENABLED=0; needs Go, no CUDA toolkit
#   scripts/gpu-check.sh run     run the prebuilt build/cuda.test on the GPU machine; needs only
#                                the NVIDIA driver (libcuda.so.1), not Go
#   scripts/gpu-check.sh         build (when go is on PATH) then run
#
# run executes, with TQ_GPU=1: `cuda.test -test.run GPU -test.v` (every kernel against the CPU
# reference at production sizes) and `cuda.test -test.run '^$' -test.bench GPU -test.benchtime 20x`
# (mat-vec GB/s per weight type, and as % of the device copy bandwidth measured in the same run).
# Logs go to $OUT/gpu-check/ when OUT is set, else build/gpu-check/: env.txt, tests.log,
# bench.log, summary.txt. Exit status 0 only if the build (when done) and every test passed.
#
# Knobs: GPU_CHECK_TEST_FLAGS (extra test flags, e.g. -test.short for small sizes),
# TQ_GPU_BENCH_MIB (benchmark weight size, default 256), TQ_CUDA_LIB (driver library path).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-all}
bin=build/cuda.test
outdir=${OUT:-$root/build}/gpu-check

build() {
	mkdir -p build bin
	echo "gpu-check: building $bin"
	CGO_ENABLED=0 go test -c -o "$bin" ./infer/cuda/ || return 1
	echo "gpu-check: building bin/tq"
	if ! CGO_ENABLED=0 go build -trimpath -o bin/tq ./cmd/tq; then
		echo "gpu-check: WARNING: bin/tq did not build (the device checks do not need it)" >&2
	fi
}

run() {
	if [ ! -x "$bin" ]; then
		echo "gpu-check: $bin is missing: run 'scripts/gpu-check.sh build' where Go is installed and carry $bin" >&2
		return 2
	fi
	mkdir -p "$outdir"
	{
		date -u
		uname -a
		command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv
		[ -x bin/tq ] && bin/tq --help >/dev/null 2>&1 && echo "bin/tq starts"
	} >"$outdir/env.txt" 2>&1
	cat "$outdir/env.txt"

	# The test binary runs in the package directory, as `go test` would run it.
	(cd infer/cuda && TQ_GPU=1 timeout 180 "$root/$bin" -test.run GPU -test.v -test.timeout 175s ${GPU_CHECK_TEST_FLAGS:-}) 2>&1 | tee "$outdir/tests.log"
	local test_rc=${PIPESTATUS[0]}
	(cd infer/cuda && TQ_GPU=1 timeout 90 "$root/$bin" -test.run '^$' -test.bench GPU -test.benchtime 20x -test.timeout 85s) 2>&1 | tee "$outdir/bench.log"
	local bench_rc=${PIPESTATUS[0]}

	{
		echo "tests: exit $test_rc; $(grep -c -- '--- PASS' "$outdir/tests.log") passed, $(grep -c -- '--- FAIL' "$outdir/tests.log") failed, $(grep -c -- '--- SKIP' "$outdir/tests.log") skipped"
		grep -E -- '--- FAIL' "$outdir/tests.log"
		grep -E 'backend: ' "$outdir/tests.log" | head -n 1
		echo "benchmarks: exit $bench_rc"
		grep -E '^Benchmark' "$outdir/bench.log"
	} >"$outdir/summary.txt"
	echo "==== summary ($outdir/summary.txt)"
	cat "$outdir/summary.txt"
	[ "$test_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
}

case $mode in
build) build ;;
run) run ;;
all)
	if command -v go >/dev/null 2>&1; then
		build || exit 1
	fi
	run
	;;
*)
	echo "usage: $0 [build|run]" >&2
	exit 2
	;;
esac
