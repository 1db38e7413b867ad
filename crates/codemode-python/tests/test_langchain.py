"""LangChain 1.x and LangGraph end to end, with a scripted chat model (a function of the
conversation, as LangChain's own agent tests script theirs; no network): ``create_agent`` and a
hand-built LangGraph graph (``ToolNode``) get ``exec`` and ``wait`` instead of their tools. The
model's cell calls a Python tool that suspends the run; without auto-wait the model resumes it
with ``wait``, with the default auto-wait it sees one call. A hostile cell stays in the sandbox.
The tools carry the schemas and description the runtime generates, and a run belongs to the
adapter's session."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from billing import CELL, SLOW, find_customer, open_invoices
from codemode import CodeMode
from codemode.langchain import code_mode_tools
from conftest import run


class ScriptedChatModel(BaseChatModel):
    """A chat model whose reply is a function of the conversation; it records the tools bound."""

    script: Callable[[list[BaseMessage]], AIMessage]
    seen_tools: list[list[dict]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.seen_tools.append(kwargs.get("tools", []))
        return ChatResult(generations=[ChatGeneration(message=self.script(list(messages)))])


def call(name: str, args: dict, n: int) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call_{n}", "type": "tool_call"}])


def exec_wait_answer(cell: str) -> Callable[[list[BaseMessage]], AIMessage]:
    """exec(cell); while the result is waiting, wait(runId); then answer from the value."""

    def script(messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            return call("exec", {"code": cell}, 0)
        assert isinstance(last, ToolMessage), last
        result = json.loads(str(last.content))
        if result["status"] == "waiting":
            return call("wait", {"runId": result["runId"]}, len(messages))
        if result["status"] == "failed":
            return AIMessage(content=f"failed: {result['code']}: {result['error']}")
        return AIMessage(content=f"{result['value']['name']} owes {result['value']['owed']}")

    return script


def tool_messages(messages: list[BaseMessage]) -> list[dict]:
    return [json.loads(str(m.content)) for m in messages if isinstance(m, ToolMessage)]


def test_create_agent_execs_waits_and_answers() -> None:
    async def main() -> None:
        cm = CodeMode(tools=[find_customer, open_invoices], config=SLOW)
        surface = {t["name"]: t for t in cm.model_tools()}
        model = ScriptedChatModel(script=exec_wait_answer(CELL))
        agent = create_agent(model, tools=code_mode_tools(cm, session="conv-1", auto_wait=None))
        out = await agent.ainvoke({"messages": [HumanMessage("How much does ada@example.com owe?")]})
        assert out["messages"][-1].content == "Ada owes 200"
        statuses = [r["status"] for r in tool_messages(out["messages"])]
        assert statuses[0] == "waiting" and statuses[-1] == "completed" and "wait" in [
            m.name for m in out["messages"] if isinstance(m, ToolMessage)
        ], statuses
        # The model was given the runtime's own tools: names, schemas, the generated description.
        bound = {t["function"]["name"]: t["function"] for t in model.seen_tools[0]}
        assert set(bound) == {"exec", "wait"}
        assert bound["exec"]["description"] == surface["exec"]["description"]
        assert "plugin:python:find_customer" in bound["exec"]["description"]
        assert bound["exec"]["parameters"]["required"] == surface["exec"]["inputSchema"]["required"]
        # The run belonged to the adapter's session: another session cannot resume it.
        first = tool_messages(out["messages"])[0]
        stranger = await cm.wait(first["runId"], session="someone-else")
        assert stranger.status == "failed"

    run(main())


def test_auto_wait_spends_one_turn_and_the_sync_path_works() -> None:
    cm = CodeMode(tools=[find_customer, open_invoices], config=SLOW)
    model = ScriptedChatModel(script=exec_wait_answer(CELL))
    agent = create_agent(model, tools=code_mode_tools(cm, session="conv-2"))
    # `invoke` (sync): the tool runs the cell on a loop of its own.
    out = agent.invoke({"messages": [HumanMessage("How much?")]})
    assert out["messages"][-1].content == "Ada owes 200"
    results = tool_messages(out["messages"])
    assert [r["status"] for r in results] == ["completed"], results
    assert results[0]["telemetry"]["waitCount"] >= 1, "the adapter resumed the run itself"


def test_a_langgraph_tool_node_runs_them_and_a_hostile_cell_stays_in_the_sandbox(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    # `require` is refused before the cell runs; the host's file is untouched.
    hostile = f"require('fs').writeFileSync({json.dumps(str(target))}, 'x'); return {{ name: 'escaped', owed: 1 }}"

    async def main() -> None:
        cm = CodeMode(tools=[find_customer])
        tools = code_mode_tools(cm, session="graph")
        model = ScriptedChatModel(script=exec_wait_answer(hostile)).bind_tools(tools)

        async def call_model(state: MessagesState) -> dict:
            return {"messages": [await model.ainvoke(state["messages"])]}

        g = StateGraph(MessagesState)
        g.add_node("model", call_model)
        g.add_node("tools", ToolNode(tools))
        g.add_edge(START, "model")
        g.add_conditional_edges("model", tools_condition)
        g.add_edge("tools", "model")
        out = await g.compile().ainvoke({"messages": [HumanMessage("try to escape")]})
        answer = out["messages"][-1].content
        assert answer.startswith("failed: module_access_denied"), answer
        assert not target.exists()
        # A malformed call is a failed result the model sees, not an exception ending the graph.
        bad = await tools[0].ainvoke({"language": "cobol"})
        assert bad["status"] == "failed" and bad["code"] == "invalid_input", bad

    run(main())
