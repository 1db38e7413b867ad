"""Measures `codemode serve` against the same upstream MCP servers called directly.

Usage: measure.py CODEMODE_BIN [ROUNDS]   (run by `make bench-mcp`, after scripts/setup.sh)

1. Per-call overhead: the same Python MCP client calls server-everything's `echo`
   - directly (one `tools/call` per echo),
   - through codemode, one `exec` cell per echo (`await MCP.everything.echo(...)`),
   - through codemode, 100 sequential echoes inside one cell (per-echo cost amortised),
   and reports medians and the ratios to the direct call, all in one run.
2. Surface size: the model-visible tool list (JSON as the client receives it) with
   server-everything + server-filesystem + server-memory attached, direct vs through codemode.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parent
BIN = ROOT / "node_modules" / ".bin"


@asynccontextmanager
async def session(command: str, args: list[str], env: dict[str, str] | None = None):
    params = StdioServerParameters(command=command, args=args, env={**os.environ, **(env or {})})
    with open(os.devnull, "w") as devnull:
        async with stdio_client(params, errlog=devnull) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                yield s


def tool_bytes(tools) -> int:
    return len(json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]).encode())


async def timed(n: int, fn) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t0) * 1e6)
    return out


async def main() -> None:
    codemode = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    work = Path(tempfile.mkdtemp(prefix="codemode-measure-"))
    (work / "files").mkdir()
    (work / "files" / "hello.txt").write_text("hello\n")
    servers = {
        "everything": {"command": str(BIN / "mcp-server-everything"), "args": []},
        "filesystem": {"command": str(BIN / "mcp-server-filesystem"), "args": [str(work / "files")]},
        "memory": {
            "command": str(BIN / "mcp-server-memory"),
            "args": [],
            "env": {"MEMORY_FILE_PATH": str(work / "memory.jsonl")},
        },
    }
    config = work / "codemode.json"
    config.write_text(json.dumps({"tools": {"codeMode": {"enabled": True}}, "mcpServers": servers}))

    # -- surface size ------------------------------------------------------------------------------
    direct_bytes, direct_tools = 0, 0
    for name, s in servers.items():
        async with session(s["command"], s["args"], s.get("env")) as c:
            tools = (await c.list_tools()).tools
            direct_tools += len(tools)
            direct_bytes += tool_bytes(tools)

    async with session(codemode, ["serve", "--config", str(config)], {"RUST_LOG": "error"}) as cm:
        cm_tools = (await cm.list_tools()).tools
        cm_bytes = tool_bytes(cm_tools)

    # -- per-call overhead -------------------------------------------------------------------------
    async with session(servers["everything"]["command"], []) as direct, session(
        codemode, ["serve", "--config", str(config)], {"RUST_LOG": "error"}
    ) as cm:
        echo = lambda: direct.call_tool("echo", {"message": "ping"})  # noqa: E731
        one = lambda: cm.call_tool(  # noqa: E731
            "exec", {"code": 'return (await MCP.everything.echo({message: "ping"})).content[0].text'}
        )
        loop_code = 'let t; for (let i = 0; i < 100; i++) t = await MCP.everything.echo({message: "ping"}); return t.content[0].text'
        loop = lambda: cm.call_tool("exec", {"code": loop_code})  # noqa: E731
        trivial = lambda: cm.call_tool("exec", {"code": "return 1"})  # noqa: E731
        check = await one()
        assert check.structured_content["status"] == "completed", check
        for f in (echo, one, loop, trivial):  # warm up
            await timed(10, f)
        d, o, l, t = [], [], [], []
        for _ in range(rounds // 10):  # interleave so machine noise hits all alike
            d += await timed(10, echo)
            o += await timed(10, one)
            t += await timed(10, trivial)
            l += [x / 100 for x in await timed(1, loop)]

    med = statistics.median
    report = {
        "rounds": rounds,
        "direct_echo_us": round(med(d), 1),
        "codemode_exec_one_echo_us": round(med(o), 1),
        "codemode_exec_trivial_us": round(med(t), 1),
        "codemode_echo_in_loop_us": round(med(l), 1),
        "ratio_exec_one_echo_vs_direct": round(med(o) / med(d), 2),
        "ratio_echo_in_loop_vs_direct": round(med(l) / med(d), 2),
        "surface_direct": {"tools": direct_tools, "bytes": direct_bytes, "approx_tokens": direct_bytes // 4},
        "surface_codemode": {"tools": len(cm_tools), "bytes": cm_bytes, "approx_tokens": cm_bytes // 4},
        "surface_reduction_pct": round(100 * (1 - cm_bytes / direct_bytes), 1),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
