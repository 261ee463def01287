#!/usr/bin/env bash
# gpu-check.sh: the CUDA device checks of packages infer/cuda and infer (the GPU layer executor)
# and of `tq run` in one script, inside one 480 s device call (hard limits: 100 s + 50 s for the
# kernel tests and benchmarks, 130 s for the full-model tests, 60 s + 40 s for the dense and the
# hybrid decode benchmarks, 4 × 20 s for tq run).
#
#   scripts/gpu-check.sh build   build build/cuda.test and build/infer.test (the test binaries of
#                                infer/cuda and infer) and bin/tq, all with CGO_ENABLED=0 and
#                                without symbol tables (-s -w; stack traces keep their lines),
#                                and pack the three into build/gpu-check.tar.xz (~8 MB), the one
#                                file to copy to a GPU machine; needs Go, no CUDA toolkit
#   scripts/gpu-check.sh run     run the prebuilt binaries on the GPU machine (unpacking
#                                build/gpu-check.tar.xz first when a binary is missing); builds
#                                nothing and needs only the NVIDIA driver (libcuda.so.1), not Go
#   scripts/gpu-check.sh         build (when go is on PATH) then run
#
# run executes, with TQ_GPU=1:
#   cuda.test  -test.run GPU -test.v            every kernel against the CPU reference at
#                                               production sizes
#   cuda.test  -test.bench GPU -benchtime 20x   mat-vec GB/s per weight type, and as % of the
#                                               device copy bandwidth measured in the same run
#   infer.test -test.run GPUDevice -test.v      whole models (llama, qwen2, qwen3, qwen3moe; Q4_K,
#                                               Q6_K, Q8_0, F16; all layers + LM head, a split,
#                                               experts on the CPU; the qwen35/qwen35moe hybrid
#                                               fixtures in F32, turboquant and Q8_0 with
#                                               -ngl/--cpu-moe/--n-cpu-moe placements) against
#                                               the CPU runner
#   infer.test -test.bench GPUDecode -benchtime 64x   decode tok/s and GB/s of a 1.7 GB Q4_K
#                                               model, % of copy bandwidth, speed-up over the CPU
#   infer.test -test.bench GPUDecodeHybrid -benchtime 32x   the same for a 2.4 GB qwen35moe with
#                                               the 35B-A3B block layout in the turboquant types
#                                               (GB/s of the weights one token reads); both decode
#                                               benchmarks then print a launch profile of 8 eager
#                                               steps (TQ_GPU_PROFILE=1: time per kernel and shape)
#   bin/tq run on a Q8_0 conversion of testdata/verify/toolmodel, auto (GPU, graphs), auto with
#                                               --cuda-graphs=false, and --backend cpu
# Logs go to $OUT/gpu-check/ when OUT is set, else build/gpu-check/: env.txt, tests.log,
# bench.log, infer-tests.log, infer-bench.log, tq-run.log, summary.txt. Exit status 0 only if
# the build (when done), every test and tq run passed.
#
# Knobs: GPU_CHECK_TEST_FLAGS (extra test flags for both test binaries, e.g. -test.short for the
# emulator sizes), TQ_GPU_BENCH_MIB (kernel benchmark weight size, default 256), TQ_CUDA_LIB
# (driver library path).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:-all}
bin=build/cuda.test
ibin=build/infer.test
pack=build/gpu-check.tar.xz
outdir=${OUT:-$root/build}/gpu-check

build() {
	mkdir -p build bin
	echo "gpu-check: building $bin"
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$bin" ./infer/cuda/ || return 1
	echo "gpu-check: building $ibin"
	CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$ibin" ./infer/ || return 1
	echo "gpu-check: building bin/tq"
	CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/tq ./cmd/tq || return 1
	echo "gpu-check: packing $pack"
	tar -cf - "$bin" "$ibin" bin/tq | xz -9 -T0 >"$pack.tmp" && mv "$pack.tmp" "$pack" || return 1
	ls -l "$bin" "$ibin" bin/tq "$pack"
}

# unpack extracts the binaries from build/gpu-check.tar.xz, with tar's xz support or, where the
# machine has no xz program, with Python's lzma module.
unpack() {
	[ -f "$pack" ] || return 0
	echo "gpu-check: unpacking $pack"
	if command -v xz >/dev/null 2>&1; then
		tar -xJf "$pack"
	else
		python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall()' "$pack"
	fi
}

