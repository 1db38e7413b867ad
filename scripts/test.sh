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
# Each step is timed; the times are printed at the end (also when a step fails), so a CI log
# shows where its minutes go: the build (clippy's check, then the test build) apart from the runs.
timings=()
step() {
  local name=$1 t0=$SECONDS
  shift
  echo "[test] $name" >&2
  "$@"
  timings+=("$(printf '%6d s  %s' $((SECONDS - t0)) "$name")")
}
report() {
  echo "[test] time per step:" >&2
  printf '[test] %s\n' "${timings[@]}" >&2
  echo "[test] total: $SECONDS s" >&2
}
trap report EXIT
step "prune the build cache" ./scripts/prune-cache.sh
step "links of the README and the book" sh -c 'python3 scripts/check-links.py && python3 scripts/check-ids.py'
step "one version everywhere" python3 scripts/check-versions.py --self-test
step "the packages' builds share the workspace's features" python3 scripts/check-unified-features.py
step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy" cargo clippy --locked --workspace --all-targets -- -D warnings
step "cargo test: build" cargo test --locked --workspace --no-run
# The test run, with each test binary's own time (libtest's "finished in") listed slowest first.
cargo_test_run() {
  local log
  log=$(mktemp)
  cargo test --locked --workspace 2>&1 | tee "$log"
  python3 - "$log" >&2 <<'PY'
import re, sys
rows, current = [], None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s+Running (\S+)(?: (\S+))? \((?:.*/)?([^/)]+?)(?:-[0-9a-f]{16})?\)", line)
    if m:
        current = f"{m.group(3)} (unit tests)" if m.group(1) == "unittests" else f"{m.group(3)}: {m.group(1)}"
    m = re.match(r"\s+Doc-tests (\S+)", line)
    if m:
        current = f"{m.group(1)} (doc tests)"
    m = re.search(r"test result: \w+\. (\d+) passed.*finished in ([\d.]+)s", line)
    if m and current:
        rows.append((float(m.group(2)), int(m.group(1)), current))
print("[test] slowest test binaries:")
for secs, n, name in sorted(rows, reverse=True)[:12]:
    print(f"[test] {secs:8.1f} s  {n:4d} tests  {name}")
print(f"[test] {sum(r[0] for r in rows):8.1f} s in {len(rows)} test binaries")
PY
  rm -f "$log"
}
step "cargo test: run" cargo_test_run
step "python package (wheel in a fresh venv, pytest, mypy, stubtest)" ./scripts/test-python.sh
step "node package (addon, node --test)" ./scripts/test-node.sh
