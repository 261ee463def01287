#!/usr/bin/env bash
# Builds the speed baseline: llama.cpp's tools compiled natively for this CPU
# (cmake -DGGML_NATIVE=ON, Release) from the exact source node-llama-cpp bundles, so that tq is
# compared with what a user who cares about speed runs, not with node-llama-cpp's generic
# prebuilt library. Used by `make bench`; never by `make test`.
#
#   scripts/llamacpp-native.sh [OUT_DIR]      (default build/llamacpp-native)
#
# Prints the bin directory holding llama-bench, llama-quantize, llama-imatrix and
# llama-perplexity. Cached: a build whose stamp (bundled commit, compiler, the CPU's flags)
# matches is reused. Needs cmake (Debian: apt-get install cmake), a C++ compiler and the
# references (make refs). Output of the build goes to OUT_DIR/build.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/llamacpp-native}
mkdir -p "$out"
out=$(cd "$out" && pwd)
bundle=$root/testdata/llamacpp/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [ ! -f "$bundle" ]; then
  echo "llamacpp-native.sh: $bundle missing: run make refs first" >&2
  exit 1
fi
if ! command -v cmake >/dev/null; then
  echo "llamacpp-native.sh: cmake not found (Debian: apt-get install cmake)" >&2
  exit 1
fi
commit=$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" {print $1}')
flags=$(grep -m1 '^flags' /proc/cpuinfo | sed 's/^flags[[:space:]]*:[[:space:]]*//' | sha256sum | cut -c1-16)
# ggml's AMX int8 matmul (ggml-cpu/amx/mmq.cpp, ggml_backend_amx_mul_mat) crashed with SIGSEGV on
# every quantized model, dense and MoE, on a Sapphire Rapids VM that exposes AMX (llama.cpp
# 80fb11ac, 2026-12-03; reported upstream as llama.cpp issue #20824, and ollama stopped shipping
# its AMX CPU variant), so on a CPU with AMX the baseline is built without it: -march=native
# minus the AMX extensions, i.e. ggml's AVX-512/VNNI/BF16 kernels. TQ_LLAMACPP_AMX=1 keeps AMX.
xflags=""
xdefs=()
if grep -m1 '^flags' /proc/cpuinfo | grep -qw amx_int8 && [ "${TQ_LLAMACPP_AMX:-0}" != 1 ]; then
  xflags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  xdefs=("-DCMAKE_C_FLAGS=$xflags" "-DCMAKE_CXX_FLAGS=$xflags")
fi
stamp="commit $commit cxx $(c++ --version | head -1) cpuflags $flags xflags $xflags"
bins=(llama-bench llama-quantize llama-imatrix llama-perplexity)
if [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
  ok=1
  for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || ok=0; done
  if [ $ok = 1 ]; then
    echo "$out/bin"
    exit 0
  fi
fi
rm -rf "$out/src" "$out/cmake" "$out/bin" "$out/.stamp"
git -c advice.detachedHead=false clone -q "$bundle" "$out/src"
git -C "$out/src" checkout -q "$commit"
echo "llamacpp-native.sh: building llama.cpp ${commit:0:12} natively${xflags:+ without AMX} (about 10 minutes on 2 cores; log: $out/build.log)" >&2
gen=()
if command -v ninja >/dev/null; then gen=(-G Ninja); fi
{
  cmake -S "$out/src" -B "$out/cmake" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DBUILD_SHARED_LIBS=OFF "${xdefs[@]}"
  cmake --build "$out/cmake" --config Release -j "$(nproc)" --target "${bins[@]}"
} >"$out/build.log" 2>&1 || {
  tail -30 "$out/build.log" >&2
  exit 1
}
mkdir -p "$out/bin"
for b in "${bins[@]}"; do
  cp "$out/cmake/bin/$b" "$out/bin/$b"
done
rm -rf "$out/src"
echo "$stamp" >"$out/.stamp"
echo "$out/bin"
