"""Runs served as MCP tasks (SEP-2663, `io.modelcontextprotocol/tasks`) by a fleet of
`codemode serve --http` replicas sharing one Redis, driven by FastMCP 4's client with
`fastmcp-tasks` (sessionless 2026-07-28; each client identified by its `Authorization`).

Usage: fleet_tasks.py CODEMODE_BIN WORKDIR   (in the tasks venv: `.venv-tasks`, see scripts/setup.sh)

Starts its own `redis-server` and three replicas in front of `ledger_server.js` (the pieces of
tests/e2e/fleet.py), with a short store lease and a short `exec` budget, then checks:
  - a task survives the death of its driver: `exec` on replica 1 answers with a task (task id = run
    id) that replica 1 drives; `tasks/get` on replica 2 says `working`; replica 1 is SIGKILLed while
    its cell waits on its second slow read-only call; with nobody polling, one of the live replicas'
    sweeps takes the task over once the dead driver's claim lapses and drives it to `completed` with
    the cell's value (read on replica 2 afterwards); the side-effecting call the dead replica finished ran exactly once, the
    read-only call it had in flight was issued again with the same idempotency key, and exactly one
    process held the drive claim at a time (Redis) and logged driving the task to its end;
  - a task cancelled through replica 3 while replica 2 drives it is `cancelled` on every replica
    (also one started afterwards), stays cancelled past the claim's lease, never reaches its next
    call, and its run is gone (`wait` with its id, on any replica: unavailable).
FastMCP's client (through `mcp` 2.3.0) sends `tasks/*` without the `Mcp-Name: <taskId>` header
SEP-2663 asks for over HTTP; the replicas take it from the body, so the stock client is used as is.
Exit status 0 on success; an AssertionError names what failed. Everything started is stopped.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import fastmcp
import fastmcp_tasks
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks.client import _send_cancel, _send_get

import fleet
from fleet import Redis, Replica, calls_received, ledger_lines, write_config

LEASE_MS = fleet.LEASE_MS  # the store's `leaseMs`: the drive claim's lease too
TIMEOUT_MS = 300  # `exec`'s and `wait`'s budget: a cell with a slow call comes back `waiting`
WHO = "tasks-alice"
# Info lines of the task driver (crates/codemode-mcp/src/tasks.rs), the rest at `warn`.
RUST_LOG = "warn,codemode_mcp::tasks=info"


def tasks_client(url: str, who: str = WHO) -> fastmcp.Client:
    """A FastMCP client (`fastmcp_tasks` imported: it declares the tasks extension) identified by
    its `Authorization`."""
    transport = StreamableHttpTransport(url, headers={"Authorization": f"Bearer {who}"})
    return fastmcp.Client(transport, timeout=30)


async def get(c: fastmcp.Client, task_id: str):
    """`tasks/get` through `c` (whichever replica it is connected to)."""
    return await _send_get(c.session, task_id, 30)


def journal(ledger: Path) -> list[list[str]]:
    """The upstream's journal: `[tool, key, pid, idempotency key]` per call, as they arrived."""
    path = ledger.with_name(ledger.name + ".calls")
    return [l.split() for l in path.read_text().splitlines()] if path.exists() else []


