"""What the framework adapters share: ``exec`` and ``wait`` as plain async callables over a
runtime, bound to one session and one target (agent, provider, model), returning the run's
result JSON."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from . import AutoWait, CodeMode

T = TypeVar("T")


@dataclass(frozen=True)
class Surface:
    """``exec`` and ``wait`` of ``code_mode`` for one conversation (see the adapters' docs)."""

    code_mode: CodeMode
    session: str | None = None
    agent: str | None = None
    provider: str | None = None
    model: str | None = None
    auto_wait: AutoWait | None = AutoWait.ADAPTER_DEFAULT

    def definitions(self) -> dict[str, dict[str, Any]]:
        """``{"exec": {name, description, inputSchema}, "wait": {...}}``: the model's two tools."""
        return {t["name"]: t for t in self.code_mode.model_tools()}

    async def call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Runs ``exec`` or ``wait`` with the model's raw arguments; a malformed call is a ``failed``
        result coded ``invalid_input``, which the model sees."""
        target = {"session": self.session, "agent": self.agent, "provider": self.provider, "model": self.model}
        if name == "exec":
            result = await self.code_mode.exec_json(args, auto_wait=self.auto_wait, **target)
        else:
            result = await self.code_mode.wait_json(args, auto_wait=self.auto_wait, **target)
        return result.to_dict()


_EXECUTOR: concurrent.futures.ThreadPoolExecutor | None = None


def run_blocking(make: Callable[[], Awaitable[T]]) -> T:
    """Runs a coroutine to its end from synchronous code, on an event loop of its own in a helper
    thread (so it works whether or not the caller's thread already runs a loop)."""
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="codemode-adapter")

    async def go() -> T:
        return await make()

    return _EXECUTOR.submit(asyncio.run, go()).result()
