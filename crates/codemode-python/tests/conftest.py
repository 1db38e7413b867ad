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
