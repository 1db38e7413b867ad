// K1-K5, B10: `tools.<name>` functions are made when first reached (a cell pays for what it
// touches, not for the catalog), yet `tools` behaves exactly like an object frozen at boot. Before a
// cell has enumerated it, no trap lets a write through: assignment, definition, deletion, a new
// prototype, preventExtensions; afterwards it is complete (every convenience, in ALL_TOOLS order of
// names) and frozen. Internal names and symbols never reach the host.
const results = {};
const attempt = (name, f) => {
  try { results[name] = f(); } catch (e) { results[name] = e.name; }
};
// Before any enumeration: lookups one by one.
attempt("echoType", () => typeof tools.demo_echo);
attempt("sameFunction", () => tools.demo_echo === tools.demo_echo);
attempt("inEcho", () => "demo_echo" in tools);
attempt("inMissing", () => "demo_nope" in tools);
attempt("inThen", () => "then" in tools);
attempt("thenValue", () => String(tools.then));
attempt("protoValue", () => String(tools.__proto__));
attempt("symbolValue", () => String(tools[Symbol.iterator]));
// Mutations, strict mode: each one is refused with a TypeError.
(function () {
  "use strict";
  attempt("assignNew", () => { tools.fresh = () => 1; return "allowed"; });
  attempt("assignHelper", () => { tools.search = () => 1; return "allowed"; });
  attempt("assignConvenience", () => { tools.demo_sleep = () => 1; return "allowed"; });
  attempt("deleteHelper", () => { delete tools.call; return "allowed"; });
})();
attempt("define", () => Object.defineProperty(tools, "demo_fail", { value: 1 }) && "allowed");
attempt("setPrototype", () => Object.setPrototypeOf(tools, { hijack: 1 }) && "allowed");
attempt("reflectSet", () => Reflect.set(tools, "x", 1));
attempt("preventExtensions", () => Object.isExtensible(Object.preventExtensions(tools)));
attempt("hijacked", () => ("hijack" in tools) || ("fresh" in tools) || Object.getPrototypeOf(tools) !== null ? "YES" : "no");
// `MCP` is looked up the same way: by name or alias, no writes, complete and frozen when enumerated.
attempt("mcpAliasIsName", () => MCP.fakeMcp === MCP["fake-mcp"]);
attempt("mcpIn", () => ["fakeMcp" in MCP, "fake-mcp" in MCP, "nope" in MCP, "then" in MCP]);
attempt("mcpMissing", () => String(MCP.nope));
(function () {
  "use strict";
  attempt("mcpAssign", () => { MCP.evil = {}; return "allowed"; });
  attempt("mcpDelete", () => { delete MCP.fakeMcp; return "allowed"; });
})();
attempt("mcpDefine", () => Object.defineProperty(MCP, "evil", { value: 1 }) && "allowed");
attempt("mcpKeys", () => Object.keys(MCP).sort());
attempt("mcpFrozen", () => Object.isFrozen(MCP));
// Enumeration: complete and frozen.
const keys = Object.keys(tools);
const names = keys.filter((k) => k.startsWith("demo_"));
const idOf = (name) => ALL_TOOLS.find((t) => t.name === name)?.id;
const result = await tools.demo_echo({ lazy: true });
return {
  results,
  frozen: Object.isFrozen(tools),
  otherKeys: keys.filter((k) => !k.startsWith("demo_")).sort(),
  conveniences: names.sort(),
  everyConvenienceIsACatalogTool: names.every((n) => typeof idOf(n) === "string"),
  descriptor: (({ writable, enumerable, configurable }) => ({ writable, enumerable, configurable }))(
    Object.getOwnPropertyDescriptor(tools, "demo_echo"),
  ),
  result,
};
