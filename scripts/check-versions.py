#!/usr/bin/env python3
"""One version for everything a user installs: the workspace's (`[workspace.package] version` in
Cargo.toml) is the source. Every crate takes it (`version.workspace = true`), the path dependencies
of `[workspace.dependencies]` name it, the Python package takes it from Cargo (`dynamic =
["version"]`, maturin), and the npm package (package.json and its lock) states it. Exits 1 naming
each mismatch. `--self-test` checks that a mismatch is caught, on a copy."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def problems(root: Path) -> list[str]:
    out: list[str] = []
    workspace = tomllib.loads((root / "Cargo.toml").read_text())
    version = workspace["workspace"]["package"]["version"]
    for name, dep in workspace["workspace"].get("dependencies", {}).items():
        if isinstance(dep, dict) and "path" in dep and dep.get("version") != version:
            out.append(f"Cargo.toml: [workspace.dependencies] {name} names version {dep.get('version')!r}, not {version!r}")
    for member in workspace["workspace"]["members"]:
        manifest = root / member / "Cargo.toml"
        package = tomllib.loads(manifest.read_text()).get("package", {})
        if package.get("version") != {"workspace": True}:
            out.append(f"{manifest.relative_to(root)}: version must be `version.workspace = true`, not {package.get('version')!r}")
    project = tomllib.loads((root / "crates/codemode-python/pyproject.toml").read_text())["project"]
    if "version" in project or "version" not in project.get("dynamic", []):
        out.append("crates/codemode-python/pyproject.toml: the version must be dynamic (from Cargo), not stated")
    node = root / "crates/codemode-node"
    package_json = json.loads((node / "package.json").read_text())
    if package_json.get("version") != version:
        out.append(f"crates/codemode-node/package.json: version {package_json.get('version')!r}, not {version!r}")
    lock = json.loads((node / "package-lock.json").read_text())
    for where, v in (("version", lock.get("version")), ('packages[""].version', lock.get("packages", {}).get("", {}).get("version"))):
        if v != version:
            out.append(f"crates/codemode-node/package-lock.json: {where} {v!r}, not {version!r}")
    return out


def self_test() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp)
        files = ["Cargo.toml", "crates/codemode-python/pyproject.toml", "crates/codemode-node/package.json", "crates/codemode-node/package-lock.json"]
        workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())
        files += [f"{m}/Cargo.toml" for m in workspace["workspace"]["members"]]
        for f in files:
            (copy / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / f, copy / f)
        assert problems(copy) == [], problems(copy)
        pj = copy / "crates/codemode-node/package.json"
        pj.write_text(re.sub(r'"version": "[^"]*"', '"version": "9.9.9"', pj.read_text(), count=1))
        found = problems(copy)
        assert len(found) == 1 and "9.9.9" in found[0], found
        pyproject = copy / "crates/codemode-python/pyproject.toml"
        pyproject.write_text(pyproject.read_text().replace('dynamic = ["version"]', 'version = "0.1.0"'))
        assert any("dynamic" in p for p in problems(copy)), problems(copy)
    print("versions self-test ok: a mismatch is caught")


if __name__ == "__main__":
    if "--self-test" in sys.argv:
        self_test()
    found = problems(ROOT)
    for p in found:
        print(f"version mismatch: {p}", file=sys.stderr)
    if found:
        sys.exit(1)
    version = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]
    print(f"versions ok: {version} everywhere")
