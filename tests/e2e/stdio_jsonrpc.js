// The newline-delimited JSON-RPC loop the hand-written test MCP servers share (hostile_server.js,
// logging_server.js, crates/codemode-mcp/tests/crash_on_call.js): `serve(onMessage)` calls
// `onMessage(msg, send)` for every message read from stdin; `send(msg)` writes one to stdout. The
// process exits when stdin closes. No dependencies.
function serve(onMessage) {
  let buf = "";
  const send = (msg) => process.stdout.write(JSON.stringify(msg) + "\n");
  process.stdin.on("data", (chunk) => {
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) onMessage(JSON.parse(line), send);
    }
  });
  process.stdin.on("end", () => process.exit(0));
}

module.exports = { serve };
