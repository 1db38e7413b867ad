// `MCP.<server>.<tool>.value(input)` is the same call with its result unwrapped by one
// rule (structured content first, else JSON text parsed, else text; `isError` throws); the plain
// call still returns the raw `McpToolResult`, and `.value` meets the same input check.
const raw = await MCP.fakeMcp.getSum({ a: 1, b: 2 });
const value = await MCP.fakeMcp.getSum.value({ a: 1, b: 2 });
let bad;
try {
  await MCP.fakeMcp.getSum.value({ a: "x", b: 2 });
} catch (e) {
  bad = e.code;
}
// A namespace member over the same MCP tool unwraps the same way with `.value`.
const ns = await Sums.add.value(1, 2);
return { raw, value, bad, name: MCP.fakeMcp.getSum.value.name, ns };
