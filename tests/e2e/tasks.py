"""Runs served as MCP tasks (SEP-2663, the `io.modelcontextprotocol/tasks` extension) by
`codemode serve`, driven by FastMCP 4's client with `fastmcp-tasks` (its venv: .venv-tasks, from
tests/e2e/requirements-tasks.txt).

Usage: tasks.py CODEMODE_BIN WORKDIR {stdio|http}

Writes its configs into WORKDIR and starts `codemode serve --demo-tools --config ...` itself: on
stdio one process per client (FastMCP's StdioTransport; the directory store, `--snapshot-dir`),
over HTTP one `--http 127.0.0.1:0` server per config (the memory store). The main config has
`timeoutMs` 100, gates `demo_invoice_send` (`approvals.require`) and has an upstream MCP server,
tests/e2e/task_upstream.py, whose `hold(marker)` notes in a file when it starts and when it is
cancelled. A client that imported `fastmcp_tasks` declares the tasks extension, so an `exec` that
would come back `waiting` is answered with a task the gateway drives itself. Checks:
  a. a cell of three sequential slow calls (`demo_sleep` 300 ms, each followed by `text()`)
     completes with ONE `call_tool` and no `wait`: value and the three outputs in order,
     `telemetry.waitCount` > 0 (the gateway's own resumes); through `call_tool_task` the explicit
     handle is a task, `working` at first with a status message naming `plugin:demo:demo_sleep`,
     then `completed` with the same exec result;
  b. a cell that finishes within `timeoutMs` is answered directly, not as a task (`call_tool_task`
     raises "did not run as a task"; `call_tool` gets the value);
  c. `tasks/cancel` mid-run: the upstream server sees its call cancelled (its marker file says
     "cancelled" after "started"), the task is `cancelled` and stays so, and the run is gone (`wait`
     on its id fails);
  d. a call parked for approval is answered in-task: the task goes `input_required` with one form
     elicitation keyed `approval:<requestId>` naming the tool; the client's elicitation handler is
     asked exactly once; accept sends the invoice, decline makes the cell see `nested_tool_failed`;
  e. with `snapshotTtlSeconds` 1 a completed task is still there right after it completed, and
     `tasks/get` on it fails (invalid params) once its TTL has passed;
  f. a made-up task id is refused (`tasks/get` and `tasks/cancel`: invalid params); (http) another
     client's task (other `Authorization`) is refused with the very same error, its `tasks/cancel`
     and `tasks/update` too, and the owner's task still completes.
Exit status 0 on success; an AssertionError (non-zero) names what failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import fastmcp
import fastmcp_tasks  # noqa: F401  (declares the tasks extension on every fastmcp.Client)
import mcp_types
from fastmcp.client.elicitation import ElicitResult
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from fastmcp.exceptions import ToolError
from fastmcp_tasks import ToolTask, call_tool_task
from fastmcp_tasks.client_models import ClientCreateTaskResult, UpdateTaskRequest, UpdateTaskRequestParams
from mcp import MCPError

HERE = Path(__file__).resolve().parent
INVALID_PARAMS = -32602

THREE_SLOW = (
    "const got = []; "
    "for (const i of [1, 2, 3]) { const r = await tools.demo_sleep({ ms: 300 }); text('slept ' + i); got.push(r.slept) } "
    "return got"
)
QUICK = "return 6 * 7"
SLOW = "const r = await tools.demo_sleep({ ms: 600 }); return r.slept"
BRIEF = "const r = await tools.demo_sleep({ ms: 150 }); return r.slept"
GATED = (
    "try { const r = await tools.demo_invoice_send({ shipmentId: 'SHP-1002', amount: 400 }); "
    "return 'sent ' + r.invoiceId.slice(0, 4) } catch (e) { return e.code }"
)


def hold_cell(marker: Path) -> str:
    return f"await MCP.upstream.hold({{ marker: {json.dumps(str(marker))} }}); return 'never'"


def write_configs(workdir: Path) -> tuple[Path, Path]:
    main = workdir / "tasks.json5"
    main.write_text(json.dumps({
        "tools": {"codeMode": {"enabled": True, "timeoutMs": 100}},
        "approvals": {"require": ["plugin:demo:demo_invoice_send"]},
        "mcpServers": {"upstream": {"command": sys.executable, "args": [str(HERE / "task_upstream.py")]}},
    }))
    ttl = workdir / "tasks-ttl.json5"
    ttl.write_text(json.dumps({"tools": {"codeMode": {"enabled": True, "timeoutMs": 100, "snapshotTtlSeconds": 1}}}))
    return main, ttl


class HttpServer:
    """`codemode serve --http 127.0.0.1:0` as a child process; its stderr goes to `log` (a thread
    copies it), and the bound URL is read from it."""

    def __init__(self, bin_path: str, config: Path, log: Path):
        self.log = log
        self.proc = subprocess.Popen(
            [bin_path, "serve", "--config", str(config), "--demo-tools", "--http", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": "info"},
        )
        self.bound = threading.Event()
        self.url: str | None = None
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()
        self.bound.wait(30)
        if not self.url:
            self.stop(check=False)
            raise AssertionError(f"codemode serve --http did not report its address:\n{tail(log)}")

    def _pump(self) -> None:
        with self.log.open("a", encoding="utf-8") as out:
            for line in self.proc.stderr:
                out.write(line)
                out.flush()
                m = re.search(r"serving MCP at (http://\S+)", line)
                if m and not self.url:
                    self.url = m.group(1)
                    self.bound.set()
        self.bound.set()

    def stop(self, check: bool = True) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("codemode serve --http did not stop on SIGTERM")
        self.pump.join(5)
        if check:
            assert code == 0, f"codemode serve --http exited with {code} after SIGTERM"


def tail(log: Path, chars: int = 4000) -> str:
    try:
        return log.read_text(encoding="utf-8", errors="replace")[-chars:]
    except FileNotFoundError:
        return "(no log)"


class Servers:
    """Where the clients connect: a fresh stdio server per client, or the running HTTP servers."""

    def __init__(self, transport: str, bin_path: str, workdir: Path, main: Path, ttl: Path):
        self.transport, self.bin_path, self.workdir = transport, bin_path, workdir
        self.configs = {"main": main, "ttl": ttl}
        self.logs: list[Path] = []
        self.http: dict[str, HttpServer] = {}

    def start(self) -> None:
        """Starts the HTTP servers (stdio servers start with their clients)."""
        if self.transport == "http":
            for name, config in self.configs.items():
                log = self.workdir / f"serve-http-{name}.log"
                log.write_text("")
                self.logs.append(log)
                self.http[name] = HttpServer(self.bin_path, config, log)

    def client(self, config: str = "main", token: str | None = None, human=None) -> fastmcp.Client:
        if self.transport == "stdio":
            n = len(self.logs)
            log = self.workdir / f"serve-stdio-{n}-{config}.log"
            log.write_text("")
            self.logs.append(log)
            where = StdioTransport(
                command=self.bin_path,
                args=["serve", "--demo-tools", "--config", str(self.configs[config]),
                      "--snapshot-dir", str(self.workdir / f"snapshots-{n}")],
                env={**os.environ, "RUST_LOG": "info"},
                log_file=log,
                keep_alive=False,
            )
        else:
            headers = {"Authorization": f"Bearer {token}"} if token else None
            where = StreamableHttpTransport(self.http[config].url, headers=headers)
        return fastmcp.Client(where, elicitation_handler=human, timeout=30)

    def stop(self) -> None:
        errors = []
        for server in self.http.values():
            try:
                server.stop()
            except AssertionError as e:
                errors.append(str(e))
        assert not errors, "; ".join(errors)


class Human:
    """A FastMCP elicitation handler answering `action`, recording the questions."""

    def __init__(self, action: str):
        self.action = action
        self.asked: list[str] = []

    async def __call__(self, message, response_type, params, context):
        self.asked.append(message)
        return ElicitResult(action=self.action, content={} if self.action == "accept" else None)


def exec_json(result) -> dict:
    """The exec result (its JSON) of a FastMCP CallToolResult."""
    assert result.structured_content is not None, f"no structured content: {result}"
    return result.structured_content


async def until(what: str, probe, timeout: float = 10.0, every: float = 0.05):
    """Polls `probe()` (sync or async) until it returns something truthy, or fails naming `what`."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = probe()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(every)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def marker_lines(marker: Path) -> list[str]:
    try:
        return marker.read_text(encoding="utf-8").split()
    except FileNotFoundError:
        return []


