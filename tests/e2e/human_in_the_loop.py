"""Approvals, cancellation and progress through `codemode serve`, driven by Python's
official `mcp` client.

Usage: human_in_the_loop.py CODEMODE_BIN CONFIG_FILE SNAPSHOT_DIR {stdio|http}

The config gates `demo_invoice_send` (`approvals.require`) with `approvals.timeoutMs` 600. Checks:
  - a client with the elicitation capability is asked (`elicitation/create`, naming the tool, the
    input and the cell line of the call) and its answer decides inside the same `exec`: accept runs the call, decline and cancel
    deny it (the cell catches a `nested_tool_failed` error);
  - a human who does not answer in time: the run comes back `waiting` with the call listed as
    `kind: "approval"`; `codemode approve` (another process) records the decision; `wait` runs it;
  - a client without elicitation: gated calls park at once; `codemode approve --deny` refuses;
  - (http) the approval endpoint `POST /approvals/{runId}/{requestId}` (bearer token from
    CODEMODE_APPROVAL_TOKEN): 401 without or with a wrong token, 400 for a bad body, 204 when
    recorded, 404 once the run settled;
  - with a progress token, the run's events arrive as progress notifications before the
    result: `text()` output and nested calls started/finished;
  - (stdio) a cancelled `exec` request (`notifications/cancelled`, sent by the client when
    the awaiting task is cancelled) aborts its run: nothing is left in the snapshot directory after
    the moment the run would have suspended.
Exit status 0 on success; an AssertionError (non-zero) names what failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
import subprocess
import sys
from contextlib import asynccontextmanager

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from client import HttpServer, result_json, run_files

CELL = (
    "try { const r = await tools.demo_invoice_send({ shipmentId: 'SHP-1002', amount: 400 }); "
    "return 'sent ' + r.invoiceId.slice(0, 4) } catch (e) { return e.code + ': ' + e.message }"
)


class Human:
    """An elicitation callback that answers with `action` after `delay` seconds, and records the
    questions and whether the server withdrew one (the callback is cancelled)."""

    def __init__(self, action: str, delay: float = 0.0):
        self.action = action
        self.delay = delay
        self.asked: list[str] = []
        self.withdrawn = 0

    async def __call__(self, context, params):
        self.asked.append(params.message)
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.withdrawn += 1
            raise
        return types.ElicitResult(action=self.action, content={} if self.action == "accept" else None)


class Logs:
    """A logging callback keeping the server's `notifications/message` texts."""

    def __init__(self):
        self.messages: list[str] = []

    async def __call__(self, params):
        self.messages.append(str(params.data))


@asynccontextmanager
async def session(transport: str, bin_path: str, config: str, snapdir: str, human, server=None, logs=None):
    if transport == "stdio":
        params = StdioServerParameters(
            command=bin_path,
            args=["serve", "--config", config, "--snapshot-dir", snapdir, "--demo-tools"],
            env={**os.environ, "RUST_LOG": "warn"},
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, elicitation_callback=human, logging_callback=logs) as s:
                await s.initialize()
                yield s
    else:
        async with streamable_http_client(server.url) as (read, write):
            async with ClientSession(read, write, elicitation_callback=human, logging_callback=logs) as s:
                await s.initialize()
                yield s


async def exec_cell(s: ClientSession) -> dict:
    return result_json(await s.call_tool("exec", {"code": CELL}))


def approve(bin_path: str, snapdir: str, run_id: str, request_id: int, deny: str | None = None) -> None:
    args = [bin_path, "approve", "--snapshot-dir", snapdir, run_id, str(request_id)]
    if deny is not None:
        args += ["--deny", deny]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"codemode approve failed: {out.stderr}"
    assert "approval decision recorded" in out.stderr, out.stderr


async def wait_until_settled(s: ClientSession, first: dict) -> dict:
    last = first
    for _ in range(40):
        if last["status"] != "waiting":
            return last
        last = result_json(await s.call_tool("wait", {"runId": last["runId"]}))
    raise AssertionError(f"run did not settle: {last}")


def parked_call(result: dict) -> dict:
    assert result["status"] == "waiting", result
    pending = [p for p in result["pendingToolCalls"] if p["kind"] == "approval"]
    assert len(pending) == 1, result
    assert pending[0]["toolId"] == "plugin:demo:demo_invoice_send", result
    return pending[0]


TOKEN = "test-token-0123456789abcdef"


def post_decision(server, run_id: str, request_id: int, body, token: str | None, origin: str | None = None) -> int:
    """POSTs a decision to the approval endpoint; returns the HTTP status."""
    base = server.url.rsplit("/mcp", 1)[0]
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"{base}/approvals/{run_id}/{request_id}", data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    if origin is not None:
        req.add_header("Origin", origin)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status
    except urllib.error.HTTPError as e:
        return e.code


