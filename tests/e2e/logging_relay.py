"""`logging/setLevel` through `codemode serve`: the upstream servers' log messages
reach a client that asked for them, at its level, under the logger `mcp:<server>/<logger>`.

Usage: logging_relay.py CODEMODE_BIN CONFIG_FILE SNAPSHOT_DIR {stdio|http}

The config's upstream server is `tests/e2e/logging_server.js` (named `logger`), which logs when its
`say` tool is called. Checks: a client that set level `info` gets a `warning` message and not a
`debug` one; a client that never called `logging/setLevel` gets none.
Exit status 0 on success; an AssertionError (non-zero) names what failed.
"""

from __future__ import annotations

import asyncio
import sys

from human_in_the_loop import session
from client import HttpServer, result_json


class Logs:
    def __init__(self):
        self.got: list[tuple[str, str | None, str]] = []

    async def __call__(self, params):
        self.got.append((str(params.level), params.logger, str(params.data)))


async def say(s, level: str, text: str) -> None:
    r = result_json(await s.call_tool("exec", {"code": f"return await MCP.logger.say({{ level: '{level}', text: '{text}' }})"}))
    assert r["status"] == "completed", r


async def main() -> None:
    bin_path, config, snapdir, transport = sys.argv[1:5]
    server = HttpServer(bin_path, config, snapdir) if transport == "http" else None
    try:
        asked, silent = Logs(), Logs()
        async with session(transport, bin_path, config, snapdir, None, server, logs=asked) as s:
            await s.set_logging_level("info")
            await say(s, "debug", "too quiet")
            await say(s, "warning", "loud enough")
            for _ in range(50):
                if asked.got:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)
        assert asked.got == [("warning", "mcp:logger/app", "loud enough")], asked.got
        async with session(transport, bin_path, config, snapdir, None, server, logs=silent) as s:
            await say(s, "error", "nobody asked")
            await asyncio.sleep(0.5)
        assert silent.got == [], silent.got
    finally:
        if server is not None:
            server.stop()
    print(f"ok: logging relay over {transport}")


if __name__ == "__main__":
    asyncio.run(main())
