// The `get` traps of `tools`, `MCP` and an MCP server's namespace (which quickjs-wasi answers
// natively for own data properties, calling the prelude's trap for everything else) answer what
// they answered before, on every engine: an accessor a cell puts on Object.prototype is never read
// through them (their targets have null prototypes), while a plugin namespace, a plain frozen
// object, reads it once per access; symbol keys answer undefined; an unknown tool or MCP tool is a
// function that fails with nested_tool_failed; real members still call.
let reads = 0;
Object.defineProperty(Object.prototype, "probe", { get() { reads += 1; return undefined; }, configurable: true });
const seen = {};
const count = (label, f) => {
  const before = reads;
  let kind;
  try { kind = typeof f(); } catch (e) { kind = "threw " + e.name; }
  seen[label] = { kind, reads: reads - before };
};
count("tools.probe", () => tools.probe);
count("MCP.probe", () => MCP.probe);
count("MCP.fakeMcp.probe", () => MCP.fakeMcp.probe);
count("Shipping.probe", () => Shipping.probe);
count("tools[Symbol.iterator]", () => tools[Symbol.iterator]);
count("MCP.fakeMcp[Symbol.toPrimitive]", () => MCP.fakeMcp[Symbol.toPrimitive]);
count("tools.demo_echo", () => tools.demo_echo);
count("MCP.fakeMcp.getSum", () => MCP.fakeMcp.getSum);
count("Shipping.unpaidOver", () => Shipping.unpaidOver);
delete Object.prototype.probe;
let missing;
try { await tools.no_such_tool_here({}); } catch (e) { missing = e.code; }
let missingMcp;
try { await MCP.fakeMcp.noSuchTool({}); } catch (e) { missingMcp = e.code; }
const echoed = await tools.demo_echo({ ok: true });
const sum = await MCP.fakeMcp.getSum({ a: 2, b: 3 });
return { seen, missing, missingMcp, echoed, sum: sum.structuredContent.sum };