def parent_of(pid: int) -> int | None:
    """The parent pid of a live process (which replica spawned an upstream server)."""
    try:
        m = re.search(r"^PPid:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


async def until(what: str, check, timeout: float = 20.0, every: float = 0.02):
    """Polls `check()` (sync or async) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(every)


class ClaimWatch:
    """Samples a task's drive claim in Redis (`<prefix>taskdriver:<task id>`, a hash: `holder` is
    `<pid>-<uuid>` of the driving process, `until` the end of its lease in Unix ms) every 30 ms:
    keeps the sequence of holders, when each was first seen, and the longest lease left seen."""

    # One round trip: the claim and Redis's clock (the replicas' clock: same machine).
    SAMPLE = ("local c = redis.call('HMGET', KEYS[1], 'holder', 'until') local t = redis.call('TIME') "
              "return {c[1] or '', c[2] or '', tostring(t[1] * 1000 + math.floor(t[2] / 1000))}")

    def __init__(self, redis: Redis, task_id: str):
        self.redis, self.task_id = redis, task_id
        self.holders: list[str | None] = []
        self.first_seen: dict[str, float] = {}  # holder -> time.monotonic()
        self.longest_left: dict[str, int] = {}  # holder -> ms
        self._task: asyncio.Task | None = None
        self.key: str | None = None

    async def _run(self) -> None:
        while True:
            if self.key is None:
                keys = await asyncio.to_thread(self.redis.command, "KEYS", f"*taskdriver:{self.task_id}")
                self.key = keys[0] if keys else None
            holder = None
            if self.key:
                h, until_ms, now_ms = await asyncio.to_thread(self.redis.command, "EVAL", self.SAMPLE, "1", self.key)
                if h:
                    holder = h
                    self.first_seen.setdefault(h, time.monotonic())
                    self.longest_left[h] = max(self.longest_left.get(h, 0), int(until_ms) - int(now_ms))
            if not self.holders or self.holders[-1] != holder:
                self.holders.append(holder)
            await asyncio.sleep(0.03)

    def start(self) -> "ClaimWatch":
        self._task = asyncio.create_task(self._run())
        return self

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def pids(self) -> list[int]:
        """The pids of the successive holders (a run of one holder counts once)."""
        out: list[int] = []
        for h in self.holders:
            if h is None:
                continue
            pid = int(h.split("-", 1)[0])
            if not out or out[-1] != pid:
                out.append(pid)
        return out


def log_lines(rep: Replica, task_id: str, text: str) -> list[str]:
    return [l for l in rep.log.read_text().splitlines() if text in l and task_id in l]


async def driver_dies(r: list[Replica], redis: Redis, ledger: Path, workdir: Path) -> None:
    release = workdir / "release-read-2"
    code = (
        "const p = await MCP.ledger.pay({ key: 'task-pay' });\n"
        "const a = await MCP.ledger.read({ key: 'task-read-1', ms: 400 });\n"
        f"const b = await MCP.ledger.read({{ key: 'task-read-2', ms: 400, until: {json.dumps(str(release))} }});\n"
        "const c = await MCP.ledger.read({ key: 'task-read-3', ms: 400 });\n"
        "return [p, a, b, c].map(x => x.structuredContent.key).join(' ');"
    )
    async with tasks_client(r[0].url) as c1, tasks_client(r[1].url) as c2, tasks_client(r[2].url) as c3:
        assert c1.protocol_version == "2026-07-28", c1.protocol_version
        task = await fastmcp_tasks.call_tool_task(c1, "exec", {"code": code})
        task_id = task.task_id
        assert task_id.startswith("cm_"), f"the task id is not a run id: {task_id}"
        assert task.create_result.status == "working", task.create_result
        assert log_lines(r[0], task_id, "exec answered as a task"), "replica 1 did not log the task"
        watch = ClaimWatch(redis, task_id).start()
        try:
            # Another replica sees the task (the record is in the store), and leaves it to its driver.
            seen = await get(c2, task_id)
            assert seen.status == "working" and seen.task_id == task_id, seen
            # The handle: replica 1's upstream received the second slow read (held by `until`), so
            # its cell got past the payment and the first read, both recorded in the call log.
            await until("the second read to reach the upstream", lambda: "read task-read-2" in calls_received(ledger))
            assert (await get(c3, task_id)).status == "working"
            assert ledger_lines(ledger).count("task-pay") == 1, ledger_lines(ledger)
            calls = journal(ledger)
            pay_pid = next(int(l[2]) for l in calls if l[:2] == ["pay", "task-pay"])
            read2_pid = next(int(l[2]) for l in calls if l[:2] == ["read", "task-read-2"])
            assert parent_of(pay_pid) == r[0].proc.pid and parent_of(read2_pid) == r[0].proc.pid, \
                "replica 1 did not run the cell's calls"
            await until("replica 1 to hold the drive claim", lambda: watch.pids() == [r[0].proc.pid], timeout=5)
            r[0].proc.send_signal(signal.SIGKILL)
            r[0].proc.wait()
            killed_at = time.monotonic()
            release.touch()
            # Nobody polls: a live replica's sweep finds the task whose driver's claim lapsed, takes
            # the claim and drives the run to its end (the claim is given up with the final record).
            await until("a live replica to take the task over, unpolled", lambda: len(watch.pids()) == 2, timeout=30)
            await until("the task's new driver to finish it", lambda: watch.holders[-1] is None, timeout=30)
            took = time.monotonic() - killed_at
            statuses: list[tuple[int, str]] = []
            final = await get(c2, task_id)
            statuses.append((2, final.status))
            assert final.status == "completed", f"{final.status}: {final.status_message} {final.error}"
            value = final.result["structuredContent"]
            assert value["status"] == "completed", value
            assert value["value"] == "task-pay task-read-1 task-read-2 task-read-3", value
            # The other replica agrees (the record is the fleet's).
            other = await get(c3 if statuses[-1][0] == 2 else c2, task_id)
            assert other.status == "completed" and other.result == final.result, other
            # Its driver gives the claim up once it wrote the final record.
            await until("the claim to be released", lambda: watch.holders[-1] is None, timeout=5)
        finally:
            await watch.stop()
    # Exactly once: the payment the dead replica made is not made again (nor even issued again);
    # the reads it finished are not issued again; the read it had in flight is issued again, by
    # another replica, with the same idempotency key.
    assert ledger_lines(ledger).count("task-pay") == 1, ledger_lines(ledger)
    calls = journal(ledger)
    got = [" ".join(l[:2]) for l in calls]
    assert got.count("pay task-pay") == 1, got
    assert got.count("read task-read-1") == 1, got
    assert got.count("read task-read-3") == 1, got
    read2 = [l for l in calls if l[:2] == ["read", "task-read-2"]]
    assert len(read2) == 2, f"the in-flight read-only call was not issued again once: {read2}"
    assert read2[0][3] == read2[1][3] and read2[0][3].startswith(f"{task_id}/"), f"idempotency keys: {read2}"
    # One driver at a time: the claim went from replica 1 to exactly one other replica, which made
    # the calls from there on, and that replica (only) logged driving the task to its end; nobody
    # lost the claim or had its run taken over.
    holders = watch.pids()
    assert len(holders) == 2 and holders[0] == r[0].proc.pid, f"claim holders: {watch.holders}"
    successor = next((rep for rep in r[1:] if rep.proc.pid == holders[1]), None)
    assert successor is not None, f"the claim went to no live replica: {watch.holders}"
    read3 = next(l for l in calls if l[:2] == ["read", "task-read-3"])
    assert parent_of(int(read2[1][2])) == successor.proc.pid and parent_of(int(read3[2])) == successor.proc.pid, \
        f"the calls after the kill were not made by replica {successor.n}: {calls}"
    finished = {rep.n: len(log_lines(rep, task_id, "task driven to completed")) for rep in r}
    assert finished == {rep.n: int(rep is successor) for rep in r}, f"'task driven to completed' per replica: {finished}"
    for rep in r:
        for bad in ("lost the task's claim", "taken over by another replica"):
            assert not log_lines(rep, task_id, bad), f"replica {rep.n}: {log_lines(rep, task_id, bad)}"
    # The drive claim is leased for the store's `leaseMs` (renewed every third of it), so a dead
    # driver's claim lapses within `leaseMs` and the next `tasks/get` on another replica takes it.
    for holder, left in watch.longest_left.items():
        assert left <= LEASE_MS + 50, (f"the drive claim of {holder} was leased for {left} ms, "
                                       f"not the store's leaseMs ({LEASE_MS} ms)")
    taken = next(t for h, t in watch.first_seen.items() if int(h.split("-", 1)[0]) == successor.proc.pid) - killed_at
    print(f"ok: driver SIGKILLed mid-run: replica {successor.n} took the task over {taken:.1f}s later without being "
          f"polled and completed it {took:.1f}s after the kill; paid once, the in-flight read issued again with its "
          f"key, one claim holder at a time")


async def cancelled_elsewhere(r: list[Replica], config: Path, redis: Redis, ledger: Path, workdir: Path) -> None:
    hold = workdir / "release-cancel-read"
    code = (
        f"await MCP.ledger.read({{ key: 'cancel-read', until: {json.dumps(str(hold))} }});\n"
        "const p = await MCP.ledger.pay({ key: 'cancel-pay' });\n"
        "return p.structuredContent.key;"
    )
    r2, r3 = r[1], r[2]
    async with tasks_client(r2.url) as c2, tasks_client(r3.url) as c3:
        task = await fastmcp_tasks.call_tool_task(c2, "exec", {"code": code})
        task_id = task.task_id
        assert task.create_result.status == "working", task.create_result
        assert log_lines(r2, task_id, "exec answered as a task"), "replica 2 did not log the task"
        watch = ClaimWatch(redis, task_id).start()
        try:
            await until("the held read to reach the upstream", lambda: "read cancel-read" in calls_received(ledger))
            read_pid = next(int(l[2]) for l in journal(ledger) if l[:2] == ["read", "cancel-read"])
            assert parent_of(read_pid) == r2.proc.pid, "replica 2 does not run the cell's call"
            await until("replica 2 to hold the drive claim", lambda: watch.pids() == [r2.proc.pid], timeout=5)
            assert (await get(c3, task_id)).status == "working"
            await _send_cancel(c3.session, task_id, 30)
            assert log_lines(r3, task_id, "task cancelled"), "replica 3 did not log the cancel"
            # At once, on the replica that drives it as on the one that cancelled it: cancelled, and
            # the run is gone (the cancelling replica aborted it for the fleet).
            for n, c in ((2, c2), (3, c3)):
                got = await get(c, task_id)
                assert got.status == "cancelled", f"replica {n}: {got}"
            for rep in (r2, r3):
                gone = await fleet.call(rep.url, WHO, "wait", {"runId": task_id})
                assert gone["status"] == "failed" and "unavailable" in gone["error"], f"replica {rep.n}: {gone}"
            # The driver (replica 2) learns it through the record at its next heartbeat: it stops
            # and gives the claim up.
            await until("replica 2 to stop driving the cancelled task", lambda: watch.holders[-1] is None, timeout=15)
            # A replica started now (the dead replica's stand-in) sees it cancelled as well; past the
            # claim's lease, with the held read released, it stays cancelled everywhere, nobody drives
            # it again, and the cell never got to its payment.
            r.append(Replica(fleet.BIN, config, redis, workdir, 4, RUST_LOG))
            r4 = r[3]
            hold.touch()
            await asyncio.sleep(LEASE_MS / 1000 * 1.5)
            async with tasks_client(r4.url) as c4:
                for n, c in ((2, c2), (3, c3), (4, c4)):
                    got = await get(c, task_id)
                    assert got.status == "cancelled", f"replica {n}, past the lease: {got}"
            for rep in (r2, r3, r4):
                gone = await fleet.call(rep.url, WHO, "wait", {"runId": task_id})
                assert gone["status"] == "failed" and "unavailable" in gone["error"], f"replica {rep.n}: {gone}"
            assert "pay cancel-pay" not in calls_received(ledger), "a cancelled task's cell went on"
            assert watch.pids() == [r2.proc.pid] and watch.holders[-1] is None, f"claim holders: {watch.holders}"
        finally:
            await watch.stop()
    for rep in (r2, r3, r4):
        assert not log_lines(rep, task_id, "task driven to"), f"replica {rep.n} drove a cancelled task on"
    print("ok: cancelled through replica 3 while replica 2 drove it: cancelled on every replica, stays "
          "cancelled, its run gone, its driver stopped, its next call never made")


async def main() -> None:
    bin_path, workdir = sys.argv[1], Path(sys.argv[2])
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in workdir.glob("release-*"):
        stale.unlink()
    shutil.rmtree(workdir / "redis", ignore_errors=True)  # no AOF of an earlier run
    ledger = workdir / "ledger.txt"
    for old in (ledger, ledger.with_name(ledger.name + ".calls")):
        old.unlink(missing_ok=True)
    config = write_config(workdir, ledger, timeout_ms=TIMEOUT_MS)
    started = time.monotonic()
    redis = Redis(workdir)
    fleet.BIN, fleet.REDIS_URL = bin_path, redis.url
    replicas: list[Replica] = []
    try:
        for i in range(3):
            replicas.append(Replica(bin_path, config, redis, workdir, i + 1, RUST_LOG))
        await driver_dies(replicas, redis, ledger, workdir)
        await cancelled_elsewhere(replicas, config, redis, ledger, workdir)
    except BaseException:
        for rep in replicas:
            print(f"--- replica {rep.n} log ---\n{rep.log.read_text()[-4000:]}", file=sys.stderr)
        raise
    finally:
        for rep in replicas:
            rep.stop()
        redis.stop()
    print(f"ok: fleet tasks ({time.monotonic() - started:.1f}s)")


if __name__ == "__main__":
    asyncio.run(main())
