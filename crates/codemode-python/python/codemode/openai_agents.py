"""OpenAI Agents SDK tools that give an agent code mode: ``exec`` and ``wait`` as ``FunctionTool``s
for ``Agent(tools=...)`` and ``Runner``.

    from agents import Agent, Runner
    from codemode import CodeMode
    from codemode.openai_agents import code_mode_tools

    cm = CodeMode(tools=[get_weather, book_flight])
    agent = Agent(name="assistant", instructions="…", tools=code_mode_tools(cm, session=conversation_id))
    result = await Runner.run(agent, "…")

The tools carry the JSON schemas and the ``exec`` description ``codemode serve`` lists; their
schemas are not rewritten for strict mode (``strict_json_schema=False``: strict mode would make every
optional field of ``exec`` required). Each call returns the run's result JSON as a string. A run
that suspends on slow tools is resumed by the tool itself (``auto_wait``, default
:attr:`AutoWait.ADAPTER_DEFAULT`); past that budget, or with a call parked for the host's approver,
the model gets ``waiting`` and calls ``wait`` with the ``runId``. Arguments that are not JSON are a
``failed`` result coded ``invalid_input`` the model sees, never an exception that ends the run.
``session``, ``agent``, ``provider``, ``model``: as in :mod:`codemode.langchain`.

Needs ``openai-agents`` (``pip install 'codemode[openai-agents]'``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool

from . import AutoWait, CodeMode
from ._adapter import Surface

__all__ = ["code_mode_tools"]


def _invoker(surface: Surface, name: str) -> Callable[[Any, str], Awaitable[str]]:
    """The ``on_invoke_tool`` of one tool: the model's JSON arguments in, the result JSON out."""

    async def invoke(_ctx: Any, raw: str) -> str:
        try:
            args: Any = json.loads(raw) if raw else {}
        except json.JSONDecodeError as e:
            return json.dumps({"status": "failed", "code": "invalid_input", "error": f"the arguments are not JSON: {e}"})
        if not isinstance(args, dict):
            return json.dumps({"status": "failed", "code": "invalid_input", "error": "the arguments must be a JSON object"})
        return json.dumps(await surface.call(name, args))

    return invoke


def code_mode_tools(
    code_mode: CodeMode,
    *,
    session: str | None = None,
    agent: str | None = None,
    provider: str | None = None,
    model: str | None = None,
    auto_wait: AutoWait | None = AutoWait.ADAPTER_DEFAULT,
) -> list[FunctionTool]:
    """``[exec, wait]`` as Agents SDK function tools over ``code_mode`` (see the module's
    documentation)."""
    surface = Surface(code_mode, session, agent, provider, model, auto_wait)
    tools: list[FunctionTool] = []
    for name, definition in surface.definitions().items():
        tools.append(
            FunctionTool(
                name=name,
                description=definition["description"],
                params_json_schema=definition["inputSchema"],
                on_invoke_tool=_invoker(surface, name),
                strict_json_schema=False,
            )
        )
    return tools
