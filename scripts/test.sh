#!/usr/bin/env bash
# The whole test run: formatting, lints, every test of the workspace (one build, dev profile; the
# end-to-end tests drive the `codemode` binary of that same build).
set -euo pipefail
cd "$(dirname "$0")/.."
export CI="${CI:-1}"            # insta: never write snapshots, fail on any difference
export INSTA_UPDATE=no
# Snapshot files are found from this checkout, also by test binaries a build in another checkout
# sharing the cache folder left behind (cargo reuses them; their compiled-in paths name that one).
export INSTA_WORKSPACE_ROOT="$PWD"
./scripts/prune-cache.sh
echo "[test] links of the README and the book" >&2
python3 scripts/check-links.py
python3 scripts/check-ids.py
echo "[test] one version everywhere" >&2
python3 scripts/check-versions.py --self-test
echo "[test] cargo fmt --check" >&2
cargo fmt --all -- --check
echo "[test] cargo clippy" >&2
cargo clippy --locked --workspace --all-targets -- -D warnings
echo "[test] cargo test" >&2
cargo test --locked --workspace
echo "[test] python package (wheel in a fresh venv, pytest)" >&2
./scripts/test-python.sh
echo "[test] node package (addon, node --test)" >&2
./scripts/test-node.sh
