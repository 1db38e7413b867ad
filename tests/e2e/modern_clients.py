"""`codemode serve` with both generations of MCP clients, driven by two SDKs: Python's
official `mcp` 2.x high-level client (`mcp.Client`) and FastMCP 4's client (PydanticAI's).

Usage: modern_clients.py CODEMODE_BIN CONFIG_FILE SNAPSHOT_DIR {stdio|http}

The config gates `demo_invoice_send` (`approvals.require`) and sets `timeoutMs` 1000. For each
protocol generation — `mode="auto"`, which probes `server/discover` and negotiates the sessionless
2026-07-28 protocol, and `mode="legacy"`, the 2025-11-25 initialize handshake — checks:
  - the negotiated protocol version;
  - a cell that waits on a slow tool comes back `waiting`, and `wait` with its runId resumes it to the
    final value (under 2026-07-28 over HTTP every request used to be its own session, and the run was
    aborted 1–2 ms after it was returned);
  - a gated call is put to the human through the client's elicitation callback — as an
    `elicitation/create` request (legacy) or as an MRTR input request answered with the client's
    retry (2026-07-28) — and the answer decides it: accept runs the call, decline refuses it
    (`nested_tool_failed`), each asked exactly once;
  - (http, 2026-07-28) a run belongs to the client, not to the request: a client presenting other
    credentials (`Authorization`) cannot resume it.
Exit status 0 on success; an AssertionError (non-zero) names what failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import httpx2 as httpx
import mcp_types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from client import HttpServer, result_json

GATED = (
    "try { const r = await tools.demo_invoice_send({ shipmentId: 'SHP-1002', amount: 400 }); "
    "return 'sent ' + r.invoiceId.slice(0, 4) } catch (e) { return e.code + ': ' + e.message }"
)
SLOW = "const r = await tools.demo_sleep({ ms: 1800 }); return r.slept"


class Human:
    """An elicitation callback answering `action`, recording the questions."""

    def __init__(self, action: str):
        self.action = action
        self.asked: list[str] = []

    async def __call__(self, context, params):
        self.asked.append(params.message)
        return types.ElicitResult(action=self.action, content={} if self.action == "accept" else None)


def target(transport: str, bin_path: str, config: str, snapdir: str, server: HttpServer | None):
    if transport == "stdio":
        return StdioServerParameters(
            command=bin_path,
            args=["serve", "--config", config, "--snapshot-dir", snapdir, "--demo-tools"],
            env={**os.environ, "RUST_LOG": "warn"},
        )
    return server.url


async def settle(c: Client, first: dict) -> dict:
    last = first
    for _ in range(40):
        if last["status"] != "waiting":
            return last
        last = result_json(await c.call_tool("wait", {"runId": last["runId"]}))
    raise AssertionError(f"run did not settle: {last}")


async def check(transport: str, mode: str, bin_path: str, config: str, snapdir: str, server) -> None:
    where = target(transport, bin_path, config, snapdir, server)
    expected = "2026-07-28" if mode == "auto" else "2025-11-25"

    # A slow call: waiting, then resumed by `wait` with the runId.
    async with Client(where, mode=mode, elicitation_callback=Human("accept")) as c:
        assert c.protocol_version == expected, f"{transport}/{mode}: negotiated {c.protocol_version}"
        first = result_json(await c.call_tool("exec", {"code": SLOW}))
        assert first["status"] == "waiting", f"{transport}/{mode}: {first}"
        done = await settle(c, first)
        assert done["status"] == "completed" and done["value"] == 1800, f"{transport}/{mode}: {done}"

    # A gated call, accepted and declined through the client's elicitation callback.
    for action, want in [("accept", "sent "), ("decline", "nested_tool_failed: ")]:
        human = Human(action)
        async with Client(where, mode=mode, elicitation_callback=human) as c:
            out = await settle(c, result_json(await c.call_tool("exec", {"code": GATED})))
            assert out["status"] == "completed", f"{transport}/{mode}/{action}: {out}"
            assert out["value"].startswith(want), f"{transport}/{mode}/{action}: {out}"
            if action == "decline":
                assert "declined by the user" in out["value"], out
        assert len(human.asked) == 1, f"{transport}/{mode}/{action}: asked {human.asked}"
        assert "demo_invoice_send" in human.asked[0] and "SHP-1002" in human.asked[0], human.asked[0]


async def check_fastmcp(transport: str, mode: str, bin_path: str, config: str, snapdir: str, server) -> None:
    """The same with the other SDK: FastMCP 4's client (the one PydanticAI uses)."""
    import fastmcp
    from fastmcp.client.transports import StdioTransport

    asked: list[str] = []

    async def accept(message, response_type, params, context):
        asked.append(message)
        return {}

    if transport == "stdio":
        where = StdioTransport(
            command=bin_path,
            args=["serve", "--config", config, "--snapshot-dir", snapdir, "--demo-tools"],
            env={**os.environ, "RUST_LOG": "warn"},
        )
    else:
        where = server.url
    expected = "2026-07-28" if mode == "auto" else "2025-11-25"
    async with fastmcp.Client(where, mode=mode, elicitation_handler=accept) as c:
        assert c.protocol_version == expected, f"fastmcp {transport}/{mode}: negotiated {c.protocol_version}"
        last = (await c.call_tool("exec", {"code": SLOW})).structured_content
        assert last["status"] == "waiting", f"fastmcp {transport}/{mode}: {last}"
        for _ in range(40):
            if last["status"] != "waiting":
                break
            last = (await c.call_tool("wait", {"runId": last["runId"]})).structured_content
        assert last["status"] == "completed" and last["value"] == 1800, f"fastmcp {transport}/{mode}: {last}"
        gated = (await c.call_tool("exec", {"code": GATED})).structured_content
        for _ in range(40):
            if gated["status"] != "waiting":
                break
            gated = (await c.call_tool("wait", {"runId": gated["runId"]})).structured_content
        assert gated["status"] == "completed" and gated["value"].startswith("sent "), f"fastmcp {transport}/{mode}: {gated}"
    assert len(asked) == 1 and "demo_invoice_send" in asked[0], asked


