"""`async def` tools on the event loop (the book: "Python and Node", "Tool calls on the event
loop"): the loop's thread looks for a cell's next call for a moment after answering one, and
starts each call's task eagerly on Python 3.12+. What must hold whatever the path: each call is an
asyncio task in a copy of the caller's context, on the caller's loop and thread; the loop keeps
turning while a cell calls quick tools back to back; no call waits behind another; failures,
non-JSON values and cancellation reach the guest as before. Also run under Python 3.12+ when the
machine has one (scripts/test-python.sh), where tasks start eagerly."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

from codemode import CodeMode, tool
from conftest import run

OBJ = {"type": "object"}
SEQUENTIAL = "let s = 0; for (let i = 0; i < {n}; i++) s = await tools.{name}({{a: s, b: 1}}); return s"


def test_quick_calls_in_sequence_run_as_tasks_in_the_callers_context_on_its_loop() -> None:
    who = contextvars.ContextVar("who", default="nobody")
    seen: list[tuple[Any, str, int, bool]] = []
    loop: Any = None

    async def add(a: int, b: int) -> int:
        seen.append((asyncio.current_task(), who.get(), threading.get_ident(), asyncio.get_running_loop() is loop))
        # A call's own context changes stay in its copy of the caller's context.
        who.set(f"call {a}")
        return a + b

    async def main() -> None:
        nonlocal loop
        loop = asyncio.get_running_loop()
        who.set("caller")
        cm = CodeMode(tools=[tool(add, input_schema=OBJ)], config={"tools": {"codeMode": {"timeoutMs": 30000}}})
        r = await cm.exec(SEQUENTIAL.format(n=300, name="add"))
        assert r.status == "completed" and r.value == 300, r.to_dict()
        assert who.get() == "caller"

    run(main())
    assert len(seen) == 300
    assert all(task is not None for task, _, _, _ in seen), "every call runs inside an asyncio task"
    assert len({id(task) for task, _, _, _ in seen}) == 300, "a task of its own for each call"
    assert {w for _, w, _, _ in seen} == {"caller"}, "each call sees the caller's context, never another call's"
    assert {t for _, _, t, _ in seen} == {threading.get_ident()}, "on the thread of the caller's loop"
    assert all(on_loop for _, _, _, on_loop in seen)


def test_the_loop_keeps_turning_while_a_cell_calls_quick_tools_back_to_back() -> None:
    events: list[str] = []

    async def add(a: int, b: int) -> int:
        events.append("call")
        return a + b

    async def ticker(stop: asyncio.Event) -> None:
        while not stop.is_set():
            events.append("tick")
            await asyncio.sleep(0)

    async def main() -> None:
        cm = CodeMode(tools=[tool(add, input_schema=OBJ)], config={"tools": {"codeMode": {"timeoutMs": 30000}}})
        await cm.exec("return 1")
        stop = asyncio.Event()
        ticking = asyncio.ensure_future(ticker(stop))
        timer_fired: list[int] = []
        loop = asyncio.get_running_loop()
        loop.call_later(0.001, lambda: timer_fired.append(events.count("call")))
        r = await cm.exec(SEQUENTIAL.format(n=3000, name="add"))
        stop.set()
        await ticking
        assert r.value == 3000, r.to_dict()
        calls = [i for i, e in enumerate(events) if e == "call"]
        ticks_during = [i for i, e in enumerate(events) if e == "tick" and calls[0] < i < calls[-1]]
        assert ticks_during, "other tasks ran while the cell made its calls"
        assert timer_fired and timer_fired[0] < 3000, f"a 1 ms timer fired during the cell: {timer_fired}"

    run(main())


def test_no_call_waits_behind_another() -> None:
    # Twelve calls in parallel (the pending-call limit is 16), each held until all twelve have
    # started, with quick calls in between: if one waited behind another, the cell would never
    # finish (and the test would time out).
    started = 0
    gate: asyncio.Event

    async def held(i: int) -> int:
        nonlocal started
        started += 1
        if started == 12:
            gate.set()
        await gate.wait()
        return i

    async def quick(i: int) -> int:
        return i

    async def main() -> None:
        nonlocal gate
        gate = asyncio.Event()
        cm = CodeMode(
            tools=[tool(held, input_schema=OBJ), tool(quick, input_schema=OBJ)],
            config={"tools": {"codeMode": {"timeoutMs": 30000}}},
        )
        code = """
          const held = [];
          for (let i = 0; i < 12; i++) held.push(tools.held({i}));
          let q = 0;
          for (let i = 0; i < 50; i++) q += await tools.quick({i});
          const h = await Promise.all(held);
          return [q, h.reduce((a, b) => a + b, 0)];
        """
        r = await asyncio.wait_for(cm.exec(code), 60)
        assert r.status == "completed" and r.value == [1225, 66], r.to_dict()

    run(main())


def test_failures_values_and_awaiting_tools_mixed_with_quick_ones() -> None:
    async def boom(n: int) -> int:
        raise ValueError(f"bad {n}")

    async def not_json() -> Any:
        return {1, 2}

    async def later(n: int) -> int:
        await asyncio.sleep(0)
        await asyncio.sleep(0.001)
        return n * 10

    async def quick(n: int) -> int:
        return n

    async def main() -> None:
        cm = CodeMode(
            tools=[tool(f, input_schema=OBJ) for f in (boom, not_json, later, quick)],
            config={"tools": {"codeMode": {"timeoutMs": 30000}}},
        )
        code = """
          const out = [];
          for (let i = 0; i < 30; i++) {
            out.push(await tools.quick({n: i}));
            out.push(await tools.later({n: i}));
            try { await tools.boom({n: i}); } catch (e) { out.push(e.message); }
          }
          try { await tools.not_json({}); } catch (e) { out.push(e.message); }
          return out;
        """
        r = await cm.exec(code)
        assert r.status == "completed", r.to_dict()
        out = r.value
        for i in range(30):
            assert out[3 * i] == i and out[3 * i + 1] == i * 10
            assert "bad" in out[3 * i + 2] and str(i) in out[3 * i + 2]
        assert "not JSON" in out[-1]

    run(main())


def test_two_loops_on_two_threads_each_run_their_own_calls() -> None:
    # Two event loops, each in its thread with its runtime, calling quick tools at the same time:
    # every call runs on the loop (and thread) of the exec that started its run.
    errors: list[str] = []
    finished: list[str] = []

    def worker(name: str) -> None:
        async def add(a: int, b: int) -> int:
            if threading.current_thread().name != name:
                errors.append(f"{name}'s call ran on {threading.current_thread().name}")
            return a + b

        async def main() -> None:
            cm = CodeMode(tools=[tool(add, input_schema=OBJ)], config={"tools": {"codeMode": {"timeoutMs": 30000}}})
            for _ in range(5):
                r = await cm.exec(SEQUENTIAL.format(n=200, name="add"))
                if r.value != 200:
                    errors.append(f"{name}: {r.to_dict()}")

        asyncio.run(main())
        finished.append(name)

    threads = [threading.Thread(target=worker, args=(f"loop-{i}",), name=f"loop-{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert errors == [] and sorted(finished) == ["loop-0", "loop-1"], (errors, finished)
