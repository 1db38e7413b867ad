"""Type-checked, never run: the package used as its README and book pages use it, under
``mypy --strict`` (scripts/test-python.sh), against the installed wheel's ``py.typed`` package."""

from __future__ import annotations

from typing import Any

from agents import Agent, FunctionTool
from langchain_core.tools import BaseTool
from pydantic_ai import Agent as PydanticAgent

from codemode import AutoWait, CodeMode, CodeModeError, Result, SyncCodeMode, tool
from codemode.langchain import code_mode_tools as langchain_tools
from codemode.openai_agents import code_mode_tools as agents_tools
from codemode.pydantic_ai import CodeModeToolset


@tool(read_only=True)
def get_weather(city: str, unit: str = "c") -> dict[str, Any]:
    """Current weather of a city."""
    return {"city": city, "temp": 21}


@tool
def find(**filters: str) -> list[dict[str, str]]:
    """Records matching every filter."""
    return [filters]


async def main() -> None:
    cm = CodeMode(tools=[get_weather, find], config={"tools": {"codeMode": {"timeoutMs": 5000}}})
    r: Result = await cm.exec("return (await tools.get_weather({city: 'Oslo'})).temp", auto_wait=AutoWait(max_wall_s=10))
    while r.status == "waiting" and r.run_id is not None:
        r = await cm.wait(r.run_id)
    if r.status == "failed" and r.error is not None:
        raise RuntimeError(f"{r.error.code}: {r.error.message}")
    value: Any = r.value
    print(value, r.text)
    data: bytes = await cm.export_run("cm_x", session="s")
    run_id: str = await cm.import_run(data)
    await cm.approve(run_id, 1, deny="no")
    names: list[str] = [t["name"] for t in cm.model_tools()]
    lc: list[BaseTool] = langchain_tools(cm, session="conversation-1", agent="support", auto_wait=None)
    oa: list[FunctionTool] = agents_tools(cm, session="conversation-2")
    Agent(name="assistant", tools=list(oa))
    PydanticAgent("test", toolsets=[CodeModeToolset(cm, session="conversation-3")])
    print(names, lc)


def sync() -> None:
    with SyncCodeMode(tools=[get_weather]) as cm:
        r = cm.exec("return 1")
        assert r.status == "completed"
    try:
        CodeMode(config={"tools": {"codeMode": {"timeoutMs": "soon"}}})
    except CodeModeError as e:
        code: str = e.code
        print(code, e.message)
