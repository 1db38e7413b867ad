"""Approval questions reach only the run's owner: two replicas of `codemode serve --http` on one
Redis, clients of the 2025 handshake protocol (asked with `elicitation/create`), each with a human
that answers differently.

Usage: approval_owners.py CODEMODE_BIN WORKDIR

For three pairs of clients C and D — both anonymous (no `Authorization`: they share the fleet's
anonymous run scope, where the runId is the capability), both presenting the same credential (one
scope, two sessions), and two different credentials — on one replica and across replicas:
  - C starts a run on replica A whose cell yields, then drives it with `wait` on replica B; the
    cell's first call is held by the upstream server (until the test releases it: a file, not a
    sleep);
  - meanwhile D, connected to replica B with a human who would decline, runs `exec return 1` there
    (a request of its own on the same replica, in the same scope for the first two pairs);
  - the call is released; the cell's next call is gated: the question must reach C's human (who
    accepts) and nobody else — D's human is never asked and never sees C's runId — and the call
    runs once (the upstream's ledger);
  - then the same with the roles swapped: D's run, D's human declines, C's human is never asked.
Exit status 0 on success; an AssertionError names what failed. Everything started is stopped.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fleet import Redis, Replica, calls_received, ledger_lines, result
from modern_clients import Human

HERE = Path(__file__).resolve().parent

def legacy(url: str, token: str | None, human: Human) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60.0, read=60.0))
    return Client(streamable_http_client(url, http_client=http), mode="legacy", elicitation_callback=human)


def write_config(workdir: Path, ledger: Path) -> Path:
    config = workdir / "owners.json5"
    config.write_text(json.dumps({
        "tools": {"codeMode": {"enabled": True, "timeoutMs": 30000}},
        "approvals": {"require": ["mcp:ledger:charge"], "timeoutMs": 20000},
        "snapshotStore": {"kind": "redis", "leaseMs": 2000},
        "mcpServers": {"ledger": {"command": "node", "args": [str(HERE / "ledger_server.js"), str(ledger)]}},
    }))
    return config


async def until_journaled(ledger: Path, entry: str) -> None:
    for _ in range(600):
        if entry in calls_received(ledger):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the upstream never received `{entry}`")


async def one_run(workdir: Path, ledger: Path, a: Replica, b: Replica, label: str,
                  owner: tuple[str | None, Human], other: tuple[str | None, Human]) -> None:
    """The owner's run starts on `a` and is driven on `b`, where the other client makes a request
    of its own while the run is between its calls."""
    gate = workdir / f"gate-{label}"
    key = f"owned-{label}"
    code = (f"await yield_control(); await MCP.ledger.read({{ key: 'hold-{label}', until: {json.dumps(str(gate))} }}); "
            f"try {{ const c = await MCP.ledger.charge({{ key: '{key}' }}); return c.structuredContent.key }} "
            f"catch (e) {{ return e.code + ': ' + e.message }}")
    (owner_token, owner_human), (other_token, other_human) = owner, other
    async with legacy(a.url, owner_token, owner_human) as oa, legacy(b.url, owner_token, owner_human) as ob, \
            legacy(b.url, other_token, other_human) as xb:
        first = result(await oa.call_tool("exec", {"code": code}))
        assert first["status"] == "waiting", f"{label}: {first}"
        driving = asyncio.create_task(ob.call_tool("wait", {"runId": first["runId"]}))
        await until_journaled(ledger, f"read hold-{label}")
        # The other client's request on the replica driving the run, while the run is held.
        plain = result(await xb.call_tool("exec", {"code": "return 1"}))
        assert plain["status"] == "completed" and plain["value"] == 1, f"{label}: {plain}"
        gate.write_text("go")
        done = result(await asyncio.wait_for(driving, 60))
    assert done["status"] == "completed", f"{label}: {done}"
    assert other_human.asked == [], f"{label}: the other client was asked: {other_human.asked}"
    assert len(owner_human.asked) == 1, f"{label}: the owner was asked {owner_human.asked}"
    assert first["runId"] in owner_human.asked[0] and "mcp:ledger:charge" in owner_human.asked[0], owner_human.asked
    if owner_human.action == "accept":
        assert done["value"] == key, f"{label}: {done}"
        assert ledger_lines(ledger).count(key) == 1, ledger_lines(ledger)
    else:
        assert done["value"].startswith("nested_tool_failed: ") and "declined by the user" in done["value"], done
        assert ledger_lines(ledger).count(key) == 0, ledger_lines(ledger)


async def main() -> None:
    bin_path, workdir = sys.argv[1], Path(sys.argv[2])
    workdir.mkdir(parents=True, exist_ok=True)
    ledger = workdir / "ledger.txt"
    config = write_config(workdir, ledger)
    redis = Redis(workdir)
    replicas: list[Replica] = []
    try:
        replicas = [Replica(bin_path, config, redis, workdir, i + 1) for i in range(2)]
        pairs = [("anonymous", None, None), ("one-credential", "shared-token", "shared-token"),
                 ("two-credentials", "token-c", "token-d")]
        for name, c_token, d_token in pairs:
            for where, (a, b) in [("one-replica", (replicas[0], replicas[0])),
                                  ("across-replicas", (replicas[0], replicas[1]))]:
                c_human, d_human = Human("accept"), Human("decline")
                await one_run(workdir, ledger, a, b, f"{name}-{where}-c", (c_token, c_human), (d_token, d_human))
                c_human, d_human = Human("accept"), Human("decline")
                await one_run(workdir, ledger, a, b, f"{name}-{where}-d", (d_token, d_human), (c_token, c_human))
                print(f"ok: {name}, {where}: each question reached only its run's owner")
        print("ok: approval questions reach only the run's owner")
    except BaseException:
        for rep in replicas:
            print(f"--- replica {rep.n} log ---\n{rep.log.read_text()[-4000:]}", file=sys.stderr)
        raise
    finally:
        for rep in replicas:
            rep.stop()
        redis.stop()


if __name__ == "__main__":
    asyncio.run(main())
