"""A real MCP client (Python's official `mcp` package) driving `codemode serve`.

Usage: client.py CODEMODE_BIN CONFIG_FILE SNAPSHOT_DIR {stdio|http}

Checks, per transport:
  - the server lists exactly two tools, `exec` and `wait`, with `exec`'s description carrying the
    quick index and the `API` hint (contract §4, V3);
  - a cell calling an upstream MCP tool (server-everything's `echo`) completes;
  - the upstream server's progress notifications of a nested call reach the client as progress;
  - a cell that calls a slow tool comes back `waiting` (`pending_tools`) and `wait` resumes it to the
    final value (contract §6);
  - a second MCP session cannot resume the first session's run (run scope = session);
  - (HTTP) a session that closes with a suspended run has that run aborted;
  - unknown tool names are protocol errors.
Exit status 0 on success; an AssertionError (non-zero) names what failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def run_files(snapdir: str) -> list[str]:
    """Suspended (`.run`) and held (`.lock`) runs in a directory store; its lock and claim files aside."""
    try:
        return [f for f in os.listdir(snapdir) if f.endswith(".run") or f.endswith(".lock")]
    except FileNotFoundError:
        return []


def result_json(res) -> dict:
    """The CodeModeResult of an exec/wait call (structured content, or the text block)."""
    if res.structured_content is not None:
        return res.structured_content
    return json.loads(res.content[0].text)


def audit_args() -> list[str]:
    """`--audit FILE` when the Rust test asks for an audit log (it checks the file afterwards)."""
    path = os.environ.get("CODEMODE_E2E_AUDIT")
    return ["--audit", path] if path else []


@asynccontextmanager
async def stdio_session(bin_path: str, config: str, snapdir: str):
    params = StdioServerParameters(
        command=bin_path,
        args=["serve", "--config", config, "--snapshot-dir", snapdir, "--demo-tools", *audit_args()],
        env={**os.environ, "RUST_LOG": "warn"},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def bound_url(proc: subprocess.Popen) -> str | None:
    """The URL `codemode serve --http` reports on stderr once bound (None if it exits first)."""
    for line in proc.stderr:
        m = re.search(r"serving MCP at (http://\S+)", line)
        if m:
            return m.group(1)
    return None


class HttpServer:
    """`codemode serve --http 127.0.0.1:0` as a child process; the bound URL is read from stderr."""

    def __init__(self, bin_path: str, config: str, snapdir: str):
        self.proc = subprocess.Popen(
            [bin_path, "serve", "--config", config, "--snapshot-dir", snapdir, "--demo-tools", "--http", "127.0.0.1:0", *audit_args()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.url = bound_url(self.proc)
        assert self.url, "codemode serve --http did not report its address"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("codemode serve --http did not stop on SIGTERM")
        assert code == 0, f"codemode serve --http exited with {code} after SIGTERM"
        out = self.proc.stdout.read()
        assert out == "", f"unexpected stdout from the HTTP server: {out!r}"


@asynccontextmanager
async def http_session(url: str):
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def check_surface(session: ClientSession) -> None:
    tools = (await session.list_tools()).tools
    names = sorted(t.name for t in tools)
    assert names == ["exec", "wait"], f"model-visible tools should be exactly exec and wait, got {names}"
    exec_tool = next(t for t in tools if t.name == "exec")
    desc = exec_tool.description or ""
    assert "plugin:demo:demo_sleep" in desc, "exec description lacks the quick index"
    assert "API.read" in desc and "everything" in desc, "exec description lacks the MCP API hint"
    # Namespaces (contract §10): the demo plugin's and one declared in the config over the upstream server.
    assert "Shipping: Shipment helpers of the demo plugin." in desc, "exec description lacks the Shipping namespace"
    assert "Everything: Echo through the upstream server." in desc, "exec description lacks the declared namespace"
    lang = exec_tool.input_schema["properties"]["language"]
    assert lang.get("enum") == ["javascript", "typescript"], f"language should be a flat enum: {lang}"


async def check_upstream_call(session: ClientSession) -> None:
    res = await session.call_tool(
        "exec", {"code": 'const r = await MCP.everything.echo({message: "via codemode"}); return r.content[0].text'}
    )
    out = result_json(res)
    assert out["status"] == "completed", out
    assert "via codemode" in out["value"], out
    assert "mcp:everything:echo" in out["telemetry"]["nestedToolIds"], out
    # `.value` unwraps the same result (the upstream's text).
    out = result_json(await session.call_tool("exec", {"code": 'return await MCP.everything.echo.value({message: "unwrapped"})'}))
    assert out["status"] == "completed" and out["value"] == "Echo: unwrapped", out
    # Echo declares no output schema; after the calls above its `$api` header shows
    # the type learned from its results (the unwrapped text), marked observed.
    out = result_json(await session.call_tool("exec", {"code": 'const h = await MCP.everything.$api("echo"); return h.tools[0].observedOutput'}))
    learned = out.get("value") or {}
    assert learned.get("type") == "string" and learned.get("observed") is True and learned.get("results", 0) >= 2, out
    # ... and the next run's declaration file states it in echo's doc comment.
    out = result_json(await session.call_tool("exec", {"code": 'return await API.read("mcp/everything.d.ts")'}))
    assert "@observed `.value()` has returned string" in out["value"], out["value"][:2000]
    code = 'const e = await Everything.say("via a namespace"); const s = await Shipping.unpaidOver(20); return [e.content[0].text, s.length]'
    out = result_json(await session.call_tool("exec", {"code": code}))
    assert out["status"] == "completed", out
    assert "via a namespace" in out["value"][0] and out["value"][1] == 2, out
    assert out["telemetry"]["nestedToolIds"] == ["mcp:everything:echo", "plugin:demo:demo_shipping_list"], out


async def check_upstream_progress(session: ClientSession) -> None:
    """An upstream server's progress notifications of a nested call reach the client."""
    messages: list[str] = []

    async def on_progress(progress, total, message):
        messages.append(message or "")

    code = (
        'const r = await MCP.everything.$call("trigger-long-running-operation", { duration: 0.3, steps: 3 });'
        " return r.content[0].text"
    )
    out = result_json(await session.call_tool("exec", {"code": code}, progress_callback=on_progress))
    assert out["status"] == "completed", out
    relayed = [m.rsplit(": ", 1)[1] for m in messages if m.startswith("progress of mcp:everything:trigger-long-running-operation")]
    # In order; the last one may race the upstream's result and be dropped (best effort).
    assert relayed in (["1/3", "2/3", "3/3"], ["1/3", "2/3"]), messages


