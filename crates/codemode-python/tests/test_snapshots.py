"""Snapshots the host may keep (the book's packages page, "Exported runs"): a waiting run exported as
bytes resumes in another process holding the same signing key, and is refused by one without it; a
directory store chosen by config is shared by two processes; damaged or foreign bytes are refused
with codes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codemode import CodeMode, CodeModeError, tool
from conftest import run, settle

CONFIG = {"tools": {"codeMode": {"timeoutMs": 200}}}

TOOLS = textwrap.dedent(
    """
    import asyncio, sys
    from codemode import CodeMode, CodeModeError, tool
    calls = []

    async def fetch_rate(currency: str) -> float:
        calls.append(currency)
        await asyncio.sleep(0.5)
        return {"EUR": 1.1, "JPY": 0.0067}[currency]

    def convert(amount: float, rate: float) -> float:
        return round(amount * rate, 2)
    """
)

CELL = (
    "const rate = await tools.fetch_rate({currency: 'EUR'});"
    "return await tools.convert({amount: 100, rate});"
)


def resume_elsewhere(python: str, tmp: Path, script: str, env: dict[str, str] | None = None) -> str:
    path = tmp / "child.py"
    path.write_text(TOOLS + textwrap.dedent(script))
    done = subprocess.run([python, str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# Exported runs are signed (the book's security page, "Signed runs"): processes that hand runs to
# each other share a key.
RUN_KEY = "a key the two processes share, 32+ bytes"


def test_an_exported_run_resumes_in_another_process(
    python: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEMODE_RUN_SIGNING_KEY", RUN_KEY)
    calls: list[str] = []

    async def fetch_rate(currency: str) -> float:
        calls.append(currency)
        await asyncio.sleep(0.5)
        return {"EUR": 1.1}[currency]

    def convert(amount: float, rate: float) -> float:
        return round(amount * rate, 2)

    async def main() -> None:
        cm = CodeMode(tools=[fetch_rate, convert], config=CONFIG)
        r = await cm.exec(CELL)
        assert r.status == "waiting", r.to_dict()
        data = await cm.export_run(r.run_id or "")
        assert isinstance(data, bytes) and data.startswith(b"codemode-run/2\n")
        (tmp_path / "run.bin").write_bytes(data)
        # A process without the key refuses the bytes, saying why.
        keyless = {k: v for k, v in os.environ.items() if k != "CODEMODE_RUN_SIGNING_KEY"}
        refused = resume_elsewhere(
            python,
            tmp_path,
            f"""
            async def main():
                cm = CodeMode(tools=[fetch_rate, convert], config={CONFIG!r})
                try:
                    await cm.import_run(open({str(tmp_path / 'run.bin')!r}, 'rb').read())
                    print("imported")
                except CodeModeError as e:
                    print(e.code, "CODEMODE_RUN_SIGNING_KEY" in str(e))
            asyncio.run(main())
            """,
            env=keyless,
        )
        assert refused == "invalid_input True", refused
        # Exported means moved: this process no longer has it.
        gone = await cm.wait(r.run_id or "")
        assert gone.status == "failed" and gone.error and gone.error.code == "invalid_input"
        out = resume_elsewhere(
            python,
            tmp_path,
            f"""
            async def main():
                cm = CodeMode(tools=[fetch_rate, convert], config={CONFIG!r})
                run_id = await cm.import_run(open({str(tmp_path / 'run.bin')!r}, 'rb').read())
                r = await cm.wait(run_id)
                while r.status == 'waiting':
                    r = await cm.wait(run_id)
                print(r.status, r.value, len(calls))
            asyncio.run(main())
            """,
        )
        # The rate call finished in the first process during the export; the second process only
        # ran `convert` and never called fetch_rate again.
        assert out == "completed 110 0", out
        assert calls == ["EUR"]

    run(main())


def test_a_directory_store_from_the_config_is_shared_by_two_processes(python: str, tmp_path: Path) -> None:
    config = {**CONFIG, "snapshotStore": {"kind": "directory", "dir": str(tmp_path / "runs")}}

    @tool(read_only=True)
    async def fetch_rate(currency: str) -> float:
        await asyncio.sleep(3)
        return 1.1

    def convert(amount: float, rate: float) -> float:
        return round(amount * rate, 2)

    async def main() -> str:
        cm = CodeMode(tools=[fetch_rate, convert], config=config)
        r = await cm.exec(CELL)
        assert r.status == "waiting", r.to_dict()
        assert list((tmp_path / "runs").glob("*.run")), "the run is a file in the shared directory"
        return r.run_id or ""

    run_id = run(main())
    # This process's event loop is gone with its call; the read-only call is issued again by the
    # process that resumes the run.
    out = resume_elsewhere(
        python,
        tmp_path,
        f"""
        fetch_rate = tool(fetch_rate, read_only=True)
        async def main():
            cm = CodeMode(tools=[fetch_rate, convert], config={config!r})
            r = await cm.wait({run_id!r})
            while r.status == 'waiting':
                r = await cm.wait({run_id!r})
            print(r.status, r.value, calls)
        asyncio.run(main())
        """,
    )
    assert out == "completed 110 ['EUR']", out


def test_damaged_and_misdirected_exports_are_refused() -> None:
    async def slow() -> int:
        await asyncio.sleep(0.4)
        return 1

    async def main() -> None:
        cm = CodeMode(tools=[slow], config=CONFIG)
        r = await cm.exec("return await tools.slow({})")
        with pytest.raises(CodeModeError) as e:
            await cm.export_run(r.run_id or "", session="someone-else")
        assert e.value.code == "invalid_input"
        data = await cm.export_run(r.run_id or "")
        damaged = bytearray(data)
        damaged[len(damaged) // 2] ^= 0xFF
        with pytest.raises(CodeModeError) as e:
            await cm.import_run(bytes(damaged))
        assert e.value.code == "invalid_input" and "altered" in e.value.message
        with pytest.raises(CodeModeError) as e:
            await cm.import_run(b"")
        assert e.value.code == "invalid_input"
        native = CodeMode(tools=[slow], config={"tools": {"codeMode": {"runtime": "quickjs"}}})
        with pytest.raises(CodeModeError) as e:
            await native.import_run(data)
        assert e.value.code == "invalid_input" and "quickjs-wasi" in e.value.message
        run_id = await cm.import_run(data)
        assert run_id == r.run_id
        done = await settle(cm, await cm.wait(run_id))
        assert done.status == "completed" and done.value == 1

    run(main())


def test_a_redis_store_from_the_config_lets_another_process_resume_while_the_first_lives(
    python: str, tmp_path: Path, redis_url: str
) -> None:
    """Fleet mode (snapshotStore kind redis): the nested call this process started is recorded in
    Redis when it finishes, so a second process resumes the run with its result — the tool ran once,
    here — even though this process is still alive."""
    config = {**CONFIG, "snapshotStore": {"kind": "redis", "url": redis_url, "keyPrefix": "pytest:"}}
    calls: list[str] = []

    async def fetch_rate(currency: str) -> float:
        calls.append(currency)
        await asyncio.sleep(0.5)
        return 1.1

    def convert(amount: float, rate: float) -> float:
        return round(amount * rate, 2)

    async def main() -> None:
        cm = CodeMode(tools=[fetch_rate, convert], config=config)
        r = await cm.exec(CELL)
        assert r.status == "waiting", r.to_dict()
        # Keep this loop (and the call on it) alive while the other process resumes the run.
        child = asyncio.create_subprocess_exec(
            python,
            str(tmp_path / "child.py"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        (tmp_path / "child.py").write_text(
            TOOLS
            + textwrap.dedent(
                f"""
                async def main():
                    cm = CodeMode(tools=[fetch_rate, convert], config={config!r})
                    r = await cm.wait({r.run_id!r})
                    while r.status == 'waiting':
                        r = await cm.wait({r.run_id!r})
                    print(r.status, r.value, len(calls))
                asyncio.run(main())
                """
            )
        )
        proc = await child
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip() == "completed 110 0", (out, err)
        assert calls == ["EUR"]

    run(main())
