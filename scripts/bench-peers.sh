#!/usr/bin/env bash
# codemode next to quickjs-emscripten, the QuickJS-in-WebAssembly library JavaScript code-mode
# runtimes embed (run by `make bench-peers`, after scripts/setup.sh). Numbers are printed, never
# asserted; both sides run on this machine, now, one after the other.
#
# Usage: scripts/bench-peers.sh [SAMPLES]   (default 300)
#   CODEMODE_BIN  the codemode binary (default: ${CARGO_TARGET_DIR:-target}/release/codemode)
#
# Runs `node bench/peers/peers.mjs SAMPLES --json` and
# `codemode bench --json --samples SAMPLES --engine quickjs-wasi --engine quickjs`, then prints
# codemode's exec / nested / suspend rows, the peer's rows, and p50 ratios:
#   trivial exec (`return 1+1`, fresh instance) vs the peer's fresh runtime + `1+1`, sync and asyncify;
#   nested call (per call, 1000 in one cell)   vs the peer's host call, asyncified and sync;
#   and, within codemode, a trivial exec with two visible namespaces vs the plain trivial execs
#   interleaved with it (the goal's ratio; the plain `execTrivialUs` row is measured earlier), and
#   trivial execs after heavy cells (deep recursion, a grown heap) vs those right before them.
set -euo pipefail
cd "$(dirname "$0")/.."

samples=${1:-300}
bin=${CODEMODE_BIN:-${CARGO_TARGET_DIR:-target}/release/codemode}
[ -x "$bin" ] || { echo "bench-peers: no codemode binary at $bin (set CODEMODE_BIN)" >&2; exit 1; }
[ -d bench/peers/node_modules ] || { echo "bench-peers: run scripts/setup.sh first" >&2; exit 1; }

echo "[bench-peers] quickjs-emscripten, $samples samples" >&2
peers=$(node bench/peers/peers.mjs "$samples" --json)
echo "[bench-peers] codemode bench, $samples samples" >&2
ours=$("$bin" bench --json --samples "$samples" --engine quickjs-wasi --engine quickjs)

python3 - "$peers" "$ours" <<'PY'
import json
import re
import sys
from pathlib import Path

peers, ours = json.loads(sys.argv[1]), json.loads(sys.argv[2])
version = json.loads(Path("bench/peers/node_modules/quickjs-emscripten/package.json").read_text())["version"]
engines = [row["engine"] for row in ours]


def is_latency(v):
    return isinstance(v, dict) and "p50" in v


def norm(key):  # execTrivialUs, exec_trivial_us -> exectrivialus
    return re.sub(r"[^a-z0-9]", "", key.lower())


def cell(v):
    return f"{v['p50']:.1f} ({v['p90']:.1f})" if is_latency(v) else f"{v:.2f}"


# codemode rows: every per-engine key about exec, nested calls or suspension, in first-seen order.
keys = []
for row in ours:
    for k, v in row.items():
        if k not in keys and re.search(r"exec|nested|suspend", k, re.I) and (is_latency(v) or isinstance(v, (int, float))):
            keys.append(k)

print(f"codemode vs quickjs-emscripten {version}: p50 (p90), {peers['samples']} samples, this machine, now")
print("(units as the key says: ...Us µs, ...Ms ms, ...Ns ns; peer rows in µs)\n")
print(f"{'codemode row':<34}" + "".join(f"{e:>26}" for e in engines))
for k in keys:
    vals = [row.get(k) for row in ours]
    print(f"{k:<34}" + "".join(f"{cell(v) if v is not None else '-':>26}" for v in vals))

print(f"\n{'quickjs-emscripten row':<34}{'p50 (p90)':>26}")
for k, v in peers.items():
    if is_latency(v):
        print(f"{k:<34}{cell(v):>26}")
tp = peers.get("throughput_sync")
if tp:
    print(f"{'throughput_sync (cells/s)':<34}{tp['cells_per_s']:>26}")

# Ratios (codemode p50 / peer p50): < 1 means codemode is faster.
pairs = [
    ({"execus", "exectrivialus"}, ["fresh_sync_us", "fresh_async_us", "fresh_async_module_us"]),
    ({"nestedus", "nestedcallus"}, ["async_host_call_us", "sync_host_call_us"]),
]
print(f"\n{'ratio (p50, < 1: codemode faster)':<50}" + "".join(f"{e:>14}" for e in engines))
for wanted, peer_keys in pairs:
    for k in (k for k in keys if norm(k) in wanted):
        for pk in peer_keys:
            if not is_latency(peers.get(pk)):
                continue
            ratios = []
            for row in ours:
                v = row.get(k)
                ratios.append(f"{v['p50'] / peers[pk]['p50']:.3g}x" if is_latency(v) else "-")
            print(f"{k + ' / ' + pk:<50}" + "".join(f"{r:>14}" for r in ratios))

# Namespaces against the plain trivial cells interleaved with them (same minutes, same runtime state).
ratios = []
for row in ours:
    ns, plain = row.get("execTrivialWithNamespacesUs"), row.get("execTrivialInterleavedUs")
    ratios.append(f"{ns['p50'] / plain['p50']:.3g}x" if is_latency(ns) and is_latency(plain) else "-")
print(f"{'execTrivialWithNamespacesUs / execTrivialInterleavedUs':<50}" + "".join(f"{r:>14}" for r in ratios))

# Trivial cells after heavy ones (deep recursion, a grown heap) against those measured right before.
ratios = []
for row in ours:
    after, before = row.get("execTrivialAfterHeavyUs"), row.get("execTrivialBeforeHeavyUs")
    ratios.append(f"{after['p50'] / before['p50']:.3g}x" if is_latency(after) and is_latency(before) else "-")
print(f"{'execTrivialAfterHeavyUs / execTrivialBeforeHeavyUs':<50}" + "".join(f"{r:>14}" for r in ratios))
PY
