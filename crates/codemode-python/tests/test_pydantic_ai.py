"""PydanticAI end to end, with PydanticAI's own scripted model (FunctionModel, no
network): the agent has `exec` and `wait` instead of its tools; its `exec` code calls two Python
tools and suspends on the slow one. Without auto-wait the model resumes it through `wait`; with
the toolset's default auto-wait the model sees one tool call and one result, however many times
the cell suspended. The final answer uses the result."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from codemode import CodeMode, tool
from codemode.pydantic_ai import CodeModeToolset
from conftest import run

calls: list[str] = []


@tool(read_only=True)
def find_customer(email: str) -> dict:
    """Looks a customer up by email."""
    calls.append("find_customer")
    return {"id": "c-42", "name": "Ada", "email": email}


async def open_invoices(customer_id: str) -> list:
    """Open invoices of a customer (slow: a billing system)."""
    calls.append("open_invoices")
    await asyncio.sleep(0.8)
    return [{"id": "inv-1", "amount": 120.5}, {"id": "inv-2", "amount": 79.5}]


CELL = """
const c = await tools.find_customer({ email: "ada@example.com" });
const invoices = await tools.open_invoices({ customer_id: c.id });
const total = invoices.reduce((s, i) => s + i.amount, 0);
console.log(`${invoices.length} invoices`);
return { name: c.name, total };
"""


def last_return(messages: list[ModelMessage]) -> Any:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    assert part.outcome == "success", (part.outcome, part.content)
                    return part.content
    raise AssertionError("no tool return yet")


seen: dict[str, Any] = {}


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: exec the cell, then wait while the run is waiting, then answer from the value."""
    seen.setdefault("tools", {t.name: t for t in info.function_tools})
    if not any(isinstance(m, ModelResponse) for m in messages):
        return ModelResponse(parts=[ToolCallPart("exec", {"code": CELL}, tool_call_id="call-0")])
    result = last_return(messages)
    seen.setdefault("statuses", []).append(result["status"])
    if result["status"] == "waiting":
        n = sum(isinstance(m, ModelResponse) for m in messages)
        return ModelResponse(parts=[ToolCallPart("wait", json.dumps({"runId": result["runId"]}), tool_call_id=f"call-{n}")])
    assert result["status"] == "completed", result
    value = result["value"]
    return ModelResponse(parts=[TextPart(f"{value['name']} owes {value['total']:.2f}")])


def test_an_agent_runs_a_cell_that_suspends_and_answers_from_its_result() -> None:
    async def main() -> str:
        cm = CodeMode(tools=[find_customer, open_invoices], config={"tools": {"codeMode": {"timeoutMs": 300}}})
        toolset = CodeModeToolset(cm, session="conversation-1", auto_wait=None)
        agent = Agent(FunctionModel(scripted), toolsets=[toolset])
        result = await agent.run("How much does ada@example.com owe?")
        return result.output

    answer = run(main())
    assert answer == "Ada owes 200.00"
    # The agent saw exactly two tools, with the generated exec description.
    assert set(seen["tools"]) == {"exec", "wait"}
    exec_def = seen["tools"]["exec"]
    assert "plugin:python:find_customer({email: string})" in exec_def.description
    assert exec_def.parameters_json_schema["required"] == ["code"]
    # It suspended on the slow tool and resumed through wait.
    assert seen["statuses"][0] == "waiting"
    assert seen["statuses"][-1] == "completed"
    assert calls == ["find_customer", "open_invoices"]


THREE_SLOW = """
const c = await tools.find_customer({ email: "ada@example.com" });
let total = 0;
for (let i = 0; i < 3; i++) {
  const invoices = await tools.open_invoices({ customer_id: c.id });
  total += invoices.reduce((s, inv) => s + inv.amount, 0);
  console.log(`round ${i}`);
}
return { name: c.name, total };
"""


def test_with_auto_wait_the_model_sees_one_call_and_one_result_for_a_cell_that_suspended_three_times() -> None:
    results: list[dict[str, Any]] = []

    def one_call(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart("exec", {"code": THREE_SLOW}, tool_call_id="call-0")])
        result = last_return(messages)
        results.append(result)
        if result["status"] == "waiting":
            return ModelResponse(parts=[ToolCallPart("wait", {"runId": result["runId"]}, tool_call_id="call-again")])
        return ModelResponse(parts=[TextPart(f"{result['value']['name']} owes {result['value']['total']:.2f}")])

    async def main() -> str:
        # Each slow call (0.8 s) outlasts the run's 300 ms: the run suspends on every one of them.
        cm = CodeMode(tools=[find_customer, open_invoices], config={"tools": {"codeMode": {"timeoutMs": 300}}})
        agent = Agent(FunctionModel(one_call), toolsets=[CodeModeToolset(cm, session="conversation-2")])
        return (await agent.run("How much does ada@example.com owe, three times over?")).output

    assert run(main()) == "Ada owes 600.00"
    assert [r["status"] for r in results] == ["completed"], "one tool result, and it is the end"
    telemetry = results[0]["telemetry"]
    assert telemetry["waitCount"] >= 3, telemetry
    assert [o.get("text") for o in results[0]["output"]] == ["round 0", "round 1", "round 2"], results[0]["output"]
    # What the cell read from its tools, against what went back to the model.
    assert telemetry["toolResultBytes"] > 0 and telemetry["returnedBytes"] > 0, telemetry
