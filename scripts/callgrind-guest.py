#!/usr/bin/env python3
"""Self instructions per run of each function in callgrind profiles, guest functions named.

Used by scripts/count-instructions.sh. Valgrind cannot name the code wasmtime compiles at run time
(quickjs-wasi's guest: QuickJS and the shim), so its functions show as bare addresses. wasmtime
writes their names to /tmp/perf-<pid>.map when the process runs with
`CODEMODE_WASM_PROFILER=perfmap`; the code sits at the same addresses under valgrind, so that map
names them here too. Two profiles (a baseline scenario and another) are compared function by
function: what each costs per run in both, and the difference, largest growth first.

Usage: callgrind-guest.py MAP BASE_RUNS OTHER_RUNS BASE_PREFIX OTHER_PREFIX [N]
  MAP           the perf map of either process (both load the same compiled module at the same
                address when run the same way; a function not found in it keeps its address)
  *_RUNS        how many runs each profile holds (see callgrind-calls.py)
  *_PREFIX      the callgrind output files, one per thread: PREFIX.*
  N             how many rows to print (default 25)
Prints: per run in the base profile, in the other, the difference, the function (tab-separated).
"""

import bisect
import collections
import glob
import re
import subprocess
import sys


def load_map(path):
    entries = []
    with open(path, errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 2)
            if len(parts) == 3:
                try:
                    entries.append((int(parts[0], 16), int(parts[1], 16), parts[2]))
                except ValueError:
                    continue
    entries.sort()
    return entries


def namer(entries):
    starts = [e[0] for e in entries]

    def name(match):
        addr = int(match.group(1), 16)
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and addr < entries[i][0] + entries[i][1]:
            return "wasm:" + entries[i][2]
        return match.group(0)

    return name


def self_costs(prefix, name):
    totals = collections.Counter()
    for path in glob.glob(prefix + ".*"):
        out = subprocess.run(
            ["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        for line in out.splitlines():
            m = re.match(r"\s*([\d,]+)\s+\([^)]*\)\s+(.*)", line)
            if not m:
                continue
            fn = re.sub(r" \[.*\]$", "", m.group(2))
            fn = re.sub(r"0x([0-9a-f]{16})", name, fn)
            if fn != "PROGRAM TOTALS":
                totals[fn] += int(m.group(1).replace(",", ""))
    return totals


def main() -> int:
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    name = namer(load_map(sys.argv[1]))
    base_runs, other_runs = int(sys.argv[2]), int(sys.argv[3])
    if base_runs <= 0 or other_runs <= 0:
        print("callgrind-guest: run counts must be positive", file=sys.stderr)
        return 2
    rows = int(sys.argv[6]) if len(sys.argv) > 6 else 25
    base = self_costs(sys.argv[4], name)
    other = self_costs(sys.argv[5], name)
    diffs = []
    for fn in set(base) | set(other):
        b, o = base[fn] / base_runs, other[fn] / other_runs
        diffs.append((o - b, b, o, fn))
    diffs.sort(reverse=True)
    for d, b, o, fn in diffs[:rows]:
        print(f"{b:.0f}\t{o:.0f}\t{d:+.0f}\t{fn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
