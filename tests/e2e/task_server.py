"""An upstream MCP server over streamable HTTP whose tool runs as an MCP task (SEP-2663,
`io.modelcontextprotocol/tasks`), built with FastMCP 4 and `fastmcp-tasks`, for
tests/e2e/upstream_tasks.py.

Usage: task_server.py PORT_FILE JOURNAL_FILE [--mode required|optional] [--trace FILE]
       (with the tasks venv: `.venv-tasks/bin/python`)

Binds 127.0.0.1 on a free port, serves MCP at `http://127.0.0.1:PORT/mcp`, and writes PORT to
PORT_FILE (atomically) once the server answers HTTP. The tasks run in-process (Docket's `memory://`
backend): no Redis; the tasks live as long as this process.

Tools:
  - `work(ms: int, tag: str) -> str`: a task tool. With `--mode required` (the default) it only
    runs as a task: a call whose request did not opt in to the tasks extension gets the JSON-RPC
    error -32021 (HTTP 400) and the tool does not run. With `--mode optional` such a call is a
    plain (synchronous) one. It appends `start <tag>` to JOURNAL_FILE, then `mode <tag> task
    <taskId>` (run by the task worker, as that task) or `mode <tag> plain`, sleeps `ms`
    milliseconds, appends `done <tag>` and returns `worked <tag>`. Cancelled (`tasks/cancel`, or
    a plain call's request cancelled), it appends `cancelled <tag>` and re-raises.
  - `ping() -> str`: a plain tool (never a task), returns `pong`.

The wire (fastmcp-tasks 4.1.4): tasks exist only at protocol 2026-07-28 (sessionless; on a 2025
handshake session `capabilities.extensions` is stripped, `work` is refused with -32021 and
`tasks/*` are -32601). A client opts in per request, in
`params._meta["io.modelcontextprotocol/clientCapabilities"].extensions["io.modelcontextprotocol/tasks"]`
(also on every `tasks/*` request: without it, -32021). `tools/call` of `work` answers the flat
`{taskId, status: "working", createdAt, lastUpdatedAt, ttlMs, pollIntervalMs: 200, resultType:
"task"}`; `tasks/get` the same fields (`resultType: "complete"`) with, once `completed`, `result`:
the CallToolResult inlined; `tasks/cancel` an empty `{resultType: "complete"}`. An `Mcp-Name`
header on `tasks/*` is optional, checked against `taskId` when present (-32020 if it differs).
Tasks are scoped by the caller's access token; this server has no auth: one anonymous scope.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from datetime import timedelta
from pathlib import Path

import httpx2 as httpx
from docket.dependencies._base import current_execution
from fastmcp import FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension
from fastmcp_tasks.keys import parse_task_key
from starlette.middleware import Middleware

# How often a client should poll a task (`pollIntervalMs` in the task the server answers with).
POLL_INTERVAL = timedelta(milliseconds=200)


def build(journal: Path, mode: str) -> FastMCP:
    mcp = FastMCP("tasks")
    mcp.add_extension(TasksExtension(url="memory://", name=f"task-server-{os.getpid()}"))

    def note(line: str) -> None:
        with open(journal, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()

    @mcp.tool(task=TaskConfig(mode=mode, poll_interval=POLL_INTERVAL))
    async def work(ms: int, tag: str) -> str:
        """Works `ms` milliseconds (as a task), then returns `worked <tag>`."""
        note(f"start {tag}")
        execution = current_execution.get(None)
        if execution is not None:
            note(f"mode {tag} task {parse_task_key(execution.key)['client_task_id']}")
        else:
            note(f"mode {tag} plain")
        try:
            await asyncio.sleep(ms / 1000)
        except asyncio.CancelledError:
            note(f"cancelled {tag}")
            raise
        note(f"done {tag}")
        return f"worked {tag}"

    @mcp.tool
    async def ping() -> str:
        """Answers `pong`."""
        return "pong"

    return mcp


class Trace:
    """ASGI middleware appending every HTTP exchange to a file: the request's method, path, `Mcp-*`
    headers and body, then the response's status and body (`--trace FILE`, for debugging a client)."""

    def __init__(self, app, path: Path):
        self.app, self.path = app, path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {k.decode(): v.decode() for k, v in scope["headers"] if k.lower().startswith(b"mcp")}
        self.note(f">> {scope['method']} {scope['path']} {headers} {body.decode(errors='replace')}")
        delivered = False

        async def replay():
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def tap(message):
            if message["type"] == "http.response.start":
                self.note(f"<< {message['status']}")
            elif message["type"] == "http.response.body" and message.get("body"):
                self.note(f"<< {message['body'].decode(errors='replace').strip()}")
            await send(message)

        await self.app(scope, replay, tap)

    def note(self, line: str) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


async def announce(port: int, port_file: Path) -> None:
    """Writes the port to `port_file` once the server answers HTTP on it."""
    async with httpx.AsyncClient(timeout=1.0) as http:
        while True:
            try:
                await http.get(f"http://127.0.0.1:{port}/mcp")
                break
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    tmp = port_file.with_name(port_file.name + ".tmp")
    tmp.write_text(str(port))
    tmp.replace(port_file)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("port_file", type=Path)
    parser.add_argument("journal", type=Path)
    parser.add_argument("--mode", choices=["required", "optional"], default="required")
    parser.add_argument("--trace", type=Path, help="append every HTTP exchange to this file")
    args = parser.parse_args()
    args.journal.touch()
    mcp = build(args.journal, args.mode)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    announcer = asyncio.create_task(announce(port, args.port_file))
    try:
        middleware = [Middleware(Trace, path=args.trace)] if args.trace else None
        await mcp.run_http_async(show_banner=False, host="127.0.0.1", port=port, path="/mcp",
                                 log_level="warning", sockets=[sock], middleware=middleware)
    finally:
        announcer.cancel()


if __name__ == "__main__":
    asyncio.run(main())
