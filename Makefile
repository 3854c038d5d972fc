# rollout: `make demo` runs the product, `make test` passes the tests, `make bench` prints the benchmarks.
SWIFT ?= swift
# Recipes run in bash with pipefail: every `swift build` below writes through a pipe (`$(NOTTY)`), so a build
# started in a terminal and one started by a script plan the same commands. SwiftPM adds -color-diagnostics to
# every swiftc command when its output is a terminal, and a changed command line recompiles every module: a
# `make demo` typed in a terminal after `make test` (whose output is a pipe) rebuilt the whole release binary.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
NOTTY := 2>&1 | cat
BIN := .build/release/rollout
# The Swift runtime linked statically, and the native libraries too (static-libs below): no shared library but
# glibc's (and libgcc_s) is loaded and bound when a rollout command starts.
RELEASE := -c release --static-swift-stdlib --disable-local-rpath
# The archives release builds link instead of the shared objects: Package.swift searches this directory first.
STATIC_LIBS := .build/static-libs
STATIC_ARCHIVES := libcrypto.a libsqlite3.a libncursesw.a libtinfo.a libstdc++.a

.PHONY: all build build-tests release demo test bench fuzz clean deps-build deps-test deps-bench pyenv static-libs

all: build

deps-build:
	@scripts/deps.sh build
deps-test:
	@scripts/deps.sh test
deps-bench:
	@scripts/deps.sh bench

pyenv:
	@scripts/pyenv.sh

## The debug builds carry no DWARF: the tests name their own source lines when they fail and crash backtraces
## name the functions from the symbol table, and without it the debug build with the tests takes 536 s of CPU
## instead of 612 s here (it is the first phase of `make test`'s longer lane). For a debugger: `make build DEBUG_INFO=`.
DEBUG_INFO ?= -debug-info-format none
build: deps-build
	$(SWIFT) build $(DEBUG_INFO) $(NOTTY)

## The debug build with the test bundle (the suites lane of `make test`).
build-tests: deps-build
	$(SWIFT) build --build-tests $(DEBUG_INFO) $(NOTTY)

## Links to the static archives of the Debian -dev packages (libssl-dev, libsqlite3-dev, libncurses-dev, libstdc++).
static-libs: deps-build
	@mkdir -p $(STATIC_LIBS)
	@for a in $(STATIC_ARCHIVES); do \
	  p=$$($${CC:-cc} -print-file-name=$$a); \
	  if [ -f "$$p" ]; then ln -sf "$$p" $(STATIC_LIBS)/$$a; else echo "static-libs: no $$a, linking the shared library" >&2; fi; \
	done

release: static-libs
	$(SWIFT) build $(RELEASE) --product rollout $(NOTTY)

## The console on a temporary embedded store with a simulated fleet.
demo: release
	$(BIN) demo $(ARGS)

## The whole test suite, including the differential tests against the real peers, a short fuzz run, and the
## release binary (what users run) through one command per native library and store.
## Its wall time, when it passes, goes to .build/make-test-seconds (`make bench` prints it against 20 minutes).
test: deps-test pyenv
	@mkdir -p .build && date +%s > .build/make-test-started
	ROLLOUT_PYTHON=$(CURDIR)/.venv/bin/python SWIFT="$(SWIFT)" scripts/make-test.sh
	@echo $$(( $$(date +%s) - $$(cat .build/make-test-started) )) > .build/make-test-seconds
	@echo "make test: passed in $$(cat .build/make-test-seconds) s"

## Benchmarks: each figure printed as a ratio against a peer or a limit measured in the same run.
bench: deps-bench pyenv static-libs
	$(SWIFT) build $(RELEASE) $(NOTTY)
	ROLLOUT_PYTHON=$(CURDIR)/.venv/bin/python .build/release/rollout-bench $(ARGS)

## A long fuzz run: make fuzz SECONDS=600
SECONDS ?= 600
fuzz: deps-build
	scripts/fuzz.sh long $(SECONDS)

clean:
	rm -rf .build .venv
