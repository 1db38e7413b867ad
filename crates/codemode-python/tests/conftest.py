"""Shared helpers of the Python package's tests (run through the installed wheel)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from codemode import CodeMode, Result

HERE = Path(__file__).parent


async def settle(cm: CodeMode, result: Result, *, session: str | None = None, limit: int = 100) -> Result:
    """``wait`` until the run is no longer ``waiting`` on running calls (at most ``limit`` times)."""
    for _ in range(limit):
        if result.status != "waiting" or any(p.kind == "approval" for p in result.pending_tool_calls):
            return result
        result = await cm.wait(result.run_id or "", session=session)
    raise AssertionError(f"run still waiting after {limit} waits: {result.to_dict()}")


def run(coro: Any) -> Any:
    """Runs a coroutine on a fresh event loop (the tests need no asyncio plugin)."""
    return asyncio.run(coro)


@pytest.fixture
def python() -> str:
    """The interpreter running the tests (for the cross-process tests)."""
    return sys.executable


@pytest.fixture
def redis_url(tmp_path: Path):
    """A real `redis-server` on a free loopback port with its own directory, stopped afterwards
    whatever the test's outcome (scripts/setup.sh installs it)."""
    import shutil
    import socket
    import subprocess
    import time

    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed (scripts/setup.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.025)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
