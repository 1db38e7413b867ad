"""Per-cell and per-nested-call cost of the `codemode` Python package, next to the Rust API (the
`codemode bench` binary of the same build) and, when installed, smolagents' LocalPythonExecutor and
Pydantic's Monty on the same small tasks: a trivial cell, and a cell of CALLS nested calls to a
Python function (a nested call's cost is that cell's time over the trivial cell's, per call: long
enough that a cell's first call, which may wake sleeping threads, is not what is measured).

    python bench/python/bench.py [--codemode-bin PATH] [--samples N] [--json]

Numbers are medians of N samples on this machine, now; not assertions (`make bench-python`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from typing import Any, Callable


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def timed(fn: Callable[[], Any], samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


async def timed_async(fn: Callable[[], Any], samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        t = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t)
    return out


def add(a: int, b: int) -> int:
    return a + b


async def add_async(a: int, b: int) -> int:
    return a + b


# The calls of the nested-call cells (Monty allows 1,000 suspensions per session).
CALLS = 500
HUNDRED = f"let s = 0; for (let i = 0; i < {CALLS}; i++) s = await tools.add({{a: s, b: 1}}); return s"
HUNDRED_INLINE = f"let s = 0; for (let i = 0; i < {CALLS}; i++) s = await tools.add_inline({{a: s, b: 1}}); return s"
HUNDRED_ASYNC = f"let s = 0; for (let i = 0; i < {CALLS}; i++) s = await tools.add_async({{a: s, b: 1}}); return s"


async def codemode_rows(samples: int) -> dict[str, float]:
    from codemode import CodeMode, tool

    cm = CodeMode(
        tools=[
            tool(add, input_schema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
            tool(add, name="add_inline", inline=True, input_schema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
            tool(add_async, input_schema={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}),
        ],
        config={"tools": {"codeMode": {"timeoutMs": 30000}}},
    )
    assert (await cm.exec(HUNDRED)).value == CALLS
    assert (await cm.exec(HUNDRED_ASYNC)).value == CALLS
    trivial = median_us(await timed_async(lambda: cm.exec("return 1 + 1"), samples))
    hundred = median_us(await timed_async(lambda: cm.exec(HUNDRED), max(10, samples // 10)))
    hundred_inline = median_us(await timed_async(lambda: cm.exec(HUNDRED_INLINE), max(10, samples // 10)))
    hundred_async = median_us(await timed_async(lambda: cm.exec(HUNDRED_ASYNC), max(10, samples // 10)))
    return {
        "trivial_cell_us": trivial,
        "hundred_calls_us": hundred,
        "nested_call_us": (hundred - trivial) / CALLS,
        "nested_inline_call_us": (hundred_inline - trivial) / CALLS,
        "nested_async_call_us": (hundred_async - trivial) / CALLS,
    }


def rust_rows(binary: str, samples: int) -> dict[str, float] | None:
    try:
        out = subprocess.run(
            [binary, "bench", "--engine", "quickjs-wasi", "--samples", str(samples), "--json", "--concurrency", "1", "--seconds", "1"],
            capture_output=True, text=True, timeout=600, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        print(f"(no Rust API row: {e})", file=sys.stderr)
        return None
    rows = json.loads(out)
    row = next(r for r in rows if r["engine"] == "quickjs-wasi")
    return {"trivial_cell_us": row["execTrivialUs"]["p50"], "nested_call_us": row["nestedCallUs"]["p50"]}


def smolagents_rows(samples: int) -> dict[str, float] | None:
    try:
        from smolagents.local_python_executor import LocalPythonExecutor
    except ImportError:
        return None
    # One executor (its state persists between snippets, as in an agent's loop); `add` is a tool.
    ex = LocalPythonExecutor(additional_authorized_imports=[])
    ex.send_tools({"add": add})
    trivial = median_us(timed(lambda: ex("1 + 1"), samples))
    hundred = median_us(timed(lambda: ex(f"s = 0\nfor i in range({CALLS}):\n    s = add(a=s, b=1)\ns"), max(10, samples // 10)))
    return {"trivial_cell_us": trivial, "hundred_calls_us": hundred, "nested_call_us": (hundred - trivial) / CALLS}


def monty_rows(samples: int) -> dict[str, float] | None:
    """Monty runs snippets in a pool of worker processes; one checked-out session (a REPL: its
    state persists between snippets) runs every sample; `add` is an external function answered
    by this process."""
    try:
        import pydantic_monty as monty
    except ImportError:
        return None
    code = f"s = 0\nfor i in range({CALLS}):\n    s = add(s, 1)\ns"
    with monty.Monty() as pool:
        with pool.checkout() as session:
            assert session.feed_run("1 + 1") == 2
            trivial = median_us(timed(lambda: session.feed_run("1 + 1"), samples))
        # A session allows 1,000 suspensions (external calls): a fresh one for each sample, checked
        # out outside the timed part.
        times = []
        for _ in range(max(10, samples // 10)):
            with pool.checkout() as session:
                t = time.perf_counter()
                assert session.feed_run(code, external_lookup={"add": add}) == CALLS
                times.append(time.perf_counter() - t)
        hundred = median_us(times)
    return {"trivial_cell_us": trivial, "hundred_calls_us": hundred, "nested_call_us": (hundred - trivial) / CALLS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--codemode-bin", default=None, help="the `codemode` binary of the same build (Rust API row)")
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows: dict[str, dict[str, float] | None] = {"codemode (Python)": asyncio.run(codemode_rows(args.samples))}
    if args.codemode_bin:
        rows["codemode (Rust API)"] = rust_rows(args.codemode_bin, args.samples)
    rows["smolagents LocalPythonExecutor"] = smolagents_rows(args.samples)
    rows["pydantic-monty"] = monty_rows(args.samples)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'runtime':34} {'trivial cell (µs)':>18} {'nested call (µs)':>17} {'inline call (µs)':>17} {'async call (µs)':>16}")
    for name, row in rows.items():
        if row is None:
            print(f"{name:34} {'not installed':>18}")
            continue
        f = lambda k: f"{row[k]:.1f}" if k in row else "-"  # noqa: E731
        print(f"{name:34} {f('trivial_cell_us'):>18} {f('nested_call_us'):>17} {f('nested_inline_call_us'):>17} {f('nested_async_call_us'):>16}")


if __name__ == "__main__":
    main()
