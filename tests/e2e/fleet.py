"""A fleet of `codemode serve --http` replicas sharing one Redis, driven by Python's
official `mcp` 2.x client (sessionless 2026-07-28; each client identified by its `Authorization`).

Usage: fleet.py CODEMODE_BIN WORKDIR [--load N]

Starts its own `redis-server` (AOF on) on a free loopback port in WORKDIR and three replicas in
front of `ledger_server.js` (an upstream MCP server whose side effects append to a ledger file),
then checks:
  - exec on replica 1, another client's `wait` refused on replica 2, `wait` on replica 3 completes;
  - a gated call parked on replica 1, approved through replica 2's approval endpoint, run by a
    `wait` on replica 3 — once (the ledger);
  - a run started on replica 1, aborted by its client cancelling a `wait` on replica 2, is gone on
    replica 3;
  - SIGKILL of the replica running a side-effecting call: the run fails on another replica with
    `nested_tool_failed` naming the tool, and the call never runs again — also for a tool the server
    labels `readOnlyHint` when the config does not trust it; a call of a tool the config makes
    read-only, lost the same way, is re-issued with the same idempotency key;
  - SIGSTOP of a replica driving a run, past its lease, then SIGCONT: another replica took the run
    over; the woken replica's answer is a coded failure (taken over), and no side effect ran twice;
  - Redis restarted (AOF): a suspended run survives; Redis stopped: a plain cell still completes, a
    cell that must suspend fails with a coded error naming the unreachable store, and the fleet
    recovers when Redis is back;
  - with --load N: N runs suspended across the replicas and resumed on random replicas: none lost,
    none delivered twice, no side effect twice (the ledger).
Exit status 0 on success; an AssertionError names what failed. Everything started is stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx2 as httpx
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

HERE = Path(__file__).resolve().parent
TOKEN = "fleet-approval-token-0123456789"
BIN = ""
REDIS_URL = ""
LEASE_MS = 1000


def write_config(workdir: Path, ledger: Path, timeout_ms: int = 1000) -> Path:
    """The replicas' config: a 1 s budget (`timeout_ms`), `charge` gated, the Redis store with a
    short lease, and the ledger server upstream (its `read` tool read-only by the config, its inputs
    unchecked)."""
    config = workdir / "fleet.json5"
    config.write_text(json.dumps({
        "tools": {"codeMode": {"enabled": True, "timeoutMs": timeout_ms}},
        "approvals": {"require": ["mcp:ledger:charge"], "timeoutMs": 1000},
        "snapshotStore": {"kind": "redis", "leaseMs": LEASE_MS},
        "mcpServers": {"ledger": {"command": "node", "args": [str(HERE / "ledger_server.js"), str(ledger)],
                                  "validateInputs": {"except": ["read"]},
                                  # The server's own readOnlyHint is not believed: the config says
                                  # which tool is read-only (a lost call of it may be issued again).
                                  "readOnly": ["read"]}},
    }))
    return config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    def __init__(self, workdir: Path):
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.025)
        raise AssertionError("redis-server did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def command(self, *args: str):
        """One Redis command (RESP2) on a connection of its own: its reply as str, int, None or a
        list of them (for tests that read the fleet's keys)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            s.sendall(f"*{len(args)}\r\n".encode() + b"".join(
                f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args))
            f = s.makefile("rb")

            def reply():
                line = f.readline().decode().rstrip("\r\n")
                kind, rest = line[0], line[1:]
                if kind == "+":
                    return rest
                if kind == "-":
                    raise AssertionError(f"redis: {rest}")
                if kind == ":":
                    return int(rest)
                if kind == "$":
                    return None if rest == "-1" else f.read(int(rest) + 2)[:-2].decode()
                if kind == "*":
                    return None if rest == "-1" else [reply() for _ in range(int(rest))]
                raise AssertionError(f"redis: unexpected reply {line!r}")

            return reply()


