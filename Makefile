# rollout: `make demo` runs the product, `make test` passes the tests, `make bench` prints the benchmarks.
SWIFT ?= swift
BIN := .build/release/rollout
# The Swift runtime and Foundation linked statically: half the start-up time of every rollout command.
RELEASE := -c release --static-swift-stdlib

.PHONY: all build release demo test bench fuzz clean deps-build deps-test deps-bench pyenv

all: build

deps-build:
	@scripts/deps.sh build
deps-test:
	@scripts/deps.sh test
deps-bench:
	@scripts/deps.sh bench

pyenv:
	@scripts/pyenv.sh

build: deps-build
	$(SWIFT) build

release: deps-build
	$(SWIFT) build $(RELEASE) --product rollout

## The console on a temporary embedded store with a simulated fleet.
demo: release
	$(BIN) demo $(ARGS)

## The whole test suite, including the differential tests against the real peers and a short fuzz run.
test: deps-test pyenv
	$(SWIFT) build --build-tests
	ROLLOUT_PYTHON=$(CURDIR)/.venv/bin/python $(SWIFT) test --skip-build
	scripts/fuzz.sh short

## Benchmarks: each figure printed as a ratio against a peer or a limit measured in the same run.
bench: deps-bench pyenv
	$(SWIFT) build $(RELEASE)
	ROLLOUT_PYTHON=$(CURDIR)/.venv/bin/python .build/release/rollout-bench $(ARGS)

## A long fuzz run: make fuzz SECONDS=600
SECONDS ?= 600
fuzz: deps-build
	scripts/fuzz.sh long $(SECONDS)

clean:
	rm -rf .build .venv