async def refused(what: str, call) -> MCPError:
    """Runs `call()`, which must fail with a JSON-RPC invalid-params error; returns it."""
    try:
        got = await call()
    except MCPError as e:
        assert e.code == INVALID_PARAMS, f"{what}: expected invalid params ({INVALID_PARAMS}), got {e.code}: {e.message}"
        return e
    raise AssertionError(f"{what}: was not refused, got {got!r}")


def made_up_task(client: fastmcp.Client, task_id: str) -> ToolTask:
    """A handle on `client` for a task id it did not get from this client's own `tools/call`."""
    fake = ClientCreateTaskResult.model_validate({
        "resultType": "task", "taskId": task_id, "status": "working",
        "createdAt": "2026-01-01T00:00:00.000Z", "lastUpdatedAt": "2026-01-01T00:00:00.000Z",
    })
    return ToolTask(client, "exec", fake)


async def check_sequential(servers: Servers, label: str) -> None:
    """a. Three slow calls in one `call_tool`; the same through the explicit task handle."""
    async with servers.client() as c:
        out = exec_json(await c.call_tool("exec", {"code": THREE_SLOW}))
        assert out["status"] == "completed", f"{label} a: {out}"
        assert out["value"] == [300, 300, 300], f"{label} a: {out}"
        texts = [o.get("text") for o in out["output"]]
        assert texts == ["slept 1", "slept 2", "slept 3"], f"{label} a: outputs {out['output']}"
        assert out["telemetry"]["waitCount"] > 0, f"{label} a: the gateway did not resume the run: {out['telemetry']}"
        assert out["telemetry"]["callCount"] == 3, f"{label} a: {out['telemetry']}"

        task = await call_tool_task(c, "exec", {"code": THREE_SLOW})
        created = task.create_result
        assert created.status == "working", f"{label} a: created {created}"
        assert task.task_id.startswith("cm_"), f"{label} a: task id {task.task_id!r} is not a run id"
        assert created.poll_interval_ms == 200, f"{label} a: pollIntervalMs {created.poll_interval_ms}"
        assert "plugin:demo:demo_sleep" in (created.status_message or ""), f"{label} a: created {created}"
        first = await task.status()
        assert first.status == "working", f"{label} a: first status {first}"
        assert "plugin:demo:demo_sleep" in (first.status_message or ""), f"{label} a: first status {first}"
        done = await task.wait(timeout=20)
        assert done.status == "completed", f"{label} a: {done}"
        assert done.poll_interval_ms is None, f"{label} a: a terminal task suggests polling: {done}"
        result = await task.result()
        out = exec_json(result)
        assert out["status"] == "completed" and out["value"] == [300, 300, 300], f"{label} a: {out}"
        assert [o.get("text") for o in out["output"]] == ["slept 1", "slept 2", "slept 3"], f"{label} a: {out}"
        assert out["telemetry"]["waitCount"] > 0, f"{label} a: {out['telemetry']}"
    print(f"ok: {label}: a run of three slow calls completed in one call_tool (waitCount {out['telemetry']['waitCount']})")


