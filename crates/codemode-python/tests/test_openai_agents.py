"""The OpenAI Agents SDK end to end, with a scripted ``Model`` (the pattern of the SDK's own
tests; no network, no API key, tracing off): ``Agent`` and ``Runner`` get ``exec`` and ``wait``.
The cell suspends on a slow Python tool; without auto-wait the model resumes it with ``wait``, with
the default it sees one call. Arguments that are not JSON come back as a failed result, and a
hostile cell stays in the sandbox."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import Agent, ModelResponse, RunConfig, Runner, Usage, set_tracing_disabled
from agents.models.interface import Model
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from billing import CELL, SLOW, find_customer, open_invoices
from codemode import CodeMode
from codemode.openai_agents import code_mode_tools
from conftest import run

set_tracing_disabled(True)
NO_TRACING = RunConfig(tracing_disabled=True)


def text(content: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=content, annotations=[], logprobs=[])],
    )


def function_call(name: str, arguments: str, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{call_id}", type="function_call", call_id=call_id, name=name, arguments=arguments, status="completed"
    )


def field(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


class ScriptedModel(Model):
    """A model whose output is a function of the input items; it records every turn."""

    def __init__(self, script: Callable[[list[Any]], list[Any]]):
        self.script = script
        self.turns: list[dict[str, Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                           output_schema: Any, handoffs: Any, tracing: Any, **kwargs: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.turns.append({"input": items, "tools": tools})
        return ModelResponse(output=self.script(items), usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests use Runner.run")
        yield  # pragma: no cover


def exec_wait_answer(first_arguments: str) -> Callable[[list[Any]], list[Any]]:
    def script(items: list[Any]) -> list[Any]:
        last = items[-1]
        if field(last, "type") != "function_call_output":
            return [function_call("exec", first_arguments, "call_0")]
        result = json.loads(field(last, "output"))
        if result["status"] == "waiting":
            return [function_call("wait", json.dumps({"runId": result["runId"]}), f"call_{len(items)}")]
        if result["status"] == "failed":
            return [text(f"failed: {result['code']}: {result['error']}")]
        return [text(f"{result['value']['name']} owes {result['value']['owed']}")]

    return script


def outputs(model: ScriptedModel) -> list[dict]:
    last = model.turns[-1]["input"]
    return [json.loads(field(i, "output")) for i in last if field(i, "type") == "function_call_output"]


def test_agent_and_runner_exec_wait_and_answer() -> None:
    async def main() -> None:
        cm = CodeMode(tools=[find_customer, open_invoices], config=SLOW)
        surface = {t["name"]: t for t in cm.model_tools()}
        model = ScriptedModel(exec_wait_answer(json.dumps({"code": CELL})))
        agent = Agent(name="billing", instructions="Answer briefly.", model=model,
                      tools=code_mode_tools(cm, session="conv-1", auto_wait=None))
        result = await Runner.run(agent, "How much does ada@example.com owe?", run_config=NO_TRACING, max_turns=8)
        assert result.final_output == "Ada owes 200"
        statuses = [o["status"] for o in outputs(model)]
        assert statuses[0] == "waiting" and statuses[-1] == "completed", statuses
        tools = {t.name: t for t in model.turns[0]["tools"]}
        assert set(tools) == {"exec", "wait"}
        assert tools["exec"].description == surface["exec"]["description"]
        # Not rewritten for strict mode: optional fields stay optional.
        assert tools["exec"].params_json_schema == surface["exec"]["inputSchema"]
        # The run belonged to the adapter's session.
        assert (await cm.wait(outputs(model)[0]["runId"], session="another")).status == "failed"

    run(main())


def test_auto_wait_spends_one_turn() -> None:
    async def main() -> None:
        cm = CodeMode(tools=[find_customer, open_invoices], config=SLOW)
        model = ScriptedModel(exec_wait_answer(json.dumps({"code": CELL})))
        agent = Agent(name="billing", model=model, tools=code_mode_tools(cm, session="conv-2"))
        result = await Runner.run(agent, "How much?", run_config=NO_TRACING, max_turns=8)
        assert result.final_output == "Ada owes 200"
        assert [o["status"] for o in outputs(model)] == ["completed"]
        assert len(model.turns) == 2

    run(main())


def test_bad_arguments_and_a_hostile_cell() -> None:
    # The host's globals are not there, and `fetch` is a stub that refuses.
    hostile = (
        "const names = ['process', 'Deno', 'Bun', 'XMLHttpRequest', 'WebSocket'];"
        " const found = names.filter(n => typeof globalThis[n] !== 'undefined');"
        " let net; try { await fetch('http://127.0.0.1:1/'); net = 'reached' } catch (e) { net = 'refused' }"
        " return { name: (found.join(',') || 'none') + '/' + net, owed: 0 }"
    )

    async def main() -> None:
        cm = CodeMode(tools=[find_customer])
        # Arguments that are not JSON: a failed result, the run goes on to the model's answer.
        model = ScriptedModel(exec_wait_answer("{not json"))
        agent = Agent(name="a", model=model, tools=code_mode_tools(cm))
        result = await Runner.run(agent, "x", run_config=NO_TRACING, max_turns=4)
        assert str(result.final_output).startswith("failed: invalid_input: the arguments are not JSON"), result.final_output
        model = ScriptedModel(exec_wait_answer(json.dumps({"code": hostile})))
        agent = Agent(name="a", model=model, tools=code_mode_tools(cm))
        result = await Runner.run(agent, "x", run_config=NO_TRACING, max_turns=4)
        assert result.final_output == "none/refused owes 0", result.final_output

    run(main())