class Replica:
    def __init__(self, bin_path: str, config: Path, redis: Redis, workdir: Path, n: int, rust_log: str = "warn"):
        self.log = workdir / f"replica-{n}.log"
        self.n = n
        self.proc = subprocess.Popen(
            [bin_path, "serve", "--config", str(config), "--http", "127.0.0.1:0", "--store", redis.url],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
            env={**os.environ, "CODEMODE_APPROVAL_TOKEN": TOKEN, "RUST_LOG": rust_log},
        )
        self.url = None
        for _ in range(600):
            m = re.search(r"serving MCP at (http://\S+)", self.log.read_text())
            if m:
                self.url = m.group(1)
                break
            assert self.proc.poll() is None, f"replica {n} exited: {self.log.read_text()}"
            time.sleep(0.05)
        assert self.url, f"replica {n} did not report its address: {self.log.read_text()}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def client(url: str, who: str, timeout: float = 60.0) -> Client:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {who}"}, timeout=httpx.Timeout(timeout, read=timeout))
    return Client(streamable_http_client(url, http_client=http))


def result(res) -> dict:
    if res.structured_content is not None:
        return res.structured_content
    return json.loads(res.content[0].text)


async def call(url: str, who: str, tool: str, args: dict, timeout: float = 60.0) -> dict:
    async with client(url, who, timeout) as c:
        return result(await c.call_tool(tool, args))


def ledger_lines(ledger: Path) -> list[str]:
    return [l.split()[0] for l in ledger.read_text().splitlines()] if ledger.exists() else []


def calls_received(ledger: Path) -> list[str]:
    """The upstream's journal of calls as they arrived: `<tool> <key>` each."""
    journal = ledger.with_name(ledger.name + ".calls")
    return [" ".join(l.split()[:2]) for l in journal.read_text().splitlines()] if journal.exists() else []


