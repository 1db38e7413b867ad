// A deliberately broken MCP server for the upstream tests: it answers `initialize` and
// `tools/list` correctly, then on the first `tools/call` either exits (default) or never
// answers (`--hang`). Plain newline-delimited JSON-RPC on stdio, no dependencies.
const hang = process.argv.includes("--hang");
let buf = "";
const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
process.stdin.on("data", (chunk) => {
  buf += chunk;
  let nl;
  while ((nl = buf.indexOf("\n")) >= 0) {
    const line = buf.slice(0, nl).trim();
    buf = buf.slice(nl + 1);
    if (!line) continue;
    const msg = JSON.parse(line);
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
  }
});
process.stdin.on("end", () => process.exit(0));
