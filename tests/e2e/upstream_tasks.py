"""Upstream MCP tasks (SEP-2663, `io.modelcontextprotocol/tasks`) as suspend points of codemode runs,
on a fleet of `codemode serve --http` replicas sharing one Redis, driven by Python's official `mcp`
2.x client (sessionless 2026-07-28) like tests/e2e/fleet.py, whose pieces it uses.

Usage: upstream_tasks.py CODEMODE_BIN WORKDIR   (with the main test venv: `.venv`)

Starts its own `redis-server`, two upstream servers from tests/e2e/task_server.py (FastMCP 4 +
fastmcp-tasks, run with `.venv-tasks/bin/python`; they outlive the replicas): `tasks`, whose `work`
tool runs only as a task (mode `required`), and `opt`, whose `work` runs as a task when the client
opts in and as a plain call otherwise (mode `optional`); each journals `start <tag>`, `mode <tag>
task <taskId>` or `mode <tag> plain`, `done <tag>` and `cancelled <tag>`, and traces every HTTP
exchange with the replicas (WORKDIR/<server>.trace). Replicas in front of both servers (a short
lease, a 300 ms `exec`/`wait` budget), then checks:
  - a task call: `MCP.tasks.work` suspends the run (`waiting`) and completes it with the tool's
    result, run as an upstream task; `opt`'s `work` too is a task (the extension is declared by
    default); a plain tool of the same server answers at once;
  - the replica dies, the upstream task goes on: a cell awaiting `MCP.tasks.work` exec'd on
    replica 1, which is SIGKILLed once the task started upstream and its id is noted in the run's
    call log (Redis: `codemode:calls:<runId>`), before the task ends; `wait` on replica 2 at once
    completes the run with `worked a`: the resuming replica continued the same upstream task (the
    journal: one `start a`, one `done a`); the same with replica 4 killed and the run resumed on
    replica 3 past the dead replica's lease;
  - aborting a run cancels its upstream task (`tasks/cancel`): a run awaiting a 60 s task, aborted
    by its client cancelling a `wait` — on the replica running the call, and on another replica —
    is gone, and the upstream task is `cancelled` (the journal);
  - `tasks: false` for a server (replica 5): its calls are plain ones (no extension declared): the
    task-only `work` is refused upstream (-32021), which fails the run cleanly with
    `nested_tool_failed` naming the refusal, the tool never started; `opt`'s `work` runs as a plain
    call and completes; a plain tool still works.
UPSTREAM_TASKS_RUST_LOG sets the replicas' RUST_LOG (default `warn`).
Exit status 0 on success; an AssertionError names what failed. Everything started is stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleet import Redis, Replica, call, client

HERE = Path(__file__).resolve().parent
TASKS_PYTHON = HERE.parent.parent / ".venv-tasks" / "bin" / "python"
LEASE_MS = 1000
TIMEOUT_MS = 300  # `exec`'s and `wait`'s budget: a cell awaiting a task comes back `waiting`
WHO = "upstream-tasks-alice"
RUST_LOG = os.environ.get("UPSTREAM_TASKS_RUST_LOG", "warn")
# The answer of a `wait` while another `wait` resumes the run (codemode_core::scope::MSG_BUSY).
BUSY = "already being resumed"


class TaskServer:
    """tests/e2e/task_server.py in the tasks venv, its port and its journal."""

    def __init__(self, workdir: Path, name: str, mode: str):
        self.name = name
        self.port_file = workdir / f"{name}.port"
        self.journal = workdir / f"{name}.journal"
        self.log = workdir / f"{name}.log"
        self.trace = workdir / f"{name}.trace"  # every HTTP exchange with the replicas
        for stale in (self.port_file, self.journal, self.trace):
            stale.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [str(TASKS_PYTHON), str(HERE / "task_server.py"), str(self.port_file), str(self.journal), "--mode", mode,
             "--trace", str(self.trace)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
        )
        deadline = time.monotonic() + 60
        while not self.port_file.exists():
            assert self.proc.poll() is None, f"task server {name} exited: {self.log.read_text()}"
            assert time.monotonic() < deadline, f"task server {name} did not start: {self.log.read_text()}"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{int(self.port_file.read_text())}/mcp"

    def lines(self) -> list[str]:
        return self.journal.read_text().splitlines() if self.journal.exists() else []

    def count(self, line: str) -> int:
        return self.lines().count(line)

    def mode(self, tag: str) -> list[str] | None:
        """`["task", <taskId>]` or `["plain"]`: how the call tagged `tag` ran, once it started."""
        for line in self.lines():
            words = line.split()
            if words[:2] == ["mode", tag]:
                return words[2:]
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write_config(workdir: Path, name: str, servers: list[TaskServer], tasks: bool | None = None) -> Path:
    """A replica config: the Redis store with a short lease, a 300 ms budget, the task servers
    upstream (by URL), with `tasks: <tasks>` on each when given."""
    entries = {}
    for server in servers:
        entries[server.name] = {"url": server.url}
        if tasks is not None:
            entries[server.name]["tasks"] = tasks
    config = workdir / name
    config.write_text(json.dumps({
        "tools": {"codeMode": {"enabled": True, "timeoutMs": TIMEOUT_MS}},
        "snapshotStore": {"kind": "redis", "leaseMs": LEASE_MS},
        "mcpServers": entries,
    }, indent=2))
    return config


def call_log(redis: Redis, run_id: str) -> dict[str, dict]:
    """The run's call log in Redis: request id -> `{issuer, tool, digest, result?, raw?, note?}`."""
    flat = redis.command("HGETALL", f"codemode:calls:{run_id}") or []
    return {flat[i]: json.loads(flat[i + 1]) for i in range(0, len(flat), 2)}