async def check_ownership(server: HttpServer) -> None:
    """2026-07-28 over HTTP: a run is the client's (its credentials), not the request's."""
    def transport(token: str):
        http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx.Timeout(30.0, read=300.0))
        return streamable_http_client(server.url, http_client=http)

    async with Client(transport("client-a-0123456789")) as a, Client(transport("client-b-0123456789")) as b:
        assert a.protocol_version == "2026-07-28", a.protocol_version
        first = result_json(await a.call_tool("exec", {"code": SLOW}))
        assert first["status"] == "waiting", first
        stolen = result_json(await b.call_tool("wait", {"runId": first["runId"]}))
        assert stolen["status"] == "failed", f"another client resumed the run: {stolen}"
        assert "different session" in stolen["error"], stolen
        done = await settle(a, first)
        assert done["status"] == "completed" and done["value"] == 1800, done

    # The MRTR `requestState` of an approval question is bound to the client that was asked: another
    # client replaying it, or a forged one, is refused and decides nothing.
    async with Client(transport("client-a-0123456789"), elicitation_callback=Human("decline")) as a, Client(
        transport("client-b-0123456789"), elicitation_callback=Human("accept")
    ) as b:
        asked = await a.session.call_tool("exec", {"code": GATED}, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult), asked
        keys = list(asked.input_requests or {})
        assert len(keys) == 1 and keys[0].startswith("approval:"), keys
        accept = {keys[0]: {"action": "accept", "content": {}}}
        state = json.loads(asked.request_state)
        forged = json.dumps({"runId": state["runId"], "tag": "0" * 64})
        for who, replayed in [(b, asked.request_state), (a, forged)]:
            try:
                await who.session.call_tool("exec", {"code": GATED}, input_responses=accept, request_state=replayed)
                raise AssertionError("a foreign or forged requestState was accepted")
            except MCPError as e:
                assert "not one this server issued" in str(e), e
        # The real client answers: declined, so the call never ran.
        declined = {keys[0]: {"action": "decline"}}
        out = result_json(
            await a.session.call_tool("exec", {"code": GATED}, input_responses=declined, request_state=asked.request_state)
        )
        out = await settle(a, out)
        assert out["status"] == "completed" and "declined by the user" in out["value"], out


def sse_events(resp):
    """The events of an SSE response, as dicts of their fields."""
    ev: dict[str, str] = {}
    for line in resp.iter_lines():
        if line == "":
            if ev:
                yield ev
            ev = {}
            continue
        key, _, value = line.partition(":")
        ev[key] = value[1:] if value.startswith(" ") else value


def check_resume(server: HttpServer) -> None:
    """A dropped POST stream is resumed with Last-Event-ID (SEP-1699), also after the result was sent
    while the client was away: the result of a slow `exec` is not lost."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2025-11-25",
    }
    cell = "const t = Date.now(); while (Date.now() - t < 700) {} return 42"
    with httpx.Client(timeout=30) as c:
        init = c.post(server.url, headers=headers, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "resume", "version": "0"}},
        })
        assert init.status_code == 200, init.text
        h = {**headers, "Mcp-Session-Id": init.headers["mcp-session-id"]}
        c.post(server.url, headers=h, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        for pause, rpc_id in [(0.0, 7), (2.5, 8)]:
            # Read the priming event, then drop the stream mid-call.
            with c.stream("POST", server.url, headers=h, json={
                "jsonrpc": "2.0", "id": rpc_id, "method": "tools/call",
                "params": {"name": "exec", "arguments": {"code": cell}},
            }) as resp:
                first = next(sse_events(resp))
            last = first.get("id")
            assert last, f"no event id to resume from: {first}"
            # Reconnect at once (before the result) or after it was produced; poll as a client does
            # when a replay ends without the response (the stream's `retry` hint).
            time.sleep(pause)
            got = None
            for _ in range(20):
                with c.stream("GET", server.url, headers={**h, "Last-Event-ID": last}) as resp:
                    assert resp.status_code == 200, resp.status_code
                    for ev in sse_events(resp):
                        last = ev.get("id") or last
                        if f'"id":{rpc_id}' in ev.get("data", ""):
                            got = ev["data"]
                            break
                if got:
                    break
                time.sleep(0.3)
            assert got, f"pause {pause}: the result never arrived on a resumed stream"
            value = json.loads(got)["result"]["structuredContent"]
            assert value["status"] == "completed" and value["value"] == 42, f"pause {pause}: {value}"


async def main() -> None:
    bin_path, config, snapdir, transport = sys.argv[1:5]
    server = HttpServer(bin_path, config, snapdir) if transport == "http" else None
    try:
        for mode in ["auto", "legacy"]:
            await check(transport, mode, bin_path, config, snapdir, server)
            await check_fastmcp(transport, mode, bin_path, config, snapdir, server)
        if server is not None:
            await check_ownership(server)
            check_resume(server)
    finally:
        if server is not None:
            server.stop()
    print(f"ok: modern clients over {transport}")


if __name__ == "__main__":
    asyncio.run(main())
