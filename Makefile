# The two set-up commands of the README. Both install what the build needs first (idempotent).
CARGO ?= cargo

.PHONY: setup demo test bench fmt

setup:
	./scripts/setup.sh

## Build and run the showcase on the built-in demo catalog.
demo: setup
	$(CARGO) run --locked -p codemode-cli --bin codemode -- demo

## Everything CI checks: formatting, lints, all tests (unit, conformance on both engines, end to end).
test: setup
	./scripts/test.sh

## Benchmarks (not part of the tests): `codemode bench` in release, and criterion.
bench: setup
	$(CARGO) run --locked --release -p codemode-cli --bin codemode -- bench
	$(CARGO) bench --locked -p codemode --features engine-wasi,engine-quickjs --bench runtime

fmt:
	$(CARGO) fmt --all
