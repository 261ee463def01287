# tq — developer entry points. `make demo` runs the pipeline end to end on a generated model;
# `make test` runs everything CI runs.
GO       ?= go
BIN      ?= bin/tq
PKGS     ?= ./...
DEMO_DIR ?= build/demo
FUZZTIME ?= 10s
export GOFLAGS ?= -mod=readonly

.PHONY: all build test test-purego refs vet fmt-check bench demo fuzz ptx gpu-check clean

all: build

build:
	$(GO) build -trimpath -o $(BIN) ./cmd/tq

# Independent references used by the tests: llama.cpp (node-llama-cpp 3.21.1, prebuilt),
# its source tree (vocab test vectors), and transformers.js's Qwen3 tokenizer.
refs:
	./testdata/llamacpp/setup.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# TQ_REQUIRE_REFS=1 turns a missing reference into a failure instead of a skip.
# The second run repeats the llama.cpp parity tests against llama.cpp's AVX2 (haswell) CPU
# variant, whose float orders tq reproduces bit for bit, so the strict criteria are checked on
# AVX-512 hosts too (docs/infer.md, "Parity on every x86-64 host").
test: refs fmt-check vet
	TQ_REQUIRE_REFS=1 $(GO) test -count=1 -timeout 30m $(PKGS)
	TQ_REQUIRE_REFS=1 TQ_LLAMACPP_CPU=haswell $(GO) test -count=1 -timeout 10m -run 'LlamaCpp' ./infer/ ./verify/ ./internal/convert/

# The whole suite with the assembly kernels disabled (pure-Go twins).
test-purego: refs
	TQ_REQUIRE_REFS=1 $(GO) test -tags purego -count=1 -timeout 30m $(PKGS)

# Benchmarks, with llama.cpp built natively for this CPU as the speed baseline
# (scripts/llamacpp-native.sh: cached in build/llamacpp-native, needs cmake).
bench: refs
	TQ_LLAMACPP_NATIVE=$$(./scripts/llamacpp-native.sh) && export TQ_LLAMACPP_NATIVE && \
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 90m $(PKGS)

demo: build
	./scripts/demo.sh $(DEMO_DIR)

# Short bounded fuzz runs of every parser's fuzz target.
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# Regenerate the committed PTX from infer/cuda/kernels/*.cu (needs nvcc; building tq does not).
ptx:
	./scripts/ptx.sh

# Build the CUDA test binaries and tq here, packed into build/gpu-check.tar.xz; run them on a
# GPU machine with `scripts/gpu-check.sh run` (docs/cuda.md).
gpu-check:
	./scripts/gpu-check.sh build

clean:
	rm -rf bin build