async def start_slow_run(session: ClientSession) -> str:
    # timeoutMs is 1000 in the config; demo_sleep takes 2500 ms, so exec must return `waiting`.
    res = await session.call_tool(
        "exec", {"code": 'const r = await tools.demo_sleep({ms: 2500}); text("resumed"); return r.slept * 2'}
    )
    out = result_json(res)
    assert out["status"] == "waiting", out
    assert out["reason"] == "pending_tools", out
    assert not res.is_error
    return out["runId"]


async def finish_run(session: ClientSession, run_id: str) -> None:
    for _ in range(50):
        res = await session.call_tool("wait", {"runId": run_id})
        out = result_json(res)
        if out["status"] != "waiting":
            break
    assert out["status"] == "completed", out
    assert out["value"] == 5000, out
    assert {"type": "text", "text": "resumed"} in out.get("output", []), out
    # The run is gone once completed.
    again = result_json(await session.call_tool("wait", {"runId": run_id}))
    assert again["status"] == "failed", again


async def check_foreign_session(session: ClientSession, run_id: str) -> None:
    res = await session.call_tool("wait", {"runId": run_id})
    out = result_json(res)
    assert res.is_error, out
    assert out["status"] == "failed", out
    assert "belongs to a different session" in out["error"], out


async def check_unknown_tool(session: ClientSession) -> None:
    try:
        res = await session.call_tool("tools.search", {})
    except Exception as e:  # the SDK raises on a JSON-RPC error
        assert "exec" in str(e) or "unknown" in str(e).lower(), e
        return
    assert res.is_error, f"calling an unknown tool should fail: {res}"


async def main() -> None:
    bin_path, config, snapdir, transport = sys.argv[1:5]
    if transport == "stdio":
        async with stdio_session(bin_path, config, snapdir) as a:
            await check_surface(a)
            await check_upstream_call(a)
            await check_upstream_progress(a)
            run_id = await start_slow_run(a)
            # A second session (a second server process sharing the snapshot directory) must not
            # be able to resume it.
            async with stdio_session(bin_path, config, snapdir) as b:
                await check_foreign_session(b, run_id)
            await finish_run(a, run_id)
            await check_unknown_tool(a)
        # A stdio session that closes with a suspended run: the run is aborted before the server
        # process exits (nobody could ever resume it: its scope is that session).
        async with stdio_session(bin_path, config, snapdir) as c:
            await start_slow_run(c)
            assert len(run_files(snapdir)) == 1, os.listdir(snapdir)
        for _ in range(50):
            if not run_files(snapdir):
                break
            await asyncio.sleep(0.1)
        assert not run_files(snapdir), f"a closed stdio session's run was kept: {os.listdir(snapdir)}"
    elif transport == "http":
        server = HttpServer(bin_path, config, snapdir)
        try:
            async with http_session(server.url) as a:
                await check_surface(a)
                await check_upstream_call(a)
                await check_upstream_progress(a)
                run_id = await start_slow_run(a)
                async with http_session(server.url) as b:
                    await check_foreign_session(b, run_id)
                await finish_run(a, run_id)
                await check_unknown_tool(a)
            # A session that closes with a suspended run: the run is aborted (its snapshot file
            # leaves the directory store) instead of holding a slot until its TTL.
            async with http_session(server.url) as c:
                await start_slow_run(c)
                assert len(run_files(snapdir)) == 1, os.listdir(snapdir)
            for _ in range(100):
                if not run_files(snapdir):
                    break
                await asyncio.sleep(0.1)
            assert not run_files(snapdir), f"a closed session's run was kept: {os.listdir(snapdir)}"
            # Its nested call was cancelled with it: no claim on it is left either.
            for _ in range(50):
                if not [f for f in os.listdir(snapdir) if ".calls-" in f]:
                    break
                await asyncio.sleep(0.1)
            assert not [f for f in os.listdir(snapdir) if ".calls-" in f], os.listdir(snapdir)
        finally:
            server.stop()
    else:
        raise SystemExit(f"unknown transport {transport!r}")
    print(f"ok: {transport}")


if __name__ == "__main__":
    asyncio.run(main())