async def until(what: str, check, timeout: float = 20.0, every: float = 0.02):
    """Polls `check()` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(every)


async def settle(url: str, first: dict, timeout: float = 60.0) -> dict:
    """`wait`s on `url` until the run settles: again while it answers `waiting`, or that another
    `wait` is resuming it."""
    last = first
    deadline = time.monotonic() + timeout
    while last["status"] == "waiting" or (last["status"] == "failed" and BUSY in last.get("error", "")):
        assert time.monotonic() < deadline, f"run did not settle: {last}"
        last = await call(url, WHO, "wait", {"runId": first["runId"]})
    return last


def structured(value) -> dict | None:
    """The `structuredContent` of an MCP tool result the cell returned as it is."""
    return value.get("structuredContent") if isinstance(value, dict) else None


async def exec_(url: str, code: str) -> dict:
    return await call(url, WHO, "exec", {"code": code})


async def noted(redis: Redis, run_id: str, task_id: str) -> str:
    """Waits until the run's call log notes the upstream task `task_id` (the replica running the call
    got the task and recorded it for whoever resumes the run); returns the note."""
    def find():
        return next((e["note"] for e in call_log(redis, run_id).values()
                     if task_id in (e.get("note") or "") and e.get("result") is None), None)
    try:
        return await until(f"the task {task_id} noted in the call log of {run_id}", find, timeout=10)
    except AssertionError as e:
        raise AssertionError(f"{e}: {call_log(redis, run_id)}") from None


async def abort(url: str, run_id: str) -> None:
    """Aborts the run the way a client does: it cancels a `wait` in flight (`notifications/cancelled`).
    A `wait` answers `waiting` after the 300 ms budget, so the cancel may come too late (or before
    the request arrived): tried again until the run is gone."""
    for _ in range(40):
        async with client(url, WHO) as c:
            pending = asyncio.create_task(c.call_tool("wait", {"runId": run_id}))
            await asyncio.sleep(0.1)
            pending.cancel()
            try:
                await pending
            except asyncio.CancelledError:
                pass
        after = await call(url, WHO, "wait", {"runId": run_id})
        if after["status"] == "failed" and "unavailable" in after.get("error", ""):
            return
        assert after["status"] == "waiting" or BUSY in after.get("error", ""), f"run ended otherwise: {after}"
    raise AssertionError(f"the run {run_id} could not be aborted")


async def task_calls(r: list[Replica], tasks: TaskServer, opt: TaskServer) -> None:
    pong = await exec_(r[0].url, "const p = await MCP.tasks.ping({}); return p.structuredContent.result")
    assert pong["status"] == "completed" and pong["value"] == "pong", pong
    first = await exec_(r[0].url, "return await MCP.tasks.work({ ms: 800, tag: 'a0' })")
    assert first["status"] == "waiting", f"a cell awaiting an upstream task did not suspend: {first}"
    done = await settle(r[0].url, first)
    assert done["status"] == "completed" and structured(done.get("value")) == {"result": "worked a0"}, done
    assert (tasks.mode("a0") or [""])[0] == "task", f"the call did not run as an upstream task: {tasks.lines()}"
    assert tasks.count("start a0") == 1 and tasks.count("done a0") == 1, tasks.lines()
    # A tool that may run as a task does, when the extension is declared (the default).
    first = await exec_(r[1].url, "const w = await MCP.opt.work({ ms: 800, tag: 'o1' }); return w.structuredContent.result")
    done = await settle(r[2].url, first)
    assert done["status"] == "completed" and done["value"] == "worked o1", done
    assert (opt.mode("o1") or [""])[0] == "task", f"an optional-task tool ran as a plain call: {opt.lines()}"
    print("ok: a nested call answered with an upstream task suspends the run and completes it (task-only and optional-task tools)")


async def killed_replica(victim: Replica, resumer: Replica, redis: Redis, tasks: TaskServer, tag: str,
                         ms: int, after_lease: bool) -> str:
    """A cell awaiting `work` exec'd on `victim`, SIGKILLed once the task started upstream and is
    noted in the run's call log, before it ends; resumed on `resumer` at once (it waits for the dead
    replica's liveness to lapse) or past the dead replica's lease (`after_lease`). Returns the note."""
    first = await exec_(victim.url, f"return await MCP.tasks.work({{ ms: {ms}, tag: '{tag}' }})")
    assert first["status"] == "waiting", first
    await until(f"`start {tag}` in the journal", lambda: f"start {tag}" in tasks.lines())
    mode = await until(f"`mode {tag}` in the journal", lambda: tasks.mode(tag))
    assert mode[0] == "task", f"not run as a task: {tasks.lines()}"
    note = await noted(redis, first["runId"], mode[1])
    assert f"done {tag}" not in tasks.lines(), "the task ended before the replica could be killed (slow machine?)"
    # The replica the call log names as the call's issuer: the victim's id in the fleet.
    issuer = next(e["issuer"] for e in call_log(redis, first["runId"]).values() if e.get("note") == note)
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    assert f"done {tag}" not in tasks.lines(), "the task ended before the replica was killed (slow machine?)"
    if after_lease:
        # Past the dead replica's lease: its liveness key (`replica:<id>`, set with the lease) expired
        # in Redis; the run is taken as it was left.
        await until("the dead replica's liveness key to expire",
                    lambda: redis.command("EXISTS", f"codemode:replica:{issuer}") == 0, timeout=30)
        assert f"done {tag}" not in tasks.lines(), "the task ended before the run was resumed (slow machine?)"
    done = await settle(resumer.url, first)
    assert done["status"] == "completed" and structured(done.get("value")) == {"result": f"worked {tag}"}, \
        f"the run resumed on replica {resumer.n} did not get the upstream task's result: {done}"
    assert tasks.count(f"start {tag}") == 1, f"the upstream tool ran again: {tasks.lines()}"
    assert tasks.count(f"done {tag}") == 1, tasks.lines()
    return note


async def killed_replicas(r: list[Replica], spare: Replica, redis: Redis, tasks: TaskServer) -> None:
    note = await killed_replica(r[0], r[1], redis, tasks, "a", 2500, after_lease=False)
    print(f"ok: replica SIGKILLed while its call's upstream task ran (noted: {note}); the replica resuming "
          "the run at once continued the same task, the tool ran once")
    await killed_replica(spare, r[2], redis, tasks, "a2", 6000, after_lease=True)
    print("ok: the same, resumed past the dead replica's lease")


async def aborted(redis: Redis, tasks: TaskServer, runner: Replica, aborter: Replica, tag: str) -> None:
    """A cell awaiting a 60 s `work` exec'd on `runner`, aborted through `aborter` once the task
    started upstream: the task is cancelled upstream, the run is gone."""
    first = await exec_(runner.url, f"await MCP.tasks.work({{ ms: 60000, tag: '{tag}' }}); return 1")
    assert first["status"] == "waiting", first
    await until(f"`start {tag}` in the journal", lambda: f"start {tag}" in tasks.lines())
    mode = await until(f"`mode {tag}` in the journal", lambda: tasks.mode(tag))
    assert mode[0] == "task", f"not run as a task: {tasks.lines()}"
    await noted(redis, first["runId"], mode[1])
    await abort(aborter.url, first["runId"])
    await until(f"`cancelled {tag}` in the journal (tasks/cancel upstream)",
                lambda: f"cancelled {tag}" in tasks.lines(), timeout=15)
    gone = await call(runner.url, WHO, "wait", {"runId": first["runId"]})
    assert gone["status"] == "failed" and "unavailable" in gone.get("error", ""), f"aborted run still resumable: {gone}"
    assert f"done {tag}" not in tasks.lines() and tasks.count(f"start {tag}") == 1, tasks.lines()


async def abort_cancels(r: list[Replica], redis: Redis, tasks: TaskServer) -> None:
    await aborted(redis, tasks, runner=r[1], aborter=r[1], tag="b")
    print("ok: a run aborted on the replica running its call cancels the upstream task")
    await aborted(redis, tasks, runner=r[1], aborter=r[2], tag="b2")
    print("ok: a run aborted on another replica cancels the upstream task")


async def tasks_off(rep: Replica, tasks: TaskServer, opt: TaskServer) -> None:
    pong = await exec_(rep.url, "const p = await MCP.tasks.ping({}); return p.structuredContent.result")
    assert pong["status"] == "completed" and pong["value"] == "pong", pong
    # The task-only tool: refused upstream, the extension not being declared; a clean coded failure.
    refused = await settle(rep.url, await exec_(rep.url, "return await MCP.tasks.work({ ms: 100, tag: 'c' })"))
    assert refused["status"] == "failed" and refused.get("code") == "nested_tool_failed", refused
    error = refused.get("error", "")
    assert "-32021" in error or "tasks extension" in error or "io.modelcontextprotocol/tasks" in error, \
        f"the failure does not say why: {refused}"
    assert "start c" not in tasks.lines(), f"the tool ran: {tasks.lines()}"
    # A tool that may run as a task runs as a plain call.
    first = await exec_(rep.url, "const w = await MCP.opt.work({ ms: 800, tag: 'c2' }); return w.structuredContent.result")
    done = await settle(rep.url, first)
    assert done["status"] == "completed" and done["value"] == "worked c2", done
    assert opt.mode("c2") == ["plain"], f"`tasks: false`, but the call ran as a task: {opt.lines()}"
    print("ok: `tasks: false`: plain calls (a task-only tool refused cleanly: nested_tool_failed; "
          "an optional-task tool runs plainly)")


async def main() -> None:
    bin_path, workdir = sys.argv[1], Path(sys.argv[2])
    workdir.mkdir(parents=True, exist_ok=True)
    assert TASKS_PYTHON.exists(), f"{TASKS_PYTHON}: the tasks venv is missing (scripts/setup.sh)"
    redis = Redis(workdir)
    servers: list[TaskServer] = []
    replicas: list[Replica] = []
    try:
        servers = [TaskServer(workdir, "tasks", "required"), TaskServer(workdir, "opt", "optional")]
        tasks, opt = servers
        config = write_config(workdir, "upstream-tasks.json5", servers)
        plain = write_config(workdir, "upstream-tasks-off.json5", servers, tasks=False)
        replicas = [Replica(bin_path, config, redis, workdir, i + 1, rust_log=RUST_LOG) for i in range(3)]
        await task_calls(replicas, tasks, opt)
        # Replica 4 runs a call and is killed too (replicas 2 and 3 are left for the aborts).
        replicas.append(Replica(bin_path, config, redis, workdir, 4, rust_log=RUST_LOG))
        await killed_replicas(replicas, replicas[3], redis, tasks)
        await abort_cancels(replicas, redis, tasks)
        replicas.append(Replica(bin_path, plain, redis, workdir, 5, rust_log=RUST_LOG))
        await tasks_off(replicas[-1], tasks, opt)
        print("ok: upstream tasks")
    except BaseException:
        for rep in replicas:
            print(f"--- replica {rep.n} log ---\n{rep.log.read_text()[-4000:]}", file=sys.stderr)
        for server in servers:
            print(f"--- {server.name} journal ---\n{chr(10).join(server.lines())}", file=sys.stderr)
            print(f"--- {server.name} log ---\n{server.log.read_text()[-4000:]}", file=sys.stderr)
            print(f"--- {server.name}: HTTP exchanges in {server.trace}", file=sys.stderr)
        raise
    finally:
        for rep in replicas:
            rep.stop()
        for server in servers:
            server.stop()
        redis.stop()


if __name__ == "__main__":
    asyncio.run(main())
