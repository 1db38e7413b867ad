"""The Python API: exec/wait/approve/abort with typed results, Python functions
as tools, exceptions as the guest's ToolError, non-JSON results, limits, hooks and approvers,
cancellation, the sync wrapper, and configuration errors. Contract ids: contract V3 (exec/wait), contract §16 (error codes),
P5 (approvals), P6 (hooks), P7 (abort)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from typing import Any

import pytest

from codemode import CodeMode, CodeModeError, Result, SyncCodeMode, tool
from conftest import run, settle

FAST = {"tools": {"codeMode": {"timeoutMs": 300}}}


@tool(read_only=True)
def get_weather(city: str, unit: str = "c") -> dict:
    """Current weather of a city.

    More text that is not part of the description."""
    return {"city": city, "temp": 21 if unit == "c" else 70}


async def slow_total(items: list[int], delay: float = 0.6) -> int:
    """Adds numbers, slowly."""
    await asyncio.sleep(delay)
    return sum(items)


def test_a_cell_calls_sync_and_async_python_tools_and_resumes_through_wait() -> None:
    async def main() -> None:
        cm = CodeMode(tools=[get_weather, slow_total], config=FAST)
        assert cm.engine == "quickjs-wasi"
        assert cm.tool_ids() == ["plugin:python:get_weather", "plugin:python:slow_total"]
        r = await cm.exec(
            "const w = await tools.get_weather({city: 'Oslo'});"
            "const t = await tools.slow_total({items: [1, 2, 3]});"
            "console.log('done');"
            "return {city: w.city, temp: w.temp, total: t};"
        )
        assert r.status == "waiting", r.to_dict()
        assert r.run_id and r.reason == "pending_tools"
        assert [p.tool_id for p in r.pending_tool_calls] == ["plugin:python:slow_total"]
        assert r.pending_tool_calls[0].kind == "call"
        done = await settle(cm, r)
        assert done.status == "completed", done.to_dict()
        assert done.value == {"city": "Oslo", "temp": 21, "total": 6}
        assert done.text == "done"
        assert done.error is None
        # The same JSON as the Rust API.
        raw = done.to_dict()
        assert raw["status"] == "completed" and raw["value"] == done.value
        assert raw["telemetry"]["nestedToolIds"] == ["plugin:python:get_weather", "plugin:python:slow_total"]
        assert json.loads(json.dumps(raw)) == raw

    run(main())


def test_schemas_and_descriptions_come_from_the_signature_and_docstring() -> None:
    cm = CodeMode(tools=[get_weather])
    exec_tool = next(t for t in cm.model_tools() if t["name"] == "exec")
    assert "plugin:python:get_weather({city: string, unit?: string})" in exec_tool["description"]
    spec = get_weather.spec()
    assert spec["inputSchema"]["required"] == ["city"]
    assert spec["inputSchema"]["properties"]["city"]["type"] == "string"
    assert spec["readOnly"] is True

    async def main() -> None:
        d = await cm.exec("return (await tools.describe('plugin:python:get_weather')).description")
        assert d.value == "Current weather of a city."
        # The input is checked against the schema before the function is called.
        r = await cm.exec("try { await tools.get_weather({city: 5}) } catch (e) { return [e.code, e.message] }")
        code, message = r.value
        assert code == "invalid_input" and "city" in message, r.value

    run(main())


def test_kwargs_tools_receive_the_inputs_keys() -> None:
    def find(**filters: str) -> dict:
        """Finds records matching every filter."""
        return {"filters": filters}

    def lookup(query: str, limit: int = 5, **options: Any) -> dict:
        return {"query": query, "limit": limit, "options": options}

    find_tool, lookup_tool = tool(find), tool(lookup)
    assert find_tool.spec()["inputSchema"]["additionalProperties"] == {"type": "string"}
    assert lookup_tool.spec()["inputSchema"]["additionalProperties"] is True
    assert "additionalProperties" not in get_weather.spec()["inputSchema"]

    async def main() -> None:
        cm = CodeMode(tools=[find_tool, lookup_tool])
        r = await cm.exec(
            "return [await tools.find({status: 'open', owner: 'ana'}),"
            " await tools.lookup({query: 'x', deep: true, lang: 'en'})]"
        )
        assert r.status == "completed", r.to_dict()
        assert r.value == [
            {"filters": {"status": "open", "owner": "ana"}},
            {"query": "x", "limit": 5, "options": {"deep": True, "lang": "en"}},
        ]
        # The annotation types the open keys: another type is refused before the call.
        r = await cm.exec("try { await tools.find({status: 5}) } catch (e) { return e.code }")
        assert r.value == "invalid_input", r.to_dict()

    run(main())

    def positional(a: int, /) -> int:
        return a

    with pytest.raises(TypeError, match="positional-only"):
        tool(positional)


def test_exceptions_become_tool_errors_with_type_and_message() -> None:
    def fails(reason: str) -> None:
        raise ValueError(f"no such city: {reason}")

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise PermissionError("not yours")

    async def main() -> None:
        cm = CodeMode(tools=[fails, fails_later])
        r = await cm.exec(
            "const out = [];"
            "try { await tools.fails({reason: 'Atlantis'}) } catch (e) { out.push([e.name, e.code, e.message]) }"
            "try { await tools.fails_later({}) } catch (e) { out.push([e.code, e.message]) }"
            "return out;"
        )
        assert r.status == "completed", r.to_dict()
        first, second = r.value
        assert first[1] == "nested_tool_failed"
        assert first[2] == "plugin:python:fails: ValueError: no such city: Atlantis"
        assert second == ["nested_tool_failed", "plugin:python:fails_later: PermissionError: not yours"]
        uncaught = await cm.exec("await tools.fails({reason: 'x'})")
        assert uncaught.status == "failed"
        assert uncaught.error is not None and uncaught.error.code == "nested_tool_failed"
        assert "ValueError: no such city: x" in uncaught.error.message

    run(main())


def test_non_json_results_are_coded_errors_and_the_runtime_keeps_serving() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    values: dict[str, Any] = {
        "a_set": {1, 2},
        "some_bytes": b"\x00\x01",
        "nan": math.nan,
        "infinity": [1.0, math.inf],
        "cyclic": cyclic,
        "big_int": 2**70,
        "object": object(),
        "int_keys": {1: "one"},
        "deep": None,
    }
    deep: list[Any] = []
    cur = deep
    for _ in range(400):
        nxt: list[Any] = []
        cur.append(nxt)
        cur = nxt
    values["deep"] = deep

    def make(name: str) -> Any:
        def f() -> Any:
            return values[name]

        f.__name__ = name
        return f

    async def main() -> None:
        cm = CodeMode(tools=[make(n) for n in values])
        for name in values:
            r = await cm.exec(f"try {{ await tools.{name}({{}}); return 'accepted' }} catch (e) {{ return [e.code, e.message] }}")
            assert r.status == "completed", (name, r.to_dict())
            code, message = r.value
            assert code == "nested_tool_failed", (name, r.value)
            assert f"tool `{name}` returned a value that is not JSON" in message, (name, message)
        ok = await cm.exec("return 6 * 7")
        assert ok.value == 42

    run(main())


def test_hostile_cells_fail_with_their_codes_and_the_interpreter_keeps_serving() -> None:
    cells = {
        "while (true) {}": "timeout",
        "const a = []; while (true) a.push('x'.repeat(1 << 20));": "memory_limit_exceeded",
        "let s = 'x'; for (let i = 0; i < 40; i++) s = s + s; return s.length": None,
        "function f(n) { return f(n + 1) } f(0)": None,
        "let o = {}; for (let i = 0; i < 100000; i++) o = {o}; return JSON.stringify(o).length": None,
        "Object.prototype.toJSON = () => 'pwned'; Array.prototype.push = null; return {a: 1}": None,
        "tools.__proto__.call = () => 1; return await tools.call('plugin:python:get_weather', {city: 'x'})": None,
        "return globalThis.process ?? typeof require": None,
    }

    async def main() -> None:
        cm = CodeMode(tools=[get_weather], config={"tools": {"codeMode": {"timeoutMs": 1000, "memoryLimitBytes": 33554432}}})
        for code, expected in cells.items():
            r = await cm.exec(code)
            if expected is not None:
                assert r.status == "failed" and r.error and r.error.code == expected, (code, r.to_dict())
            else:
                # Whatever the cell did, it stayed in the sandbox: a result, never a crash.
                assert r.status in ("completed", "failed"), (code, r.to_dict())
            # Each run gets a fresh VM: what a cell tampered with is gone for the next one.
            clean = await cm.exec("const a = []; a.push(1); return JSON.stringify({a})")
            assert clean.value == '{"a":[1]}', (code, clean.to_dict())
        after = await cm.exec("return (await tools.get_weather({city: 'Rome'})).city")
        assert after.value == "Rome"

    run(main())


def test_a_tool_that_never_returns_is_bounded_by_the_run_and_abort_stops_it() -> None:
    # The tool is held by an event the test sets only at the end (not a sleep): it cannot return
    # before the run's deadline, however slow the machine.
    started, release = threading.Event(), threading.Event()

    def hangs() -> str:
        started.set()
        release.wait(60)
        return "late"

    async def main() -> None:
        cm = CodeMode(tools=[hangs], config=FAST)
        r = await cm.exec("return await tools.hangs({})")
        # `waiting`, not `completed` with "late": exec returned at the run's deadline, not the tool's.
        assert r.status == "waiting", r.to_dict()
        assert started.is_set()
        assert await cm.abort(r.run_id or "") is True
        gone = await cm.wait(r.run_id or "")
        assert gone.status == "failed" and gone.error and gone.error.code == "invalid_input"
        # Python keeps serving while the abandoned call is still held on its thread.
        assert (await cm.exec("return 1")).value == 1

    try:
        run(main())
    finally:
        release.set()


@pytest.mark.parametrize("with_hook", [True, False], ids=["hook", "no-hook"])
def test_cancelling_the_awaiting_task_aborts_the_run(with_hook: bool) -> None:
    # Events, not sleeps: the test goes on when the tool has started, and again when the run's
    # abort has reached it (its coroutine is cancelled). Without hooks the run is answered straight
    # from the guest worker: a run still going when its caller stops looking for the answer gets
    # the cancel callback. A quick cell beside the held one still answers.
    seen: list[str] = []

    async def main() -> None:
        started, given_up = asyncio.Event(), asyncio.Event()

        async def waits_forever(**_: Any) -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                given_up.set()
                raise

        def record(call: dict) -> None:
            seen.append(call["runId"])

        cm = CodeMode(
            tools=[tool(waits_forever, input_schema={"type": "object"})],
            config={"tools": {"codeMode": {"timeoutMs": 20000}}},
            hook=record if with_hook else None,
        )
        task = asyncio.ensure_future(cm.exec("return await tools.waits_forever({})"))
        await asyncio.wait_for(started.wait(), 20)
        assert (await cm.exec("return 2")).value == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(given_up.wait(), 20)
        if with_hook:
            assert seen, "the cell made its call"
            run_id = seen[0]
            after = await cm.wait(run_id)
            assert after.status == "failed" and after.error and after.error.code == "invalid_input", after.to_dict()
            assert await cm.abort(run_id) is False, "nothing left to abort"

    run(main())


def test_the_gil_is_not_held_while_the_guest_runs() -> None:
    ticks = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    async def main() -> int:
        cm = CodeMode(config={"tools": {"codeMode": {"timeoutMs": 5000}}})
        thread = threading.Thread(target=spin)
        thread.start()
        try:
            before = ticks
            r = await cm.exec("const end = Date.now() + 400; while (Date.now() < end) {} return 'spun'")
            assert r.value == "spun"
            return ticks - before
        finally:
            stop.set()
            thread.join()

    progressed = run(main())
    assert progressed > 50, f"a Python thread ran only {progressed} times during a 400 ms cell"


def test_hooks_refuse_and_rewrite_and_approvers_decide_or_park() -> None:
    deleted: list[str] = []

    def delete_file(path: str) -> str:
        deleted.append(path)
        return f"deleted {path}"

    async def hook(call: dict) -> Any:
        if call["input"].get("path") == "/etc/passwd":
            return "system files are off limits"
        if call["input"].get("path") == "typo.txt":
            return {"input": {"path": "fixed.txt"}}
        return None

    decisions: dict[str, Any] = {"a.txt": True, "b.txt": "not b", "c.txt": None}

    async def approver(request: dict) -> Any:
        path = json.loads(request["inputPreview"])["path"]
        return decisions.get(path, True)

    config = {"tools": {"codeMode": {"timeoutMs": 2000}}, "approvals": {"require": ["plugin:python:delete_file"]}}

    async def main() -> None:
        cm = CodeMode(tools=[delete_file], config=config, hook=hook, approver=approver)
        r = await cm.exec(
            "const out = [];"
            "for (const path of ['/etc/passwd', 'typo.txt', 'a.txt', 'b.txt']) {"
            "  try { out.push(await tools.delete_file({path})) } catch (e) { out.push(e.message) } }"
            "return out;"
        )
        assert r.status == "completed", r.to_dict()
        refused, rewritten, approved, denied = r.value
        assert "system files are off limits" in refused
        assert rewritten == "deleted fixed.txt"
        assert approved == "deleted a.txt"
        assert "not b" in denied
        assert deleted == ["fixed.txt", "a.txt"]
        # The approver has no answer for c.txt: the call parks until the host decides.
        parked = await cm.exec("return await tools.delete_file({path: 'c.txt'})")
        assert parked.status == "waiting", parked.to_dict()
        [pending] = parked.pending_tool_calls
        assert pending.kind == "approval" and pending.tool_id == "plugin:python:delete_file"
        assert deleted == ["fixed.txt", "a.txt"], "a parked call has not run"
        with pytest.raises(CodeModeError) as wrong:
            await cm.approve(parked.run_id or "", pending.request_id + 99)
        assert wrong.value.code == "invalid_input"
        await cm.approve(parked.run_id or "", pending.request_id)
        done = await settle(cm, await cm.wait(parked.run_id or ""))
        assert done.value == "deleted c.txt"
        # Denied through the host API.
        parked = await cm.exec("try { return await tools.delete_file({path: 'c.txt'}) } catch (e) { return e.message }")
        await cm.approve(parked.run_id or "", parked.pending_tool_calls[0].request_id, deny="not today")
        denied_later = await cm.wait(parked.run_id or "")
        assert "not today" in denied_later.value

    run(main())


def test_typescript_cells_and_the_sync_wrapper() -> None:
    async def doubled(n: int) -> int:
        await asyncio.sleep(0.01)
        return n * 2

    with SyncCodeMode(tools=[doubled]) as cm:
        r = cm.exec("const n: number = await tools.doubled({n: 21}); return n", language="typescript")
        assert r.status == "completed" and r.value == 42, r.to_dict()
        bad = cm.exec("return 1", language="cobol")
        assert bad.status == "failed" and bad.error and bad.error.code == "unsupported_language"


def test_bad_configs_and_tools_are_refused_with_codes() -> None:
    with pytest.raises(CodeModeError) as e:
        CodeMode(config={"tools": {"codeMode": {"timeoutMs": "soon"}}})
    assert e.value.code == "config_error" and "timeoutMs" in e.value.message
    with pytest.raises(CodeModeError) as e:
        CodeMode(config={"tool": {}})
    assert e.value.code == "config_error" and "did you mean `tools`" in e.value.message
    with pytest.raises(CodeModeError) as e:
        CodeMode(config={"snapshotStore": {"kind": "tape"}})
    assert e.value.code == "config_error"
    with pytest.raises(CodeModeError) as e:
        CodeMode(tools=[tool(lambda: 1, name="not a name")])
    assert e.value.code == "invalid_input"
    with pytest.raises(CodeModeError) as e:
        CodeMode(tools=[tool(lambda: 1, name="twice"), tool(lambda: 2, name="twice")])
    assert e.value.code == "invalid_input" and "plugin:python:twice" in e.value.message
    with pytest.raises(TypeError):
        CodeMode(tools=[42])

    async def main() -> None:
        cm = CodeMode()
        with pytest.raises(CodeModeError) as e:
            await cm.approve("no-such-run", 1)
        assert e.value.code == "invalid_input"
        r = await cm.wait("cm_doesnotexist")
        assert r.status == "failed" and r.error and r.error.code == "invalid_input"
        malformed = await cm.exec_json({"code": 5})
        assert malformed.status == "failed" and malformed.error and malformed.error.code == "invalid_input"

    run(main())


def test_results_are_typed_objects() -> None:
    async def main() -> Result:
        cm = CodeMode()
        return await cm.exec("throw new RangeError('nope')")

    r = run(main())
    assert isinstance(r, Result)
    assert r.status == "failed" and r.error is not None
    assert "RangeError: nope" in r.error.message
    assert r.to_dict()["status"] == "failed"


def test_a_result_read_from_its_json_is_the_dataclass_built_field_by_field() -> None:
    # `Result.from_dict` fills the frozen dataclass's fields at once: each status reads back as the
    # same object its constructor builds, equal, with the same repr, and still frozen.
    import dataclasses

    from codemode import ExecError, PendingToolCall

    telemetry = {"engine": "quickjs-wasi", "execCount": 1}
    waiting = {
        "status": "waiting",
        "runId": "run_1",
        "reason": "pending_tools",
        "output": [{"type": "text", "text": "hi"}],
        "pendingToolCalls": [
            {"requestId": 3, "kind": "approval", "toolId": "demo.echo", "elapsedMs": 7, "question": "ok?"},
            {"requestId": 4, "toolId": "demo.sleep"},
        ],
        "telemetry": telemetry,
    }
    failed = {"status": "failed", "code": "timeout", "error": "too slow", "rerunnable": True}
    completed = {"status": "completed", "value": {"n": [1, 2]}, "telemetry": telemetry}
    expected = [
        Result(
            status="waiting",
            output=({"type": "text", "text": "hi"},),
            run_id="run_1",
            reason="pending_tools",
            pending_tool_calls=(
                PendingToolCall(request_id=3, kind="approval", tool_id="demo.echo", elapsed_ms=7, question="ok?"),
                PendingToolCall(request_id=4, kind="call", tool_id="demo.sleep", elapsed_ms=0),
            ),
            telemetry=telemetry,
        ),
        Result(status="failed", error=ExecError(code="timeout", message="too slow"), rerunnable=True),
        Result(status="completed", value={"n": [1, 2]}, telemetry=telemetry),
    ]
    for raw, want in zip([waiting, failed, completed], expected):
        got = Result.from_dict(raw)
        assert got == want and repr(got) == repr(want), (got, want)
        assert got.to_dict() == raw
        with pytest.raises(dataclasses.FrozenInstanceError):
            got.status = "completed"  # type: ignore[misc]


def test_inline_tools_run_while_the_guest_waits_and_hold_the_run_while_they_do() -> None:
    def nap(seconds: float) -> str:
        time.sleep(seconds)
        return "rested"

    def boom() -> None:
        raise KeyError("inline")

    async def main() -> None:
        cm = CodeMode(
            tools=[tool(nap, name="nap_inline", inline=True), tool(nap, name="nap_worker"), tool(boom, inline=True)],
            config=FAST,
        )
        # 100 inline calls, each answered before the guest takes its next step.
        r = await cm.exec("let n = 0; for (let i = 0; i < 100; i++) if (await tools.nap_inline({seconds: 0}) === 'rested') n++; return n")
        assert r.value == 100, r.to_dict()
        # An inline tool slower than timeoutMs holds the run, which cannot suspend meanwhile: it
        # fails with `timeout` once the function returns...
        held = await cm.exec("return await tools.nap_inline({seconds: 0.5})")
        assert held.status == "failed" and held.error and held.error.code == "timeout", held.to_dict()
        # ...where the same function on a worker thread leaves the run waiting at its deadline.
        free = await cm.exec("return await tools.nap_worker({seconds: 0.5})")
        assert free.status == "waiting", free.to_dict()
        assert (await settle(cm, free)).value == "rested"
        err = await cm.exec("try { await tools.boom({}) } catch (e) { return e.message }")
        assert err.value == "plugin:python:boom: KeyError: 'inline'"

    run(main())
    with pytest.raises(TypeError):
        tool(asyncio.sleep, inline=True)


def test_plain_tools_run_on_the_lane_one_at_a_time_and_never_wait_behind_each_other() -> None:
    # The lane (Python and Node page, "Threads"): a cell's calls in sequence run on one thread, off
    # the guest worker and the asyncio loop; a call made while the lane is busy runs elsewhere at
    # once. Events and a barrier order the steps, not sleeps.
    threads: list[int] = []
    held, release = threading.Event(), threading.Event()
    both = threading.Barrier(2, timeout=30)

    def where() -> int:
        threads.append(threading.get_ident())
        return len(threads)

    def blocks() -> str:
        held.set()
        release.wait(60)
        return "released"

    def meet(n: int) -> int:
        # Returns only once the other call is inside too: the two run at the same time.
        both.wait()
        return n

    async def main() -> None:
        cm = CodeMode(tools=[where, blocks, meet], config=FAST)
        loop_thread = threading.get_ident()
        r = await cm.exec("let n = 0; for (let i = 0; i < 50; i++) n = await tools.where({}); return n")
        assert r.value == 50, r.to_dict()
        assert loop_thread not in threads
        lane = max(set(threads), key=threads.count)
        assert threads.count(lane) >= 45, "a cell's sequential calls did not stay on one thread"
        # Two calls at once: one on the lane, the other elsewhere, both running together.
        pair = await cm.exec("return await Promise.all([tools.meet({n: 1}), tools.meet({n: 2})])")
        assert pair.value == [1, 2], pair.to_dict()
        # A tool holding the lane leaves its run waiting at the deadline, and another run's calls
        # still complete meanwhile.
        slow = await cm.exec("return await tools.blocks({})")
        assert slow.status == "waiting" and held.is_set(), slow.to_dict()
        threads.clear()
        other = await cm.exec("let n = 0; for (let i = 0; i < 5; i++) n = await tools.where({}); return n")
        assert other.value == 5, other.to_dict()
        release.set()
        assert (await settle(cm, slow)).value == "released"

    try:
        run(main())
    finally:
        release.set()


def test_a_tool_with_a_call_info_parameter_receives_who_calls_it_with_the_idempotency_key() -> None:
    seen: list[dict] = []

    def pay(amount: int, call_info: dict) -> str:
        """Pays once per idempotency key."""
        seen.append(call_info)
        return f"paid {amount}"

    async def main() -> None:
        cm = CodeMode(tools=[tool(pay)], config=FAST)
        # `call_info` is not part of the tool's input.
        r = await cm.exec("return [await tools.pay({amount: 3}), await tools.pay({amount: 4})]")
        assert r.status == "completed" and r.value == ["paid 3", "paid 4"], r.to_dict()
        assert [s["toolId"] for s in seen] == ["plugin:python:pay", "plugin:python:pay"]
        keys = [s["idempotencyKey"] for s in seen]
        assert keys == [f"{s['runId']}/{s['requestId']}" for s in seen] and keys[0] != keys[1], seen
        described = await cm.exec("return tools.describe('plugin:python:pay')")
        assert "call_info" not in json.dumps(described.value), described.to_dict()

    run(main())


def test_what_a_tool_takes_is_read_once_per_function_and_again_when_the_function_changes() -> None:
    # The tool reads its function's shape (async, `call_info`) once, not on every call; a Tool whose
    # `function` is replaced afterwards calls the new function the way it needs.
    seen: list[Any] = []

    def plain(n: int) -> int:
        return n

    def with_info(n: int, call_info: dict) -> int:
        seen.append(call_info["toolId"])
        return n * 10

    async def later(n: int) -> int:
        await asyncio.sleep(0)
        return n * 100

    t = tool(plain, name="t", input_schema={"type": "object"})

    async def main() -> None:
        cm = CodeMode(tools=[t], config=FAST)
        assert (await cm.exec("return await tools.t({n: 1})")).value == 1
        t.function = with_info
        assert (await cm.exec("return await tools.t({n: 2})")).value == 20
        assert seen == ["plugin:python:t"]
        t.function = plain
        assert (await cm.exec("return await tools.t({n: 3})")).value == 3
        assert seen == ["plugin:python:t"], "the plain function again gets no call_info"
        # A function becoming async on a tool registered as sync: its coroutine is awaited on the
        # loop (the sync path's awaitable results), never returned as a value.
        t.function = later
        r = await cm.exec("return await tools.t({n: 4})")
        assert r.status == "completed" and r.value == 400, r.to_dict()

    run(main())


def test_each_call_names_the_agent_provider_and_model_its_run_is_for() -> None:
    @tool
    def lookup(id: str) -> str:
        return f"customer {id}"

    @tool
    def refund(id: str) -> str:
        return f"refunded {id}"

    config = {
        "tools": {"codeMode": {"timeoutMs": 300}, "byProvider": {"openai": {"deny": ["lookup"]}}},
        "agents": {"list": [{"id": "support", "tools": {"deny": ["refund"]}}, {"id": "ops", "tools": {}}]},
    }
    ids = "return ALL_TOOLS.map((t) => t.id).sort()"

    async def main() -> None:
        cm = CodeMode(tools=[lookup, refund], config=config)
        assert (await cm.exec(ids, agent="support")).value == ["plugin:python:lookup"]
        assert (await cm.exec(ids, agent="ops")).value == ["plugin:python:lookup", "plugin:python:refund"]
        assert (await cm.exec(ids, agent="ops", provider="openai")).value == ["plugin:python:refund"]
        first = await cm.exec("await yield_control(); return 'mine'", agent="support")
        assert first.status == "waiting", first.to_dict()
        for other in [{"agent": "ops"}, {}, {"agent": "support", "provider": "openai"}]:
            refused = await cm.wait(first.run_id, **other)
            assert refused.status == "failed" and refused.error and refused.error.code == "invalid_input", (other, refused.to_dict())
        done = await cm.wait(first.run_id, agent="support")
        assert done.value == "mine", done.to_dict()

    run(main())