async def check_direct(servers: Servers, label: str) -> None:
    """b. A cell that does not suspend is answered directly."""
    async with servers.client() as c:
        try:
            task = await call_tool_task(c, "exec", {"code": QUICK})
            raise AssertionError(f"{label} b: a cell that never suspended became task {task.task_id}")
        except ToolError as e:
            assert "did not run as a task" in str(e) and "CallToolResult" in str(e), f"{label} b: {e}"
        out = exec_json(await c.call_tool("exec", {"code": QUICK}))
        assert out["status"] == "completed" and out["value"] == 42, f"{label} b: {out}"
    print(f"ok: {label}: a cell that finished within timeoutMs was answered directly")


async def check_cancel(servers: Servers, workdir: Path, label: str) -> None:
    """c. tasks/cancel mid-run reaches the upstream server; the task stays cancelled."""
    marker = workdir / f"hold-{servers.transport}.txt"
    marker.unlink(missing_ok=True)
    async with servers.client() as c:
        task = await call_tool_task(c, "exec", {"code": hold_cell(marker)})
        await until(f"{label} c: the upstream's hold started", lambda: "started" in marker_lines(marker))
        status = await task.status()
        assert status.status == "working", f"{label} c: {status}"
        assert "mcp:upstream:hold" in (status.status_message or ""), f"{label} c: {status}"
        await task.cancel()
        await until(f"{label} c: the upstream saw its call cancelled (marker file {marker})",
                    lambda: "cancelled" in marker_lines(marker))
        assert marker_lines(marker) == ["started", "cancelled"], f"{label} c: marker {marker_lines(marker)}"
        for n in (1, 2):
            status = await task.status()
            assert status.status == "cancelled", f"{label} c: status call {n} after the cancel: {status}"
        try:
            await task.result()
            raise AssertionError(f"{label} c: a cancelled task gave a result")
        except ToolError as e:
            assert "cancelled" in str(e), f"{label} c: {e}"
        # Cancelling again is harmless and changes nothing.
        await task.cancel()
        assert (await task.status()).status == "cancelled", f"{label} c: a second cancel changed the task"
        # The run is gone: resuming it fails.
        out = exec_json(await c.call_tool("wait", {"runId": task.task_id}, raise_on_error=False))
        assert out["status"] == "failed" and "unavailable" in out["error"], f"{label} c: the cancelled run could still be resumed: {out}"
    print(f"ok: {label}: a cancelled task cancelled its upstream call and stayed cancelled")


