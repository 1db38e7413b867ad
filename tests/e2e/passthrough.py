"""`codemode serve` with code mode disabled (the book's contract V1, E1–E3), driven by Python's
official `mcp` client: the tools it lists are the upstream server's (compared with the same client
connected to `server-everything` directly: names, titles, descriptions, schemas, annotations — all
but `execution`), and a call's result is the server's own.

Usage: passthrough.py CODEMODE_BIN EVERYTHING_BIN CONFIG_FILE {stdio|http}
Exit status 0 on success; an AssertionError names what failed.
"""

from __future__ import annotations

import asyncio
import sys
from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from client import bound_url, http_session

import subprocess


@asynccontextmanager
async def stdio_session(command: str, args: list[str]):
    async with stdio_client(StdioServerParameters(command=command, args=args)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def dump(tools) -> list[dict]:
    # `execution` (the tasks extension's `taskSupport`) is the one field not forwarded: the MCP Rust
    # SDK codemode is built on does not model it, and the passthrough surface makes plain calls.
    return [t.model_dump(mode="json", exclude_none=True, exclude={"execution"}) for t in tools]


async def main() -> None:
    codemode, everything, config, transport = sys.argv[1:5]
    async with stdio_session(everything, ["stdio"]) as direct:
        upstream = (await direct.list_tools()).tools
        straight = await direct.call_tool("get-sum", {"a": 19, "b": 23})

    async def check(session: ClientSession) -> None:
        served = (await session.list_tools()).tools
        assert dump(served) == dump(upstream), "the served tools differ from the upstream server's"
        names = {t.name for t in served}
        assert "exec" not in names and "wait" not in names, names
        through = await session.call_tool("get-sum", {"a": 19, "b": 23})
        assert through.model_dump(mode="json") == straight.model_dump(mode="json"), (through, straight)
        bad = await session.call_tool("get-sum", {"a": "x"})
        assert bad.is_error, bad

    if transport == "stdio":
        async with stdio_session(codemode, ["serve", "--config", config]) as session:
            await check(session)
    else:
        proc = subprocess.Popen(
            [codemode, "serve", "--config", config, "--http", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            url = bound_url(proc)
            assert url, "codemode serve --http did not report its address"
            async with http_session(url) as session:
                await check(session)
        finally:
            proc.terminate()
            assert proc.wait(timeout=20) == 0, "codemode serve --http did not stop cleanly on SIGTERM"
    print(f"ok: passthrough {transport}")


if __name__ == "__main__":
    asyncio.run(main())
