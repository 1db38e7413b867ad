// A deliberately broken MCP server for the upstream tests: it answers `initialize` and
// `tools/list` correctly, then on the first `tools/call` either exits (default) or never
// answers (`--hang`). Newline-delimited JSON-RPC on stdio (tests/e2e/stdio_jsonrpc.js), no packages.
const hang = process.argv.includes("--hang");
require("../../../tests/e2e/stdio_jsonrpc.js").serve((msg, send) => {
  if (msg.method === "initialize") {
    send({ jsonrpc: "2.0", id: msg.id, result: {
      protocolVersion: msg.params.protocolVersion,
      capabilities: { tools: {} },
      serverInfo: { name: "crash-on-call", version: "0.0.0" },
    } });
  } else if (msg.method === "tools/list") {
    send({ jsonrpc: "2.0", id: msg.id, result: { tools: [
      { name: "boom", description: "Crashes the server.", inputSchema: { type: "object" } },
    ] } });
  } else if (msg.method === "tools/call") {
    if (!hang) process.exit(3);
  } else if (msg.id !== undefined) {
    send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "method not found" } });
  }
});