def approve(url: str, run_id: str, request_id: int) -> int:
    base = url.rsplit("/mcp", 1)[0]
    req = urllib.request.Request(f"{base}/approvals/{run_id}/{request_id}", data=json.dumps({"decision": "approve"}).encode(),
                                 method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status
    except urllib.error.HTTPError as e:
        return e.code


async def settle(url: str, who: str, first: dict) -> dict:
    last = first
    for _ in range(60):
        if last["status"] != "waiting":
            return last
        last = await call(url, who, "wait", {"runId": last["runId"]})
    raise AssertionError(f"run did not settle: {last}")


async def across_replicas(r: list[Replica], ledger: Path) -> None:
    first = await call(r[0].url, "alice", "exec", {"code": "const x = await MCP.ledger.read({ key: 'r', ms: 1500 }); return x.structuredContent.tool"})
    assert first["status"] == "waiting", first
    stolen = await call(r[1].url, "mallory", "wait", {"runId": first["runId"]})
    assert stolen["status"] == "failed" and stolen.get("code") == "invalid_input", f"another client resumed it: {stolen}"
    done = await settle(r[2].url, "alice", first)
    assert done["status"] == "completed" and done["value"] == "read", done
    print("ok: exec on one replica, wait on another, another client refused")
    # A wrong argument fails in the guest; the upstream server never sees the call.
    code = "try { await MCP.ledger.pay({ key: 12345 }); return 'sent' } catch (e) { return [e.code, e.message] }"
    refused = await call(r[1].url, "alice", "exec", {"code": code})
    assert refused["value"][0] == "invalid_input" and "`/key` expected a string, got integer" in refused["value"][1], refused
    assert "12345" not in ledger_lines(ledger), "the upstream server received a call with a wrong input"
    # `validateInputs: { except: ["read"] }`: that tool's inputs go through unchecked.
    passed = await call(r[1].url, "alice", "exec", {"code": "const x = await MCP.ledger.read.value({ key: 5 }); return x.tool"})
    assert passed.get("value") == "read", passed
    print("ok: a wrong argument fails in the guest, nothing reaches the upstream server; an opted-out tool is not checked")


async def approval_across_replicas(r: list[Replica], ledger: Path) -> None:
    code = "const c = await MCP.ledger.charge({ key: 'approved-1' }); return c.structuredContent.key"
    first = await call(r[0].url, "alice", "exec", {"code": code})
    assert first["status"] == "waiting", first
    parked = [p for p in first["pendingToolCalls"] if p["kind"] == "approval"]
    assert parked and parked[0]["toolId"] == "mcp:ledger:charge", first
    assert ledger_lines(ledger).count("approved-1") == 0, "a gated call ran before its approval"
    status = approve(r[1].url, first["runId"], parked[0]["requestId"])
    assert status == 204, f"approval on replica 2: HTTP {status}"
    done = await settle(r[2].url, "alice", first)
    assert done["status"] == "completed" and done["value"] == "approved-1", done
    assert ledger_lines(ledger).count("approved-1") == 1, ledger_lines(ledger)
    # An operator approves from the command line, against the fleet's store.
    first = await call(r[2].url, "alice", "exec", {"code": code.replace("approved-1", "approved-2")})
    parked = [p for p in first["pendingToolCalls"] if p["kind"] == "approval"]
    out = subprocess.run([BIN, "approve", "--store", REDIS_URL, first["runId"], str(parked[0]["requestId"])],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    done = await settle(r[0].url, "alice", first)
    assert done["status"] == "completed" and done["value"] == "approved-2", done
    print("ok: parked on one replica, approved on another (HTTP endpoint, or codemode approve --store), run on a third, once")


async def abort_across_replicas(r: list[Replica], ledger: Path) -> None:
    first = await call(r[0].url, "dave", "exec", {"code": "await MCP.ledger.read({ key: 'abort', ms: 5000 }); return 1"})
    assert first["status"] == "waiting", first
    # The client cancels its `wait` on replica 2 (`notifications/cancelled`): the run is aborted for
    # the whole fleet.
    async with client(r[1].url, "dave") as c:
        pending = asyncio.create_task(c.call_tool("wait", {"runId": first["runId"]}))
        await asyncio.sleep(0.5)
        pending.cancel()
        try:
            await pending
        except asyncio.CancelledError:
            pass
        await asyncio.sleep(0.5)
    gone = await call(r[2].url, "dave", "wait", {"runId": first["runId"]})
    assert gone["status"] == "failed" and "unavailable" in gone["error"], f"aborted run still resumable: {gone}"
    print("ok: exec on one replica, aborted by the client from another, gone on a third")


async def killed_replica(r: list[Replica], ledger: Path) -> None:
    pay = "const p = await MCP.ledger.pay({ key: 'killed-pay', ms: 4000 }); return p.structuredContent.key"
    read = "const x = await MCP.ledger.read({ key: 'killed-read', ms: 2500 }); return x.structuredContent.key"
    # `erase` claims to be read-only (`readOnlyHint`) but writes: the config does not trust the
    # server, so a lost call of it must never be issued again.
    erase = "const x = await MCP.ledger.erase({ key: 'killed-erase', ms: 2500 }); return x.structuredContent.key"
    a = await call(r[0].url, "alice", "exec", {"code": pay})
    b = await call(r[0].url, "alice", "exec", {"code": read})
    c = await call(r[0].url, "alice", "exec", {"code": erase})
    assert a["status"] == "waiting" and b["status"] == "waiting" and c["status"] == "waiting", (a, b, c)
    r[0].proc.send_signal(signal.SIGKILL)
    r[0].proc.wait()
    # At once, while the dead replica's liveness key has not expired yet: the resuming replica
    # waits for it, then re-issues the read-only call it lost.
    reissued = await settle(r[2].url, "alice", b)
    assert reissued["status"] == "completed" and reissued["value"] == "killed-read", reissued
    # The upstream saw the read twice (the dead replica's call, and the one issued again), with one
    # idempotency key: `<runId>/<requestId>`.
    journal = ledger.with_name(ledger.name + ".calls")
    keys = [l.split()[3] for l in journal.read_text().splitlines() if l.split()[:2] == ["read", "killed-read"]]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0].startswith(f"{b['runId']}/"), f"idempotency keys: {keys}"
    mislabelled = await settle(r[2].url, "alice", c)
    assert mislabelled["status"] == "failed" and mislabelled.get("code") == "nested_tool_failed", mislabelled
    assert "mcp:ledger:erase" in mislabelled["error"], mislabelled
    assert calls_received(ledger).count("erase killed-erase") == 1, "a mislabelled call was issued again"
    # Past the dead replica's lease: the side-effecting call it ran is lost, never repeated.
    await asyncio.sleep(LEASE_MS / 1000 * 2)
    failed = await settle(r[1].url, "alice", a)
    assert failed["status"] == "failed" and failed.get("code") == "nested_tool_failed", failed
    assert "mcp:ledger:pay" in failed["error"], failed
    # The run is over: nothing can issue the payment again. The upstream received it once (the
    # dead replica's call, which may still be running there).
    assert calls_received(ledger).count("pay killed-pay") == 1, "a side-effecting call was issued again"
    print("ok: SIGKILL mid-call: side effect not repeated (also of a tool the server mislabels read-only), "
          "read-only call re-issued")


async def stopped_replica(r: list[Replica], ledger: Path) -> None:
    code = ("await MCP.ledger.read({ key: 'warm', ms: 1200 }); "
            "const p = await MCP.ledger.pay({ key: 'stopped-pay', ms: 300 }); "
            "await MCP.ledger.read({ key: 'slow', ms: 2500 }); return p.structuredContent.key")
    first = await call(r[1].url, "bob", "exec", {"code": code})
    assert first["status"] == "waiting", first
    await asyncio.sleep(1.3)
    # Replica 2 resumes it (its wait budget is the config's timeoutMs), pays, and is stopped while
    # it waits on the slow read, holding the run's lease.
    victim = asyncio.create_task(call(r[1].url, "bob", "wait", {"runId": first["runId"]}, timeout=120))
    # Stopped once the slow read reached the upstream: the cell got past the payment, so replica 2
    # had its result recorded (a nested call's result is recorded before the cell sees it). Stopped
    # as soon as the ledger showed the payment, a loaded machine could stop it before that.
    for _ in range(200):
        if "read slow" in calls_received(ledger):
            break
        await asyncio.sleep(0.05)
    assert "stopped-pay" in ledger_lines(ledger), "replica 2 did not pay"
    assert "read slow" in calls_received(ledger), "replica 2 paid but its cell did not go on to the slow read"
    r[1].proc.send_signal(signal.SIGSTOP)
    await asyncio.sleep(LEASE_MS / 1000 * 2.5)
    taken = await settle(r[2].url, "bob", first)
    assert taken["status"] == "completed" and taken["value"] == "stopped-pay", taken
    r[1].proc.send_signal(signal.SIGCONT)
    late = await asyncio.wait_for(victim, 60)
    assert late["status"] == "failed" and "taken over" in late.get("error", ""), f"the woken replica delivered: {late}"
    assert ledger_lines(ledger).count("stopped-pay") == 1, ledger_lines(ledger)
    print("ok: SIGSTOP past the lease: taken over, the woken replica's result void, paid once")


async def redis_failures(r: list[Replica], redis: Redis) -> None:
    first = await call(r[1].url, "carol", "exec", {"code": "await yield_control(); return 'survived'"})
    assert first["status"] == "waiting", first
    redis.stop()
    redis.start()
    # While Redis reloads its data it answers LOADING: the wait fails with "snapshot store
    # unreachable" and the run stays intact (the book's deployment page); a later wait resumes it.
    for _ in range(100):
        done = await settle(r[2].url, "carol", first)
        if not (done["status"] == "failed" and "snapshot store unreachable" in done.get("error", "")):
            break
        await asyncio.sleep(0.1)
    assert done["status"] == "completed" and done["value"] == "survived", done
    redis.stop()
    plain = await call(r[1].url, "carol", "exec", {"code": "return 6 * 7"})
    assert plain["status"] == "completed" and plain["value"] == 42, plain
    down = await call(r[2].url, "carol", "exec", {"code": "await yield_control(); return 1"})
    assert down["status"] == "failed" and down.get("code") == "internal_error" and "unreachable" in down["error"], down
    redis.start()
    for _ in range(40):
        again = await call(r[1].url, "carol", "exec", {"code": "await yield_control(); return 2"})
        if again["status"] == "waiting":
            break
        await asyncio.sleep(0.25)
    assert again["status"] == "waiting", again
    done = await settle(r[2].url, "carol", again)
    assert done["value"] == 2, done
    print("ok: Redis restarted with AOF keeps runs; Redis down: coded errors, recovery")


async def load(r: list[Replica], ledger: Path, n: int) -> None:
    clients = 20
    code = "const k = await yield_control(); const p = await MCP.ledger.pay({ key: KEY }); return p.structuredContent.key"
    values: dict[str, str] = {}

    async def one_client(ci: int) -> None:
        rnd = random.Random(ci)
        who = f"load-{ci}"
        # One connection per replica for this client, reused for all its runs.
        async with client(r[0].url, who) as c0, client(r[1].url, who) as c1, client(r[2].url, who) as c2:
            conns = [c0, c1, c2]
            for i in range(ci, n, clients):
                key = f"load-{i}"
                first = result(await rnd.choice(conns).call_tool("exec", {"code": code.replace("KEY", json.dumps(key))}))
                assert first["status"] == "waiting", first
                done = first
                while done["status"] == "waiting":
                    done = result(await rnd.choice(conns).call_tool("wait", {"runId": first["runId"]}))
                assert done["status"] == "completed", done
                assert first["runId"] not in values, "a run delivered twice"
                values[first["runId"]] = done["value"]
                assert done["value"] == key, (key, done)

    started = time.monotonic()
    await asyncio.gather(*(one_client(ci) for ci in range(clients)))
    elapsed = time.monotonic() - started
    lines = [l for l in ledger_lines(ledger) if l.startswith("load-")]
    assert len(values) == n, f"{n - len(values)} runs lost"
    assert len(lines) == n and len(set(lines)) == n, f"ledger: {len(lines)} lines, {len(set(lines))} keys for {n} runs"
    print(f"ok: load: {n} runs suspended and resumed on random replicas in {elapsed:.1f}s "
          f"({n / elapsed:.0f} suspend+resume/s), none lost, none twice")


async def main() -> None:
    bin_path, workdir = sys.argv[1], Path(sys.argv[2])
    n_load = int(sys.argv[sys.argv.index("--load") + 1]) if "--load" in sys.argv else 0
    workdir.mkdir(parents=True, exist_ok=True)
    ledger = workdir / "ledger.txt"
    config = write_config(workdir, ledger)
    redis = Redis(workdir)
    global BIN, REDIS_URL
    BIN, REDIS_URL = bin_path, redis.url
    replicas: list[Replica] = []
    try:
        replicas = [Replica(bin_path, config, redis, workdir, i + 1) for i in range(3)]
        await across_replicas(replicas, ledger)
        await approval_across_replicas(replicas, ledger)
        await abort_across_replicas(replicas, ledger)
        if n_load:
            await load(replicas, ledger, n_load)
        await stopped_replica(replicas, ledger)
        await redis_failures(replicas, redis)
        await killed_replica(replicas, ledger)
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
