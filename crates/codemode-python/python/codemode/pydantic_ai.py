"""A PydanticAI toolset that gives an agent code mode: the two tools ``exec`` and ``wait`` instead of
its own tools, which it calls from the programs it writes.

    from pydantic_ai import Agent
    from codemode import CodeMode
    from codemode.pydantic_ai import CodeModeToolset

    cm = CodeMode(tools=[get_weather, book_flight])
    agent = Agent("openai:gpt-5", toolsets=[CodeModeToolset(cm)])

The ``exec`` description is generated from the catalog exactly as ``codemode serve`` lists it (the
tools' TypeScript signatures, namespaces, upstream MCP servers). Each tool call returns the run's
result JSON (``status``, ``value``, ``output``, ``runId``, ``pendingToolCalls``, ``error``, ``code``).
A run that suspends on slow tools is resumed by the toolset itself (``auto_wait``, default
:attr:`AutoWait.ADAPTER_DEFAULT`: up to 5 minutes and 50 resumes per tool call), so the model pays
one turn for a cell however long its tools take; only a run past that budget, or one with a call
parked for approval, comes back ``waiting`` — telling the model to call ``wait`` with its ``runId``.

Needs ``pydantic-ai-slim`` (``pip install 'codemode[pydantic-ai]'``).
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.tools import Tool
from pydantic_ai.toolsets import FunctionToolset

from . import AutoWait, CodeMode

__all__ = ["CodeModeToolset"]


class CodeModeToolset(FunctionToolset[Any]):
    """``exec`` and ``wait`` over ``code_mode``, for ``Agent(toolsets=[...])``.

    ``session``: the session the agent's runs belong to (default: the runtime's); a run is resumed
    only from its own session, so give each conversation its own. ``auto_wait``: how far a call
    resumes a waiting run itself (``None``: never — every ``waiting`` goes to the model).
    """

    def __init__(
        self,
        code_mode: CodeMode,
        *,
        session: str | None = None,
        id: str | None = "codemode",
        auto_wait: AutoWait | None = AutoWait.ADAPTER_DEFAULT,
    ) -> None:
        self.code_mode = code_mode
        self.session = session
        self.auto_wait = auto_wait
        surface = {t["name"]: t for t in code_mode.model_tools()}
        exec_def, wait_def = surface["exec"], surface["wait"]

        async def run_exec(**args: Any) -> dict[str, Any]:
            result = await code_mode.exec_json(args, session=self.session, auto_wait=self.auto_wait)
            return result.to_dict()

        async def run_wait(**args: Any) -> dict[str, Any]:
            result = await code_mode.wait_json(args, session=self.session, auto_wait=self.auto_wait)
            return result.to_dict()

        super().__init__(
            [
                Tool.from_schema(run_exec, name="exec", description=exec_def["description"], json_schema=exec_def["inputSchema"]),
                Tool.from_schema(run_wait, name="wait", description=wait_def["description"], json_schema=wait_def["inputSchema"]),
            ],
            id=id,
        )
