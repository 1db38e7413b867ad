"""A PydanticAI agent using `codemode serve` through its own MCP toolset, driven by
PydanticAI's scripted `FunctionModel` (no network, no real model).

Usage: pydantic_agent.py CODEMODE_BIN CONFIG_FILE SNAPSHOT_DIR {stdio|http}

`MCPToolset` (FastMCP's client underneath) negotiates MCP 2026-07-28 where it can, the sessionless
protocol under which `wait` used to fail with `unavailable or expired` over HTTP. The scripted model:
  1. sees exactly the tools `exec` and `wait`;
  2. calls `exec` with a cell that calls two demo tools, one slower than `timeoutMs`: `waiting`;
  3. calls `wait` with the runId: `completed`;
  4. answers with a sentence built from the run's value, which is the agent's final output.
Exit status 0 on success; an AssertionError (non-zero) names what failed.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from client import HttpServer

CELL = (
    "const s = await tools.demo_shipping_list({}); "
    "const w = await tools.demo_sleep({ ms: 1500 }); "
    "return { unpaid: s.filter((x) => !x.paid).length, slept: w.slept }"
)


def last_return(messages: list[ModelMessage]):
    """The content of the newest tool return, as a dict."""
    for message in reversed(messages):
        for part in reversed(getattr(message, "parts", [])):
            if isinstance(part, ToolReturnPart):
                content = part.content
                if isinstance(content, str):
                    content = json.loads(content)
                return content
    return None


class Script:
    """The scripted model: exec, then wait while the result is `waiting`, then the answer."""

    def __init__(self):
        self.tools_seen: list[list[str]] = []
        self.calls: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tools_seen.append(sorted(t.name for t in info.function_tools))
        result = last_return(messages)
        if result is None:
            self.calls.append("exec")
            return ModelResponse(parts=[ToolCallPart("exec", {"code": CELL})])
        if result.get("status") == "waiting":
            self.calls.append("wait")
            return ModelResponse(parts=[ToolCallPart("wait", {"runId": result["runId"]})])
        assert result.get("status") == "completed", f"the run did not complete: {result}"
        value = result["value"]
        return ModelResponse(parts=[TextPart(f"{value['unpaid']} unpaid shipments; slept {value['slept']} ms")])


async def run(toolset: MCPToolset) -> None:
    script = Script()
    agent = Agent(FunctionModel(script), toolsets=[toolset])
    async with agent:
        result = await agent.run("How many shipments are unpaid?")
    assert result.output == "6 unpaid shipments; slept 1500 ms", result.output
    assert all(seen == ["exec", "wait"] for seen in script.tools_seen), script.tools_seen
    assert script.calls[0] == "exec" and "wait" in script.calls, f"the run never suspended: {script.calls}"


async def main() -> None:
    bin_path, config, snapdir, transport = sys.argv[1:5]
    if transport == "stdio":
        stdio = StdioTransport(
            command=bin_path,
            args=["serve", "--config", config, "--snapshot-dir", snapdir, "--demo-tools"],
            env={**os.environ, "RUST_LOG": "warn"},
        )
        await run(MCPToolset(stdio))
    else:
        server = HttpServer(bin_path, config, snapdir)
        try:
            await run(MCPToolset(server.url))
        finally:
            server.stop()
    print(f"ok: pydantic-ai agent over {transport}")


if __name__ == "__main__":
    asyncio.run(main())
