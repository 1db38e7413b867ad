"""LangChain tools that give an agent code mode: ``exec`` and ``wait`` instead of its own tools,
which it calls from the programs it writes. Usable by LangChain 1.x's ``create_agent``, by LangGraph
graphs (``ToolNode``) and by any chat model's ``bind_tools``.

    from langchain.agents import create_agent
    from codemode import CodeMode
    from codemode.langchain import code_mode_tools

    cm = CodeMode(tools=[get_weather, book_flight])
    agent = create_agent("openai:gpt-5", tools=code_mode_tools(cm, session=conversation_id))
    await agent.ainvoke({"messages": [("user", "…")]})

The tools carry the JSON schemas and the ``exec`` description ``codemode serve`` lists (the
catalog's TypeScript signatures, namespaces, upstream MCP servers). Each call returns the run's
result JSON (``status``, ``value``, ``output``, ``runId``, ``pendingToolCalls``, ``error``,
``code``). A run that suspends on slow tools is resumed by the tool itself (``auto_wait``, default
:attr:`AutoWait.ADAPTER_DEFAULT`: up to 5 minutes and 50 resumes per call), so the model pays one
turn per cell; a run past that budget, or with a call parked for the host's approver, comes back
``waiting`` and the model calls ``wait`` with its ``runId``. ``session``: the conversation the runs
belong to (a run resumes only in its own session: give each conversation its own). ``agent``,
``provider``, ``model``: the target whose tool policy applies. Both async (``ainvoke``) and sync
(``invoke``) calls work.

Needs ``langchain-core`` (``pip install 'codemode[langchain]'``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool

from . import AutoWait, CodeMode
from ._adapter import Surface, run_blocking

__all__ = ["code_mode_tools"]


def _callables(surface: Surface, name: str) -> tuple[Callable[..., dict[str, Any]], Callable[..., Awaitable[dict[str, Any]]]]:
    """The sync and async functions of one tool (the model's arguments arrive as keywords)."""

    async def call_async(**args: Any) -> dict[str, Any]:
        return await surface.call(name, args)

    def call_sync(**args: Any) -> dict[str, Any]:
        return run_blocking(lambda: surface.call(name, args))

    return call_sync, call_async


def code_mode_tools(
    code_mode: CodeMode,
    *,
    session: str | None = None,
    agent: str | None = None,
    provider: str | None = None,
    model: str | None = None,
    auto_wait: AutoWait | None = AutoWait.ADAPTER_DEFAULT,
) -> list[BaseTool]:
    """``[exec, wait]`` as LangChain tools over ``code_mode`` (see the module's documentation)."""
    surface = Surface(code_mode, session, agent, provider, model, auto_wait)
    tools: list[BaseTool] = []
    for name, definition in surface.definitions().items():
        call_sync, call_async = _callables(surface, name)
        tools.append(
            StructuredTool.from_function(
                func=call_sync,
                coroutine=call_async,
                name=name,
                description=definition["description"],
                args_schema=definition["inputSchema"],
            )
        )
    return tools
