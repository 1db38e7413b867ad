// An upstream MCP server that logs: on `tools/call` of `say` it sends a
// `notifications/message` at the level given in the input (default "warning"), then answers.
// Newline-delimited JSON-RPC on stdio (tests/e2e/stdio_jsonrpc.js), no packages.
require("./stdio_jsonrpc.js").serve((msg, send) => {
  if (msg.method === "initialize") {
    send({ jsonrpc: "2.0", id: msg.id, result: {
      protocolVersion: msg.params.protocolVersion,
      capabilities: { tools: {}, logging: {} },
      serverInfo: { name: "logger", version: "0.0.0" },
    } });
  } else if (msg.method === "tools/list") {
    send({ jsonrpc: "2.0", id: msg.id, result: { tools: [
      { name: "say", description: "Logs a message.", inputSchema: { type: "object", properties: { level: { type: "string" }, text: { type: "string" } } } },
    ] } });
  } else if (msg.method === "tools/call") {
    const args = msg.params.arguments || {};
    send({ jsonrpc: "2.0", method: "notifications/message", params: {
      level: args.level || "warning", logger: "app", data: args.text || "hello from upstream",
    } });
    send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "said" }] } });
  } else if (msg.id !== undefined) {
    send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "method not found" } });
  }
});