# tqrun runs bin/tq on a Q8_0 conversion of the trained tool-calling test model with the default
# backend (auto: the GPU, placement planned, recorded CUDA graphs), with --cuda-graphs=false (kernel
# by kernel) and with --backend cpu, and compares the greedy texts.
tqrun() {
	local dir rc=0
	dir=$(mktemp -d)
	if ! timeout 60 bin/tq convert testdata/verify/toolmodel --outtype q8_0 -o "$dir/tool.gguf" >/dev/null; then
		echo "tq run: FAILED: tq convert of testdata/verify/toolmodel"
		rm -rf "$dir"
		return 1
	fi
	local args=(run "$dir/tool.gguf" --tools testdata/demo/tools-weather.json -p "What's the weather like in Lisbon right now?" -n 64 --temp 0)
	timeout 20 bin/tq "${args[@]}" >"$dir/gpu.txt" || { echo "tq run: FAILED (exit $?): GPU run"; rc=1; }
	timeout 20 bin/tq "${args[@]}" --json | grep -E '"(device|backend|gpu_layers|output_on_gpu|ngl|gen_tok_s|prompt_tok_s)"'
	timeout 20 bin/tq "${args[@]}" --cuda-graphs=false >"$dir/eager.txt" || { echo "tq run: FAILED (exit $?): GPU run with --cuda-graphs=false"; rc=1; }
	timeout 20 bin/tq "${args[@]}" --backend cpu >"$dir/cpu.txt" 2>/dev/null || { echo "tq run: FAILED (exit $?): CPU run"; rc=1; }
	echo "GPU text: $(tr '\n' ' ' <"$dir/gpu.txt")"
	echo "GPU text with --cuda-graphs=false: $(tr '\n' ' ' <"$dir/eager.txt")"
	echo "CPU text: $(tr '\n' ' ' <"$dir/cpu.txt")"
	if cmp -s "$dir/gpu.txt" "$dir/cpu.txt"; then echo "tq run: GPU and CPU texts identical"; else echo "tq run: GPU and CPU texts DIFFER"; fi
	if cmp -s "$dir/eager.txt" "$dir/cpu.txt"; then echo "tq run: GPU (--cuda-graphs=false) and CPU texts identical"; else echo "tq run: GPU (--cuda-graphs=false) and CPU texts DIFFER"; fi
	rm -rf "$dir"
	return $rc
}

run() {
	if [ ! -x "$bin" ] || [ ! -x "$ibin" ] || [ ! -x bin/tq ]; then
		unpack || return 2
	fi
	for b in "$bin" "$ibin" bin/tq; do
		if [ ! -x "$b" ]; then
			echo "gpu-check: $b is missing: run 'scripts/gpu-check.sh build' where Go is installed and copy $pack (or build/ and bin/) here" >&2
			return 2
		fi
	done
	mkdir -p "$outdir"
	{
		date -u
		uname -a
		command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory --format=csv
		[ -x bin/tq ] && bin/tq --help >/dev/null 2>&1 && echo "bin/tq starts"
	} >"$outdir/env.txt" 2>&1
	cat "$outdir/env.txt"

	# The test binaries run in their package directories, as `go test` would run them.
	(cd infer/cuda && TQ_GPU=1 timeout 100 "$root/$bin" -test.run GPU -test.v -test.timeout 95s ${GPU_CHECK_TEST_FLAGS:-}) 2>&1 | tee "$outdir/tests.log"
	local test_rc=${PIPESTATUS[0]}
	(cd infer/cuda && TQ_GPU=1 timeout 50 "$root/$bin" -test.run '^$' -test.bench GPU -test.benchtime 20x -test.timeout 45s) 2>&1 | tee "$outdir/bench.log"
	local bench_rc=${PIPESTATUS[0]}
	(cd infer && TQ_GPU=1 timeout 130 "$root/$ibin" -test.run GPUDevice -test.v -test.timeout 125s ${GPU_CHECK_TEST_FLAGS:-}) 2>&1 | tee "$outdir/infer-tests.log"
	local itest_rc=${PIPESTATUS[0]}
	(cd infer && TQ_GPU=1 TQ_GPU_PROFILE=1 timeout 60 "$root/$ibin" -test.run '^$' -test.bench 'GPUDecode$' -test.benchtime 64x -test.timeout 55s ${GPU_CHECK_TEST_FLAGS:-}) 2>&1 | tee "$outdir/infer-bench.log"
	local ibench_rc=${PIPESTATUS[0]}
	(cd infer && TQ_GPU=1 TQ_GPU_PROFILE=1 timeout 40 "$root/$ibin" -test.run '^$' -test.bench 'GPUDecodeHybrid$' -test.benchtime 32x -test.timeout 35s ${GPU_CHECK_TEST_FLAGS:-}) 2>&1 | tee -a "$outdir/infer-bench.log"
	[ "${PIPESTATUS[0]}" -eq 0 ] || ibench_rc=1
	tqrun 2>&1 | tee "$outdir/tq-run.log"
	local run_rc=${PIPESTATUS[0]}

	count() { echo "$(grep -c -- '--- PASS' "$1") passed, $(grep -c -- '--- FAIL' "$1") failed, $(grep -c -- '--- SKIP' "$1") skipped"; }
	{
		echo "kernel tests: exit $test_rc; $(count "$outdir/tests.log")"
		grep -E -- '--- FAIL' "$outdir/tests.log"
		grep -E 'backend: ' "$outdir/tests.log" | head -n 1
		echo "kernel benchmarks: exit $bench_rc"
		grep -E '^Benchmark' "$outdir/bench.log"
		echo "model tests: exit $itest_rc; $(count "$outdir/infer-tests.log")"
		grep -E -- '--- FAIL' "$outdir/infer-tests.log"
		grep -E 'max\|Δp\|' "$outdir/infer-tests.log" | sed 's/^ *//'
		echo "decode benchmark: exit $ibench_rc"
		grep -E '^Benchmark' "$outdir/infer-bench.log"
		awk '/launch profile/ {n = 14} n > 0 {print; n--}' "$outdir/infer-bench.log"
		echo "tq run: exit $run_rc"
		grep -E '^tq run:|"(backend|gen_tok_s)"' "$outdir/tq-run.log"
	} >"$outdir/summary.txt"
	echo "==== summary ($outdir/summary.txt)"
	cat "$outdir/summary.txt"
	[ "$test_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$itest_rc" -eq 0 ] && [ "$ibench_rc" -eq 0 ] && [ "$run_rc" -eq 0 ]
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