async def check_approval(servers: Servers, label: str) -> None:
    """d. A parked approval answered in-task: accept (explicit handle) and decline (call_tool)."""
    human = Human("accept")
    async with servers.client(human=human) as c:
        task = await call_tool_task(c, "exec", {"code": GATED})
        parked = await task.wait(state="input_required", timeout=10)
        requests = parked.input_requests or {}
        assert len(requests) == 1, f"{label} d: input requests {requests}"
        (key, request), = requests.items()
        assert re.fullmatch(r"approval:\d+", key), f"{label} d: key {key!r}"
        assert request.get("method") == "elicitation/create", f"{label} d: {request}"
        message = request.get("params", {}).get("message", "")
        assert "demo_invoice_send" in message and "SHP-1002" in message, f"{label} d: question {message!r}"
        assert task.task_id in message and f"request {key.split(':')[1]}" in message, f"{label} d: question {message!r}"
        assert "awaiting approval" in (parked.status_message or ""), f"{label} d: {parked}"
        assert human.asked == [], f"{label} d: asked before result(): {human.asked}"
        out = exec_json(await task.result())
        assert out["status"] == "completed" and str(out["value"]).startswith("sent "), f"{label} d accept: {out}"
        assert human.asked == [message], f"{label} d accept: asked {human.asked}"

    human = Human("decline")
    async with servers.client(human=human) as c:
        out = exec_json(await c.call_tool("exec", {"code": GATED}))
        assert out["status"] == "completed" and out["value"] == "nested_tool_failed", f"{label} d decline: {out}"
        assert len(human.asked) == 1 and "demo_invoice_send" in human.asked[0], f"{label} d decline: asked {human.asked}"
    print(f"ok: {label}: an approval was asked in-task once and decided the call (accept and decline)")


