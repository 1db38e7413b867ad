# The two set-up commands of the README. Both install what the build needs first (idempotent).
CARGO ?= cargo

.PHONY: eval setup demo test docs fleet-demo bench bench-fleet bench-mcp bench-peers bench-serve bench-console console-screenshots dist bench-instructions fmt fuzz python node bench-python bench-node

setup:
	./scripts/setup.sh

## `codemode eval` on the bundled suite (eval/) with the oracle model: every task in every arm,
## offline; the report goes to eval-report/. (Dev profile: the tests' build.)
eval: setup
	$(CARGO) run --locked -p codemode-cli --bin codemode -- eval --suite eval --out eval-report

## Build and run the showcase on the built-in demo catalog.
demo: setup
	$(CARGO) run --locked -p codemode-cli --bin codemode -- demo

## Everything CI checks: formatting, lints, all tests (unit, conformance on both engines, end to end).
test: setup
	./scripts/test.sh

## A fleet on loopback ports: redis-server, three `codemode serve --http --store redis://…` replicas
## behind HAProxy, and a scripted MCP client through the balancer (a replica killed mid-call).
fleet-demo: setup
	$(CARGO) build --locked -p codemode-cli --bin codemode
	.venv/bin/python tests/e2e/fleet_demo.py $${CARGO_TARGET_DIR:-target}/debug/codemode

## The book in docs/ (mdBook, installed on first use under the cache folder), built into docs/book/.
MDBOOK_VERSION ?= 0.5.4
TOOLS_DIR ?= $(HOME)/.cache/codemode-ci/tools
docs:
	python3 scripts/check-links.py
	python3 scripts/check-ids.py
	@test -x $(TOOLS_DIR)/bin/mdbook || $(CARGO) install --locked mdbook --version $(MDBOOK_VERSION) \
	  --no-default-features --features search --root $(TOOLS_DIR)
	$(TOOLS_DIR)/bin/mdbook build docs
	@echo "book: docs/book/index.html"

## The Python package's wheel (dev profile, the tests' build) into $CARGO_TARGET_DIR/wheels.
python: setup
	.venv/bin/maturin build --locked --strip --profile dev -m crates/codemode-python/Cargo.toml --out $${CARGO_TARGET_DIR:-target}/wheels

## The Node package's addon and declarations, in crates/codemode-node (dev profile, the tests' build).
node: setup
	./scripts/build-node.sh

## Python and Node packages next to their peers (release builds; smolagents and pydantic-monty are
## installed into a scratch venv when the registry has them).
bench-python: setup
	.venv/bin/maturin build --locked --strip --release -m crates/codemode-python/Cargo.toml --out $${CARGO_TARGET_DIR:-target}/wheels-release
	$(CARGO) build --locked --release -p codemode-cli --bin codemode
	./scripts/bench-python.sh $${CARGO_TARGET_DIR:-target}/wheels-release $${CARGO_TARGET_DIR:-target}/release/codemode

bench-node: setup
	./scripts/build-node.sh --release
	node bench/node/bench.mjs

## Benchmarks (not part of the tests): `codemode bench` in release, and criterion.
bench: setup
	$(CARGO) run --locked --release -p codemode-cli --bin codemode -- bench
	$(CARGO) bench --locked -p codemode --features engine-wasi,engine-quickjs,engine-boa --bench runtime

## What `codemode serve --http` carries, from a load generator in Rust (release build): trivial cells
## at 1, 8 and 64 clients, suspend + resume on one server and across three replicas on one Redis,
## with the CPU the servers, Redis and the load client each spend per cell.
bench-fleet: setup
	$(CARGO) build --locked --release -p codemode-cli --bin codemode
	$${CARGO_TARGET_DIR:-target}/release/codemode bench --fleet --seconds 5

## MCP overhead and surface size: codemode serve vs the same upstream servers called directly.
bench-mcp: setup
	$(CARGO) build --locked --release -p codemode-cli --bin codemode
	.venv/bin/python tests/e2e/measure.py $${CARGO_TARGET_DIR:-target}/release/codemode 200

## Peer comparison: codemode bench next to quickjs-emscripten (sync and asyncify builds) in Node, with ratios.
bench-peers: setup
	$(CARGO) build --locked --release -p codemode-cli --bin codemode
	./scripts/bench-peers.sh

## Load test: N concurrent MCP sessions (1, 2, 8, 64) running trivial cells against one `codemode serve --http`.
bench-serve: setup
	$(CARGO) build --locked --release -p codemode-cli --bin codemode
	.venv/bin/python tests/e2e/load.py $${CARGO_TARGET_DIR:-target}/release/codemode

## Release artifacts into dist/ (release builds, outside CI): the binary tarball, the manylinux_2_17
## abi3 wheel and the sdist, the npm package and its linux-x64-gnu platform package, with SHA256SUMS
## and each one's glibc floor; then each installed and run the way a user would (scripts/check-dist.sh).
dist: setup
	./scripts/dist.sh

## The book's screenshots of the operator console, taken by its browser test (docs/src/console/).
console-screenshots: setup
	CODEMODE_CONSOLE_SCREENSHOTS=$(CURDIR)/docs/src/console $(CARGO) test --locked --workspace --test serve -- operator_console_in_a_real_browser

## The operator console's cost on serving: each row with the console off, then on with one
## live-update (SSE) client reading every tick (release build).
bench-console: setup
	$(CARGO) build --locked --release -p codemode-cli --bin codemode
	.venv/bin/python tests/e2e/load.py $${CARGO_TARGET_DIR:-target}/release/codemode --sessions 1,8 --seconds 10 --console both

## Instructions per nested call under callgrind (needs valgrind): comparable across runs where times are not.
bench-instructions: setup
	./scripts/count-instructions.sh

fmt:
	$(CARGO) fmt --all

## Fuzzing (nightly + cargo-fuzz, installed on first use): every target for FUZZ_SECONDS each.
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= adapter guest_json host_primitive host_primitive_answering config differential portable_run portable_damaged js_scanners wasi_snapshot_page_table wasi_snapshot_header
fuzz: setup
	@command -v cargo-fuzz >/dev/null 2>&1 || $(CARGO) install --locked cargo-fuzz
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  $(CARGO) +nightly fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS) || exit 1; done