async def main() -> None:
    bin_path, config, snapdir, transport = sys.argv[1:5]
    os.environ["CODEMODE_APPROVAL_TOKEN"] = TOKEN
    server = HttpServer(bin_path, config, snapdir) if transport == "http" else None
    # HTTP keeps runs in the server's memory store: `codemode approve` (a directory store) applies to
    # stdio, where runs live in the snapshot directory.
    try:
        for action, expected in [
            ("accept", "sent INV-"),
            ("decline", "nested_tool_failed: plugin:demo:demo_invoice_send: approval denied: declined by the user"),
            ("cancel", "nested_tool_failed: plugin:demo:demo_invoice_send: approval denied: cancelled by the user"),
        ]:
            human = Human(action)
            async with session(transport, bin_path, config, snapdir, human, server) as s:
                r = await exec_cell(s)
                assert r["status"] == "completed", r
                assert r["value"] == expected, r
                assert len(human.asked) == 1, human.asked
                assert "plugin:demo:demo_invoice_send" in human.asked[0], human.asked[0]
                assert "SHP-1002" in human.asked[0], "the human sees the input"
                assert "at line 1 of the cell" in human.asked[0], "the human sees where the call comes from"
        # Progress: text output and nested calls, as they happen.
        messages: list[str] = []

        async def on_progress(progress, total, message):
            messages.append(message or "")

        async with session(transport, bin_path, config, snapdir, None, server) as s:
            res = result_json(
                await s.call_tool(
                    "exec",
                    {"code": "text('hello'); const r = await tools.demo_echo({ x: 1 }); return r.x"},
                    progress_callback=on_progress,
                )
            )
            assert res["status"] == "completed" and res["value"] == 1, res
            assert "text: hello" in messages, messages
            assert any(m.startswith("call started: plugin:demo:demo_echo") for m in messages), messages
            assert any(m.startswith("call finished: plugin:demo:demo_echo") for m in messages), messages
        # A question still open when `approvals.timeoutMs` passes stays open, and the
        # late answer decides the parked call (nobody runs `codemode approve`).
        late = Human("accept", delay=1.5)
        async with session(transport, bin_path, config, snapdir, late, server) as s:
            first = await exec_cell(s)
            parked_call(first)
            done = await wait_until_settled(s, first)
            assert done["status"] == "completed" and done["value"] == "sent INV-", done
            assert len(late.asked) == 1 and late.withdrawn == 0, (late.asked, late.withdrawn)
        # Cancelling the request that asked withdraws the question (the client's
        # dialog closes: its callback is cancelled).
        never = Human("accept", delay=30.0)
        async with session(transport, bin_path, config, snapdir, never, server) as s:
            # Cancel the request once the question is open (however long the run took to get there).
            pending = asyncio.ensure_future(s.call_tool("exec", {"code": CELL}))
            for _ in range(200):
                if never.asked:
                    break
                await asyncio.sleep(0.05)
            assert never.asked, "the human was never asked"
            pending.cancel()
            try:
                await pending
                raise AssertionError("the exec should have been cancelled")
            except asyncio.CancelledError:
                pass
            for _ in range(50):
                if never.withdrawn:
                    break
                await asyncio.sleep(0.1)
            assert len(never.asked) == 1 and never.withdrawn == 1, (never.asked, never.withdrawn)
        if transport == "http":
            # Out-of-band approval over HTTP, for a client that cannot be asked.
            async with session(transport, bin_path, config, snapdir, None, server) as s:
                first = await exec_cell(s)
                call = parked_call(first)
                run_id, request_id = first["runId"], call["requestId"]
                assert post_decision(server, run_id, request_id, {"decision": "approve"}, None) == 401
                assert post_decision(server, run_id, request_id, {"decision": "approve"}, "wrong-token-0123456789") == 401
                assert post_decision(server, run_id, request_id, b"{not json", TOKEN) == 400
                # The endpoint applies /mcp's DNS-rebinding check (a foreign page).
                assert post_decision(server, run_id, request_id, {"decision": "approve"}, TOKEN, "http://evil.example") == 403
                # A decision for a request that is not parked is refused, not accepted.
                assert post_decision(server, run_id, request_id + 7, {"decision": "approve"}, TOKEN) == 404
                assert post_decision(server, run_id, request_id, {"decision": "approve"}, TOKEN) == 204
                done = await wait_until_settled(s, first)
                assert done["status"] == "completed" and done["value"] == "sent INV-", done
                assert post_decision(server, run_id, request_id, {"decision": "approve"}, TOKEN) == 404
        if transport == "stdio":
            # A human who answers too late: the call parks, another process approves it; the
            # human's answer, which comes after the run ended, is reported back as too late
            #, not dropped silently.
            slow = Human("accept", delay=5.0)
            logs = Logs()
            async with session(transport, bin_path, config, snapdir, slow, logs=logs) as s:
                first = await exec_cell(s)
                call = parked_call(first)
                approve(bin_path, snapdir, first["runId"], call["requestId"])
                done = await wait_until_settled(s, first)
                assert done["status"] == "completed" and done["value"] == "sent INV-", done
                for _ in range(100):
                    if any("came too late" in m for m in logs.messages):
                        break
                    await asyncio.sleep(0.1)
                assert any(f"request {call['requestId']}" in m and "came too late" in m for m in logs.messages), logs.messages
            # A client that cannot be asked: the call parks at once; a denial from the command line.
            async with session(transport, bin_path, config, snapdir, None) as s:
                first = await exec_cell(s)
                call = parked_call(first)
                approve(bin_path, snapdir, first["runId"], call["requestId"], deny="over budget")
                done = await wait_until_settled(s, first)
                assert done["value"] == (
                    "nested_tool_failed: plugin:demo:demo_invoice_send: approval denied: over budget"
                ), done
            # Cancelling the request aborts the run (timeoutMs is 2000: uncancelled, it would suspend
            # and be stored at that point).
            async with session(transport, bin_path, config, snapdir, None) as s:
                try:
                    await asyncio.wait_for(
                        s.call_tool("exec", {"code": "return await tools.demo_sleep({ ms: 8000 })"}), timeout=0.5
                    )
                    raise AssertionError("the exec should have been cancelled")
                except asyncio.TimeoutError:
                    pass
                await asyncio.sleep(3.0)
                assert run_files(snapdir) == [], f"a cancelled exec left a run behind: {run_files(snapdir)}"
                # The session still works.
                r = result_json(await s.call_tool("exec", {"code": "return 1"}))
                assert r["status"] == "completed", r
    finally:
        if server is not None:
            server.stop()
    print(f"ok: human in the loop {transport}")


if __name__ == "__main__":
    asyncio.run(main())
