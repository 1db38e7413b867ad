#!/usr/bin/env python3
"""Calls and inclusive instructions per call of functions in callgrind profiles.

Used by scripts/count-instructions.sh. `callgrind_annotate` prints inclusive totals but not how
many times a function was called; a profile of a criterion scenario under `--profile-time` runs it
an unknown number of times, so a per-run figure needs the call count. Callgrind records, for every
call site, `calls=N` followed by the inclusive cost of those N calls; this sums both over every
call site of the functions whose (demangled) name matches each pattern, across the given files
(one per thread with `--separate-threads=yes`).

Usage: callgrind-calls.py PATTERN FILE...
Prints: calls, inclusive instructions, instructions per call (tab-separated).
"""

import re
import sys


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    pattern = re.compile(sys.argv[1])
    calls = 0
    cost = 0
    for path in sys.argv[2:]:
        names: dict[str, str] = {}
        callee = ""
        pending = None
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith(("fn=", "cfn=")):
                    # Name compression: `(id) name` the first time, `(id)` after.
                    m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                    if m:
                        if m.group(2):
                            names[m.group(1)] = m.group(2)
                        if line.startswith("cfn="):
                            callee = names.get(m.group(1), "")
                elif line.startswith("calls="):
                    pending = int(line.split("=", 1)[1].split()[0])
                elif pending is not None:
                    # The line after `calls=`: position, then the calls' inclusive cost.
                    parts = line.split()
                    if len(parts) >= 2 and pattern.search(callee):
                        calls += pending
                        cost += int(parts[1])
                    pending = None
    per = cost // calls if calls else 0
    print(f"{calls}\t{cost}\t{per}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
