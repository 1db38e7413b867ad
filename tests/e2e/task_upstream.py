"""An upstream MCP server (official Python SDK, mcp 2.x `MCPServer`, stdio) whose one tool never
finishes on its own, for tests/e2e/tasks.py.

`hold(marker: str)` appends "started" to the file `marker`, then waits forever. When its request is
cancelled (the client's `notifications/cancelled`, which the SDK turns into a cancellation of the
handler) it appends "cancelled" to the file and re-raises. So the file tells whoever started the
call whether the cancellation reached this server.
"""

import asyncio

import anyio
from mcp.server.mcpserver import MCPServer

app = MCPServer("hold")


def note(marker: str, what: str) -> None:
    with open(marker, "a", encoding="utf-8") as f:
        f.write(what + "\n")


@app.tool()
async def hold(marker: str) -> str:
    """Appends `started` to the file `marker`, then waits until cancelled (appending `cancelled`)."""
    note(marker, "started")
    try:
        await anyio.sleep_forever()
    except (anyio.get_cancelled_exc_class(), asyncio.CancelledError):
        note(marker, "cancelled")
        raise
    return "never"


if __name__ == "__main__":
    app.run()
