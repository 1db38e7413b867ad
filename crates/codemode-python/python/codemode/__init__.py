"""codemode for Python: code mode for LLM agents, in-process.

Instead of many tool schemas, the model sees two tools, ``exec`` and ``wait``. It writes a short
JavaScript or TypeScript program; the program runs in a sandbox that treats it as hostile (QuickJS
compiled to WebAssembly), and your Python functions are reachable from it only through a JSON
bridge. A program waiting on slow tools is suspended as a VM snapshot and resumed by ``wait`` —
in this process, or in another one after :meth:`CodeMode.export_run` / :meth:`CodeMode.import_run`.

    from codemode import CodeMode, tool

    @tool(read_only=True)
    def get_weather(city: str) -> dict:
        "Current weather of a city."
        return {"city": city, "celsius": 21}

    cm = CodeMode(tools=[get_weather])
    result = await cm.exec("return (await tools.get_weather({city: 'Oslo'})).celsius")
    assert result.value == 21
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import os
import threading
from typing import Any, Awaitable, Callable, ClassVar, Coroutine, Iterable, Literal, Mapping, TypeVar

from . import _native
from ._native import CodeModeError
from ._tools import Tool, as_tool, tool

_T = TypeVar("_T")

__all__ = [
    "AutoWait",
    "CodeMode",
    "CodeModeError",
    "ExecError",
    "PendingToolCall",
    "Result",
    "SyncCodeMode",
    "Tool",
    "tool",
    "__version__",
]

__version__: str = _native.version()

# The runtime's threads stop entering Python before the interpreter finalizes (see the native
# module's `gil.rs`): registered at import, so it runs before the interpreter tears down.
atexit.register(_native.shutdown)

# `CodeModeError(text, code, message)`: the code and message as attributes, the text as str().
setattr(CodeModeError, "code", property(lambda self: self.args[1] if len(self.args) > 1 else None))
setattr(CodeModeError, "message", property(lambda self: self.args[2] if len(self.args) > 2 else str(self.args[0])))
setattr(CodeModeError, "__str__", lambda self: str(self.args[0]) if self.args else "")

Status = Literal["completed", "waiting", "failed"]


@dataclasses.dataclass(frozen=True)
class ExecError:
    """Why a run failed: ``code`` is one of the error codes of the contract (the book's contract pages) (``timeout``, ``nested_tool_failed``,
    ``invalid_input``, ``memory_limit_exceeded``, …; ``None`` for an uncoded failure)."""

    code: str | None
    message: str


@dataclasses.dataclass(frozen=True)
class PendingToolCall:
    """A nested call a ``waiting`` run still waits for; ``kind`` is ``"call"`` or ``"approval"``
    (parked until :meth:`CodeMode.approve`)."""

    request_id: int
    kind: str
    tool_id: str
    elapsed_ms: int
    #: For a call parked on a question its tool asked (an upstream MCP task's ``input_required``):
    #: the question; approving answers yes, denying answers no.
    question: str | None = None


@dataclasses.dataclass(frozen=True)
class Result:
    """The result of ``exec`` or ``wait``: the same JSON as the Rust API and ``codemode serve`` on
    :meth:`to_dict`."""

    status: Status
    value: Any = None
    output: tuple[dict[str, Any], ...] = ()
    run_id: str | None = None
    reason: str | None = None
    pending_tool_calls: tuple[PendingToolCall, ...] = ()
    error: ExecError | None = None
    rerunnable: bool = False
    telemetry: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    _raw: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Result":
        """A result from its JSON."""
        get = raw.get
        status = raw["status"]
        error = None
        if status == "failed":
            error = ExecError(code=get("code"), message=str(get("error", "")))
        output = get("output")
        pending = get("pendingToolCalls")
        # Every field set at once in the instance's dict: the frozen dataclass's `__init__` sets
        # each through `object.__setattr__`, which cost a trivial cell's result more than half of
        # its conversion (the fields, and so equality and `repr`, are the same).
        result = object.__new__(cls)
        result.__dict__.update(
            status=status,
            value=get("value"),
            output=tuple(output) if output else (),
            run_id=get("runId"),
            reason=get("reason"),
            pending_tool_calls=tuple(
                PendingToolCall(
                    request_id=int(p["requestId"]),
                    kind=str(p.get("kind", "call")),
                    tool_id=str(p.get("toolId", "")),
                    elapsed_ms=int(p.get("elapsedMs", 0)),
                    question=p.get("question"),
                )
                for p in pending
            )
            if pending
            else (),
            error=error,
            rerunnable=bool(get("rerunnable", False)),
            telemetry=get("telemetry") or {},
            _raw=raw,
        )
        return result

    def to_dict(self) -> dict[str, Any]:
        """The result's JSON (``status``, ``value``, ``output``, ``runId``, ``pendingToolCalls``,
        ``error``, ``code``, ``telemetry``), as the Rust API returns it."""
        return dict(self._raw)

    @property
    def text(self) -> str:
        """The text the cell printed (``console.log``, ``text(...)``), one item a line."""
        return "\n".join(str(o.get("text", "")) for o in self.output if o.get("type") == "text")


Hook = Callable[[dict[str, Any]], Any]
"""``hook(call)`` before every nested call, ``call`` = ``{runId, requestId, toolId, session, input}``.
Return ``None``/``True`` to let it run, ``False`` or a reason (str) to refuse it, ``{"input": …}`` to
rewrite its input. May be ``async``. An exception refuses the call."""

Approver = Callable[[dict[str, Any]], Any]
"""``approver(request)`` for a call the ``approvals`` policy gates, ``request`` = ``{runId, requestId,
toolId, inputPreview, reason, context}``. Return ``True`` (run it), ``False`` or a reason (deny it),
or ``None`` to park it: the run waits until :meth:`CodeMode.approve`. May be ``async``."""


@dataclasses.dataclass(frozen=True)
class AutoWait:
    """How far one ``exec`` / ``wait`` resumes a ``waiting`` run itself before handing it back
    (zero-token waiting): at most ``max_wall_s`` seconds from the call's start (checked between
    resumes) and ``max_resumes`` resumes. A run with a call parked for approval is handed back at
    once. The output of the results not handed back is carried into the one that is.
    ``AutoWait.ADAPTER_DEFAULT`` (5 minutes, 50 resumes) is what the framework adapters use."""

    max_wall_s: float = 300.0
    max_resumes: int = 50

    ADAPTER_DEFAULT: ClassVar[AutoWait]

    def _native(self) -> tuple[int, int]:
        return (max(0, int(self.max_wall_s * 1000)), max(0, int(self.max_resumes)))


AutoWait.ADAPTER_DEFAULT = AutoWait()


def _budget(auto_wait: AutoWait | None) -> tuple[int, int] | None:
    return auto_wait._native() if auto_wait is not None else None


class CodeMode:
    """A code-mode runtime in this process.

    - ``tools``: Python functions (plain or ``async def``) or :class:`Tool` objects;
    - ``config``: the configuration document, the same keys as a ``codemode.json5`` file
      (``{"tools": {"codeMode": {"timeoutMs": 5000}}, "approvals": {...}, "snapshotStore": {...},
      "mcpServers": {...}}``), as a dict or a path to the file; code mode is enabled unless it says
      otherwise;
    - ``hook`` / ``approver``: see :data:`Hook` and :data:`Approver`;
    - ``session``: the default session of runs (a run is resumed only from its own session).

    Raises :class:`CodeModeError` (``.code == "config_error"`` or ``"invalid_input"``) for a bad
    config or tool. Upstream MCP servers connect and the engine loads during the constructor.
    """

    def __init__(
        self,
        tools: Iterable[Any] = (),
        config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        hook: Hook | None = None,
        approver: Approver | None = None,
        session: str = "default",
    ) -> None:
        self._tools = [as_tool(t) for t in tools]
        if isinstance(config, (str, os.PathLike)):
            config = _load_config(os.fspath(config))
        self._session = session
        self._runtime = _native.start(
            [(t.spec(), t.invoke, t.mode) for t in self._tools],
            dict(config) if config is not None else None,
            hook=hook,
            approver=approver,
        )

    @property
    def tools(self) -> list[Tool]:
        """The Python tools."""
        return list(self._tools)

    @property
    def engine(self) -> str:
        """The engine's name (``quickjs-wasi`` unless the config chooses another)."""
        return self._runtime.engine

    def tool_ids(self) -> list[str]:
        """The catalog ids the guest can call (``plugin:python:<name>``, ``mcp:<server>:<tool>``)."""
        return self._runtime.tool_ids()

    def model_tools(self) -> list[dict[str, Any]]:
        """The two tools the model sees, ``[{name, description, inputSchema}]``: ``exec`` (its
        description generated from the catalog, as ``codemode serve`` lists it) and ``wait``."""
        return self._runtime.model_tools()

    async def exec(
        self,
        code: str,
        language: str | None = None,
        *,
        session: str | None = None,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        auto_wait: AutoWait | None = None,
    ) -> Result:
        """Runs a cell (``language``: ``"javascript"``, the default, or ``"typescript"``). Cancelling
        the awaiting task aborts the run. ``agent``, ``provider`` and ``model`` name the target the
        run is for (``agents.list[].id``, ``tools.byProvider``; the runtime's default otherwise): its
        catalog is that target's, and a ``wait`` of the run must name the same. With ``auto_wait``,
        a ``waiting`` run is resumed here until it ends or the budget runs out (see
        :class:`AutoWait`)."""
        return Result.from_dict(
            await self._runtime.exec(
                code, language, session or self._session, agent, provider, model, _budget(auto_wait)
            )
        )

    async def wait(
        self,
        run_id: str,
        *,
        session: str | None = None,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        auto_wait: AutoWait | None = None,
    ) -> Result:
        """Resumes a ``waiting`` run (with the target its ``exec`` named; ``auto_wait`` as for
        :meth:`exec`)."""
        return Result.from_dict(
            await self._runtime.wait(run_id, session or self._session, agent, provider, model, _budget(auto_wait))
        )

    async def exec_json(
        self,
        args: Mapping[str, Any],
        *,
        session: str | None = None,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        auto_wait: AutoWait | None = None,
    ) -> Result:
        """``exec`` from a model's raw tool arguments (``{code, language?, restartSafe?}``); a malformed
        call is a ``failed`` result coded ``invalid_input``."""
        return Result.from_dict(
            await self._runtime.exec_json(
                dict(args), session or self._session, agent, provider, model, _budget(auto_wait)
            )
        )

    async def wait_json(
        self,
        args: Mapping[str, Any],
        *,
        session: str | None = None,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
        auto_wait: AutoWait | None = None,
    ) -> Result:
        """``wait`` from a model's raw tool arguments (``{runId}``)."""
        return Result.from_dict(
            await self._runtime.wait_json(
                dict(args), session or self._session, agent, provider, model, _budget(auto_wait)
            )
        )

    async def approve(self, run_id: str, request_id: int, deny: str | None = None) -> None:
        """Approves a parked call, or denies it with ``deny`` as the reason; the next ``wait`` runs or
        rejects it."""
        await self._runtime.approve(run_id, request_id, deny)

    async def abort(self, run_id: str) -> bool:
        """Aborts a run (its snapshot is deleted, its nested calls stop); whether there was one."""
        return await self._runtime.abort(run_id)

    async def export_run(
        self,
        run_id: str,
        *,
        session: str | None = None,
        agent: str | None = None,
        provider: str | None = None,
        model: str | None = None,
    ) -> bytes:
        """Takes a ``waiting`` run out of this runtime as bytes to keep anywhere; it resumes wherever
        :meth:`import_run` takes them (another process too). Nested calls it started finish first."""
        return await self._runtime.export_run(run_id, session or self._session, agent, provider, model)

    async def import_run(self, data: bytes) -> str:
        """Puts an exported run into this runtime; returns its run id for :meth:`wait`."""
        return await self._runtime.import_run(bytes(data))

    async def aclose(self) -> None:
        """Closes the connections to upstream MCP servers."""
        await self._runtime.close()

    async def __aenter__(self) -> "CodeMode":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _load_config(path: str) -> dict[str, Any]:
    """A config file (JSON, or JSON5 through the native parser)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return _native.parse_config(text)


class SyncCodeMode:
    """:class:`CodeMode` for scripts without asyncio: the same methods, blocking. ``async def`` tools
    run on a private event loop in a background thread."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="codemode-loop", daemon=True)
        self._thread.start()
        self._cm = CodeMode(*args, **kwargs)

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def engine(self) -> str:
        return self._cm.engine

    def tool_ids(self) -> list[str]:
        return self._cm.tool_ids()

    def model_tools(self) -> list[dict[str, Any]]:
        return self._cm.model_tools()

    def exec(
        self,
        code: str,
        language: str | None = None,
        *,
        session: str | None = None,
        auto_wait: AutoWait | None = None,
        **target: str | None,
    ) -> Result:
        """See :meth:`CodeMode.exec` (``agent``, ``provider``, ``model``: the run's target)."""
        return self._run(self._cm.exec(code, language, session=session, auto_wait=auto_wait, **target))

    def wait(
        self, run_id: str, *, session: str | None = None, auto_wait: AutoWait | None = None, **target: str | None
    ) -> Result:
        """See :meth:`CodeMode.wait`."""
        return self._run(self._cm.wait(run_id, session=session, auto_wait=auto_wait, **target))

    def approve(self, run_id: str, request_id: int, deny: str | None = None) -> None:
        self._run(self._cm.approve(run_id, request_id, deny))

    def abort(self, run_id: str) -> bool:
        return self._run(self._cm.abort(run_id))

    def export_run(self, run_id: str, *, session: str | None = None) -> bytes:
        return self._run(self._cm.export_run(run_id, session=session))

    def import_run(self, data: bytes) -> str:
        return self._run(self._cm.import_run(data))

    def close(self) -> None:
        """Closes upstream connections and stops the background loop."""
        try:
            self._run(self._cm.aclose())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def __enter__(self) -> "SyncCodeMode":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
