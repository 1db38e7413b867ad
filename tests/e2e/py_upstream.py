"""An upstream MCP server written with the official Python SDK (mcp 2.x, `MCPServer`), on stdio.

`slow_read(ms: int) -> int` sleeps `ms` milliseconds and returns `ms`. Its return annotation makes
the SDK declare an output schema (`{result: integer}`: a primitive result is wrapped) and send the
result as `structuredContent` too. It says it is read-only (`readOnlyHint`), which codemode believes
only for a server its configuration trusts.
"""

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

app = MCPServer("py")


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
async def slow_read(ms: int) -> int:
    """Sleeps `ms` milliseconds, then returns `ms`."""
    await anyio.sleep(ms / 1000)
    return ms


if __name__ == "__main__":
    app.run()
