#!/usr/bin/env python3
"""Fails when a build of one language package would compile shared dependencies a second time.

`cargo test --workspace` unifies each dependency's features over every workspace member; maturin
and napi build one package (`-p codemode-python`, `-p codemode-node`), whose dependencies then get
only that package's features. Where the two differ, the package's build compiles the dependency
and everything above it again: wasmtime, swc and rquickjs were compiled twice in a cold CI run.
crates/codemode-workspace-hack turns the workspace's features on for the packages too; this check
compares the two resolutions (`cargo tree`, target and host side) for every dependency that is not
a workspace crate, and names each one that differs and the features to add there.

Usage: scripts/check-unified-features.py
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys

PACKAGES = ["codemode-python", "codemode-node"]
LINE = re.compile(r"^(\S+) v(\S+)(?: \(proc-macro\))?(?: \([^)]*\))? \[(.*)\]$")


def features(*args: str) -> dict[tuple[str, str], set[str]]:
    """Each package (name, version) of a `cargo tree` resolution, with its feature sets (a
    dependency built for the target and for the host can have two)."""
    out = subprocess.run(
        ["cargo", "tree", "--locked", "--prefix", "none", "-f", "{p} [{f}]", *args],
        check=True, capture_output=True, text=True,
    ).stdout
    found: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for line in out.splitlines():
        m = LINE.match(line.strip().removesuffix(" (*)"))
        if m:
            found[(m.group(1), m.group(2))].add(m.group(3))
    return found


def main() -> int:
    problems = []
    # Target side only (what the package links), then everything (build scripts, proc macros).
    for edges in (["-e", "normal,no-proc-macro"], ["-e", "normal,build"]):
        ws_edges = [edges[0], edges[1].replace("normal", "normal,dev")]
        workspace = features("--workspace", *ws_edges)
        for package in PACKAGES:
            for key, sets in sorted(features("-p", package, *edges).items()):
                if key[0].startswith("codemode") or workspace.get(key) == sets:
                    continue
                have = set(",".join(sets).split(",")) - {""}
                want = set(",".join(workspace.get(key, set())).split(",")) - {""}
                problems.append(
                    f"{package}: {key[0]} {key[1]} has features {sorted(sets)} in its own build, "
                    f"{sorted(workspace.get(key, set()))} in the workspace's"
                    + (f" (add {sorted(want - have)} in crates/codemode-workspace-hack)" if want - have else "")
                )
    problems = list(dict.fromkeys(problems))
    if problems:
        print("features differ between the workspace's build and a language package's:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print("the language packages' builds share the workspace's dependency features")
    return 0


if __name__ == "__main__":
    sys.exit(main())
