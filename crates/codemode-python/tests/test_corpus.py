"""The conformance corpus's cells (tests/conformance/cases, with the expected results the Rust
suite snapshots) through the Python API ("Security and bad input"): infinite loops,
memory bombs, deep recursion, hostile values, forbidden imports… each ends exactly as through the
Rust API, and the interpreter keeps serving. Cases that need the conformance catalog's tools, or
snapshot every step, stay with the Rust suite."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from codemode import CodeMode
from conftest import HERE, run

CORPUS = HERE.parent.parent.parent / "tests" / "conformance"
NEEDS_CATALOG = re.compile(r"tools\.|tools\[|MCP\.|namespaces|API\.|Shipping|ALL_TOOLS|@steps|@timing")


def load_cases() -> list[dict[str, Any]]:
    cases = []
    for file in sorted((CORPUS / "cases").glob("*.js")):
        source = file.read_text()
        header = [line[4:] for line in source.splitlines() if line.startswith("// @")]

        def directive(name: str) -> Any:
            for line in header:
                if line.startswith(name):
                    return json.loads(line[len(name):].strip() or "{}")
            return {}

        snap = (CORPUS / "snapshots" / f"{file.stem}.snap").read_text()
        expected = json.loads("\n---\n".join(snap.split("\n---\n")[1:]))
        cases.append(
            {
                "name": file.stem,
                "source": source,
                "config": directive("config"),
                "exec": directive("exec"),
                "redact_error": "redact-error" in header,
                "expected": expected,
                "usable": not NEEDS_CATALOG.search(source),
            }
        )
    return cases


CASES = load_cases()
USABLE = [c for c in CASES if c["usable"]]


def test_the_corpus_has_hostile_cells_to_run() -> None:
    names = {c["name"] for c in USABLE}
    for expected in ["infinite_loop", "infinite_loop_caught", "memory_bomb", "memory_bomb_small_objects",
                     "deep_recursion", "dynamic_import_via_eval", "json_output_cycles", "non_json_values",
                     "sandbox_surface", "unavailable_globals"]:
        assert expected in names, expected


_runtimes: dict[str, CodeMode] = {}


def runtime_for(config: dict[str, Any]) -> CodeMode:
    key = json.dumps(config, sort_keys=True)
    if key not in _runtimes:
        _runtimes[key] = CodeMode(config={"tools": {"codeMode": config}}, session="conformance-session")
    return _runtimes[key]


@pytest.mark.parametrize("case", USABLE, ids=[c["name"] for c in USABLE])
def test_corpus_case(case: dict[str, Any]) -> None:
    async def main() -> None:
        cm = runtime_for(case["config"])
        r = (await cm.exec_json({"code": case["source"], **case["exec"]})).to_dict()
        for _ in range(60):
            if r["status"] != "waiting":
                break
            r = (await cm.wait(r["runId"])).to_dict()
        want = case["expected"]
        assert r["status"] == want["status"], r
        assert r.get("code") == want.get("code")
        assert r.get("value") == want.get("value")
        assert r.get("output") == want.get("output")
        if not case["redact_error"]:
            assert r.get("error") == want.get("error")
        assert (await cm.exec("return 1 + 1")).value == 2

    run(main())
