// The upstream MCP server of the operator console's browser test (tests/e2e/console.mjs), written
// with the official TypeScript SDK (@modelcontextprotocol/sdk, stdio). Tools:
//   - `echo`: returns its input as `structuredContent` and as a JSON text block;
//   - `slow` ({ms}): sleeps `ms` (cancellable: a `notifications/cancelled` ends the sleep), then
//     returns {slept: ms};
//   - a hostile one: named `<img/src/onerror=alert(5)>` (the most hostile name codemode's
//     catalog keeps: it refuses whitespace, control, line-break and bidi characters in names, so
//     the name is markup that needs no space), with `<script>alert(1)</script>` in its description
//     and markup, a `javascript:` URL and bidi isolates in its result.
// At start it writes its pid to the file named by CONSOLE_SERVER_PID_FILE, so the test can kill
// it and watch codemode restart it. While the file named by CONSOLE_SERVER_DOWN_FILE exists it
// refuses to start (exits 3 before serving): the test holds the server `failed` that way for as long
// as it needs to see it, instead of racing the hub's 1 s restart.
//
// The low-level `Server` of the SDK (not `McpServer`): the tools carry raw JSON Schemas, and
// `McpServer` would refuse nothing but warn about the hostile name on stderr at every start.
const fs = require("fs");
const { Server } = require("@modelcontextprotocol/sdk/server/index.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const { ListToolsRequestSchema, CallToolRequestSchema } = require("@modelcontextprotocol/sdk/types.js");

const HOSTILE_NAME = "<img/src/onerror=alert(5)>";

const down = process.env.CONSOLE_SERVER_DOWN_FILE;
if (down && fs.existsSync(down)) {
  process.stderr.write(`console_server: ${down} exists, refusing to start\n`);
  process.exit(3);
}
if (process.env.CONSOLE_SERVER_PID_FILE) fs.writeFileSync(process.env.CONSOLE_SERVER_PID_FILE, `${process.pid}\n`);

const anyObject = { type: "object", additionalProperties: true };
const tools = [
  { name: "echo", description: "Returns its input (structured and as JSON text).", inputSchema: anyObject },
  {
    name: "slow",
    description: "Sleeps `ms` milliseconds, then returns {slept: ms}.",
    inputSchema: { type: "object", properties: { ms: { type: "integer", minimum: 0 } }, required: ["ms"] },
  },
  {
    name: HOSTILE_NAME,
    title: "<b>bold</b> title",
    description: "Hostile: <script>alert(1)</script> <a href=\"javascript:alert(2)\">click</a> \u202Eevil\u2066",
    inputSchema: anyObject,
  },
];

const json = (value) => ({ content: [{ type: "text", text: JSON.stringify(value) }], structuredContent: value });

const server = new Server({ name: "console-tricky", version: "0.0.0" }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
  const args = req.params.arguments || {};
  switch (req.params.name) {
    case "echo":
      return json(args);
    case "slow": {
      const ms = Math.max(0, Number(args.ms) || 0);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, ms);
        extra.signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
      });
      return json({ slept: ms });
    }
    case HOSTILE_NAME:
      return json({
        html: "<script>alert(6)</script>",
        link: "javascript:alert(7)",
        isolate: "\u2066x\u2069 \u200Fy",
        got: args,
      });
    default:
      return { isError: true, content: [{ type: "text", text: `no tool ${JSON.stringify(req.params.name)}` }] };
  }
});

server.connect(new StdioServerTransport()).catch((e) => {
  process.stderr.write(`console_server: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