async def check_ttl(servers: Servers, label: str) -> None:
    """e. A task record expires at snapshotTtlSeconds from its creation."""
    async with servers.client("ttl") as c:
        started = time.monotonic()
        task = await call_tool_task(c, "exec", {"code": BRIEF})
        assert task.create_result.ttl_ms == 1000, f"{label} e: ttlMs {task.create_result.ttl_ms}"
        done = await task.wait(timeout=5)
        assert done.status == "completed", f"{label} e: {done}"
        assert exec_json(await task.result())["value"] == 150, f"{label} e: {done}"

        async def gone():
            try:
                await task.status()
                return None
            except MCPError as e:
                return e

        err = await until(f"{label} e: tasks/get still answers for an expired task", gone, timeout=10, every=0.1)
        assert err.code == INVALID_PARAMS, f"{label} e: {err.code}: {err.message}"
        assert time.monotonic() - started >= 0.9, f"{label} e: gone {time.monotonic() - started:.2f} s after creation"
    print(f"ok: {label}: a task expired after snapshotTtlSeconds")


async def check_foreign(servers: Servers, label: str) -> None:
    """f. Made-up and (http) another client's task ids are refused alike."""
    async with servers.client(token="tasks-client-a-0123456789") as a:
        made_up = made_up_task(a, "cm_00000000000000000000000000000000")
        unknown = await refused(f"{label} f: tasks/get of a made-up id", made_up.status)
        assert "unknown" in unknown.message, f"{label} f: {unknown.message}"
        await refused(f"{label} f: tasks/cancel of a made-up id", made_up.cancel)
        if servers.transport == "http":
            async with servers.client(token="tasks-client-b-0123456789") as b:
                task = await call_tool_task(a, "exec", {"code": SLOW})
                stolen = made_up_task(b, task.task_id)
                e = await refused(f"{label} f: client B's tasks/get of A's task", stolen.status)
                assert (e.code, e.message) == (unknown.code, unknown.message), \
                    f"{label} f: another client's task is told apart from an unknown one: {e.message!r} vs {unknown.message!r}"
                await refused(f"{label} f: client B's tasks/cancel of A's task", stolen.cancel)
                update = UpdateTaskRequest(params=UpdateTaskRequestParams(
                    task_id=task.task_id, input_responses={"approval:0": {"action": "accept"}}))
                await refused(f"{label} f: client B's tasks/update of A's task",
                              lambda: b.session.send_request(update, mcp_types.Result))
                out = exec_json(await task.result())
                assert out["status"] == "completed" and out["value"] == 600, f"{label} f: A's task after B's cancel: {out}"
            print(f"ok: {label}: another client's task id was refused like an unknown one")
    print(f"ok: {label}: a made-up task id was refused")


async def main() -> None:
    bin_path, workdir, transport = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    assert transport in ("stdio", "http"), f"transport must be stdio or http, not {transport!r}"
    workdir.mkdir(parents=True, exist_ok=True)
    for old in [*workdir.glob("snapshots-*"), *workdir.glob("serve-*.log"), *workdir.glob("hold-*.txt")]:
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    main_config, ttl_config = write_configs(workdir)
    servers = Servers(transport, bin_path, workdir, main_config, ttl_config)
    label = f"tasks/{transport}"
    started = time.monotonic()
    try:
        servers.start()
        await check_sequential(servers, label)
        await check_direct(servers, label)
        await check_cancel(servers, workdir, label)
        await check_approval(servers, label)
        await check_ttl(servers, label)
        await check_foreign(servers, label)
    except BaseException:
        for log in servers.logs:
            print(f"--- {log.name} ---\n{tail(log)}", file=sys.stderr)
        raise
    finally:
        servers.stop()
    print(f"ok: runs as MCP tasks over {transport} ({time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    asyncio.run(main())
