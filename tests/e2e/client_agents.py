"""Clients are agents: one `codemode serve --http` whose config maps two bearer tokens to two
agents with different tool policies (`clients.list`), and requires known clients.

Usage: client_agents.py CODEMODE_BIN WORKDIR

For both protocol generations (the sessionless 2026-07-28 protocol and the 2025 handshake):
  - each client's `exec` description (tools/list) and `ALL_TOOLS` show its own agent's tools only,
    and a call of the other agent's tool fails like an unknown id;
  - a run one client suspended cannot be resumed by the other (`invalid_input`); its owner resumes
    it;
  - a client with an unknown token, or none, is refused.
Exit status 0 on success; an AssertionError names what failed. The server is stopped at the end.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx2 as httpx
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from client import HttpServer, result_json

SUPPORT = "support-token-0123456789abcdef"
OPS = "ops-token-0123456789abcdef"


def write_config(workdir: Path) -> Path:
    config = workdir / "clients.json5"
    config.write_text(json.dumps({
        "tools": {"codeMode": {"enabled": True, "timeoutMs": 2000}},
        "agents": {"list": [
            {"id": "support", "tools": {"allow": ["demo_customer_get", "demo_echo"]}},
            {"id": "ops", "tools": {"deny": ["demo_customer_get", "demo_invoice_*"]}},
        ]},
        "clients": {"requireKnownClients": True, "list": [
            {"name": "support-bot", "token": SUPPORT, "agent": "support"},
            {"name": "ops-bot", "token": OPS, "agent": "ops"},
        ]},
    }))
    return config


def client(url: str, token: str | None, mode: str) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60.0, read=60.0))
    return Client(streamable_http_client(url, http_client=http), mode=mode)


def leaves(e: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(e, BaseExceptionGroup):
        return [x for sub in e.exceptions for x in leaves(sub)]
    return [e]


PROBE = ("const ids = ALL_TOOLS.map((t) => t.id).sort(); "
         "let other; try { await tools.callValue('plugin:demo:demo_shipping_list', {}); other = 'called'; } "
         "catch (e) { other = String(e.message).includes('unknown tool id') ? 'unknown' : e.message; } "
         "return { ids, other };")


async def check(url: str, mode: str) -> None:
    async with client(url, SUPPORT, mode) as s, client(url, OPS, mode) as o:
        s_exec = next(t for t in (await s.list_tools()).tools if t.name == "exec").description or ""
        o_exec = next(t for t in (await o.list_tools()).tools if t.name == "exec").description or ""
        assert "demo_customer_get" in s_exec and "demo_shipping_list" not in s_exec, s_exec
        assert "demo_shipping_list" in o_exec and "demo_customer_get" not in o_exec, o_exec
        sp = result_json(await s.call_tool("exec", {"code": PROBE}))["value"]
        op = result_json(await o.call_tool("exec", {"code": PROBE}))["value"]
        assert sp["ids"] == ["plugin:demo:demo_customer_get", "plugin:demo:demo_echo"], sp
        assert sp["other"] == "unknown", sp
        assert "plugin:demo:demo_shipping_list" in op["ids"] and "plugin:demo:demo_customer_get" not in op["ids"], op
        assert op["other"] == "called", op
        first = result_json(await s.call_tool("exec", {"code": "await yield_control(); return 'mine'"}))
        assert first["status"] == "waiting", first
        stolen = result_json(await o.call_tool("wait", {"runId": first["runId"]}))
        assert stolen["status"] == "failed" and stolen.get("code") == "invalid_input", f"{mode}: {stolen}"
        done = result_json(await s.call_tool("wait", {"runId": first["runId"]}))
        assert done["status"] == "completed" and done["value"] == "mine", done
    for token in ["not-a-configured-token-0123", None]:
        try:
            async with client(url, token, mode) as x:
                r = await x.call_tool("exec", {"code": "return 1"})
            raise AssertionError(f"{mode}: an unknown client was served: {r}")
        except BaseException as e:  # the SDK raises it from inside its task group
            messages = [str(x) for x in leaves(e) if isinstance(x, MCPError)]
            assert messages and all("requireKnownClients" in m for m in messages), f"{mode}: {e!r}"
    print(f"ok: {mode}: each client sees and resumes only its agent's runs and tools; unknown clients refused")


async def main() -> None:
    bin_path, workdir = sys.argv[1], Path(sys.argv[2])
    workdir.mkdir(parents=True, exist_ok=True)
    config = write_config(workdir)
    server = HttpServer(bin_path, str(config), str(workdir / "runs"))
    try:
        for mode in ["auto", "legacy"]:
            await check(server.url, mode)
        print("ok: clients are agents")
    finally:
        server.stop()


if __name__ == "__main__":
    asyncio.run(main())
