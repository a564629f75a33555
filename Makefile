# archgen's entry points. Every target that needs libmlx or the Python venv
# depends on setup, which installs them (pinned) into .deps/ on first use.
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 1

.PHONY: all setup test vet demo generate check config-reference rope-reference

all: test

# Installs the mlx-cpu wheel (libmlx and headers) and the Python venv with
# mlx-lm into .deps/; a no-op once done.
setup:
	@bash scripts/setup.sh

# The whole test suite, as CI runs it.
test: setup
	$(GO) vet ./...
	$(GO) test -count=1 ./...

vet: setup
	$(GO) vet ./...

# The main job, end to end.
demo: setup
	$(GO) run ./examples/mlxinfo

# Rewrites gen/testdata/configs/*/*.mlxlm.json: what mlx-lm makes of each
# published config there, the reference every generated ParseConfig meets.
config-reference: setup
	.deps/py/bin/python gen/testdata/configs/mlxlm_reference.py

# Rewrites runtime/nn/testdata/rope.json: mlx-lm's ropes on a fixed input.
rope-reference: setup
	.deps/py/bin/python runtime/nn/testdata/rope_reference.py
