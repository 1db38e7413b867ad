"""`make fleet-demo`: a fleet of three `codemode serve --http` replicas on one Redis, behind HAProxy,
all on loopback ports, with a scripted MCP client talking only to the balancer.

Usage: fleet_demo.py CODEMODE_BIN [WORKDIR]

It starts `redis-server` (AOF on), three replicas (`--store redis://…`, upstream: the ledger MCP
server of tests/e2e/ledger_server.js) and `haproxy` round-robin in front of them, then: an `exec`
that suspends, a call parked for approval and approved through the balancer's approval endpoint,
`wait`s that land on other replicas, and a replica killed while it runs a call. Every step prints
which replica answered (HAProxy adds `X-Codemode-Replica`). Everything is stopped at the end,
whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from fleet import LEASE_MS, TOKEN, Redis, Replica, free_port, result, write_config

HERE = Path(__file__).resolve().parent


class Balancer:
    def __init__(self, workdir: Path, replicas: list[Replica]):
        self.port = free_port()
        servers = "\n".join(
            f"    server replica{r.n} {r.url.split('//')[1].split('/')[0]} check inter 500ms fall 1 rise 2"
            for r in replicas
        )
        cfg = workdir / "haproxy.cfg"
        cfg.write_text(f"""global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    option http-server-close
frontend mcp
    bind 127.0.0.1:{self.port}
    # The replicas accept their loopback names only (DNS-rebinding protection): the balancer
    # speaks to them as 127.0.0.1.
    http-request set-header Host 127.0.0.1
    http-request del-header Origin
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /mcp
    http-check expect status 200-499
    http-response set-header X-Codemode-Replica %s
{servers}
""")
        self.proc = subprocess.Popen(["haproxy", "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL,
                                     stderr=open(workdir / "haproxy.log", "w"))
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/mcp", timeout=0.5)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


class Seen:
    """Records which replica answered the client's `tools/call` request (a client also sends
    discovery and other requests, which the balancer may send elsewhere)."""

    def __init__(self) -> None:
        self.last = "?"

    async def on_response(self, response) -> None:
        try:
            body = response.request.content
        except Exception:
            return
        if b'"tools/call"' in body:
            self.last = response.headers.get("x-codemode-replica", "?")


async def step(url: str, who: str, tool: str, args: dict) -> tuple[dict, str]:
    seen = Seen()
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {who}"}, timeout=httpx.Timeout(60.0, read=60.0),
                             event_hooks={"response": [seen.on_response]})
    async with Client(streamable_http_client(url, http_client=http)) as c:
        out = result(await c.call_tool(tool, args))
    return out, seen.last


def show(what: str, out: dict, replica: str) -> None:
    brief = {k: out[k] for k in ("status", "value", "error", "runId") if k in out}
    if out.get("pendingToolCalls"):
        brief["pending"] = [f"{p['toolId']} ({p['kind']})" for p in out["pendingToolCalls"]]
    print(f"  [{replica:>8}] {what}: {json.dumps(brief)}")


async def demo(lb: Balancer, replicas: list[Replica], ledger: Path) -> None:
    print(f"fleet: redis + 3 replicas behind haproxy at {lb.url}\n")
    print("1. exec suspends on a slow read; wait lands on another replica")
    out, r = await step(lb.url, "alice", "exec", {"code": "const x = await MCP.ledger.read({ key: 'a', ms: 1500 }); return x.structuredContent"})
    show("exec", out, r)
    while out["status"] == "waiting":
        out, r = await step(lb.url, "alice", "wait", {"runId": out["runId"]})
        show("wait", out, r)

    print("\n2. a gated call parks; approved through the balancer; run by a wait elsewhere")
    out, r = await step(lb.url, "alice", "exec", {"code": "const c = await MCP.ledger.charge({ key: 'invoice-1' }); return c.structuredContent.key"})
    show("exec", out, r)
    parked = [p for p in out.get("pendingToolCalls", []) if p["kind"] == "approval"]
    if parked:
        base = lb.url.rsplit("/mcp", 1)[0]
        req = urllib.request.Request(f"{base}/approvals/{out['runId']}/{parked[0]['requestId']}",
                                     data=b'{"decision":"approve"}', method="POST")
        req.add_header("Authorization", f"Bearer {TOKEN}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=30) as res:
            print(f"  [{res.headers.get('x-codemode-replica', '?'):>8}] approve: HTTP {res.status}")
    while out["status"] == "waiting":
        out, r = await step(lb.url, "alice", "wait", {"runId": out["runId"]})
        show("wait", out, r)

    print("\n3. a replica is killed while it runs a side-effecting call")
    out, r = await step(lb.url, "bob", "exec", {"code": "const p = await MCP.ledger.pay({ key: 'pay-1', ms: 3000 }); return p.structuredContent.key"})
    show("exec", out, r)
    victim = next(x for x in replicas if f"replica{x.n}" == r)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    print(f"  killed replica{victim.n}; waiting past its lease ({LEASE_MS} ms)")
    await asyncio.sleep(LEASE_MS / 1000 * 2 + 1)
    while out["status"] == "waiting":
        out, r = await step(lb.url, "bob", "wait", {"runId": out["runId"]})
        show("wait", out, r)
    paid = ledger.read_text().split().count("pay-1") if ledger.exists() else 0
    print(f"  the ledger shows pay-1 {paid} time(s): never twice\n")

    print("4. another client cannot resume alice's runs")
    out, r = await step(lb.url, "alice", "exec", {"code": "await yield_control(); return 'mine'"})
    show("exec (alice)", out, r)
    stolen, r2 = await step(lb.url, "mallory", "wait", {"runId": out["runId"]})
    show("wait (mallory)", stolen, r2)
    done, r3 = await step(lb.url, "alice", "wait", {"runId": out["runId"]})
    show("wait (alice)", done, r3)


async def main() -> None:
    bin_path = sys.argv[1]
    workdir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="codemode-fleet-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ledger = workdir / "ledger.txt"
    config = write_config(workdir, ledger)
    redis = Redis(workdir)
    replicas: list[Replica] = []
    lb = None
    try:
        replicas = [Replica(bin_path, config, redis, workdir, i + 1) for i in range(3)]
        lb = Balancer(workdir, replicas)
        await demo(lb, replicas, ledger)
        print(f"\nlogs in {workdir}")
    finally:
        if lb:
            lb.stop()
        for rep in replicas:
            rep.stop()
        redis.stop()


if __name__ == "__main__":
    asyncio.run(main())
