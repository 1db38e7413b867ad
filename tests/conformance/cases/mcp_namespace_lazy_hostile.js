// V9-V11, M3-M8 (a server's tools made when first reached): `MCP.<server>` makes a tool's
// functions when the cell first reaches the tool (by name, alias or `$call`), yet behaves like an
// object frozen at once: one function per tool under both names, no write let through before it is
// complete, and complete and frozen once enumerated. Names the language reaches for never reach
// the host.
const results = {};
const attempt = (name, f) => {
  try { results[name] = f(); } catch (e) { results[name] = e.name; }
};
const ns = MCP.fakeMcp;
// First reached through `$call`: its members exist afterwards, the same function under both names.
const viaCall = await ns.$call("get-sum", { a: 1, b: 2 });
attempt("aliasIsName", () => ns.getSum === ns["get-sum"]);
attempt("fnNames", () => [ns.getSum.name, ns.getSum.value.name]);
attempt("valueStable", () => ns.getSum.value === ns["get-sum"].value);
attempt("in", () => ["getSum" in ns, "get-sum" in ns, "nope" in ns, "then" in ns, "$call" in ns, "resources" in ns]);
attempt("missingType", () => typeof ns.nope);
attempt("thenValue", () => String(ns.then));
attempt("symbolValue", () => String(ns[Symbol.iterator]));
// Mutations, strict mode: each one is refused with a TypeError (the first completes the namespace).
(function () {
  "use strict";
  attempt("assignTool", () => { ns.getSum = () => 1; return "allowed"; });
  attempt("assignNew", () => { ns.evil = () => 1; return "allowed"; });
  attempt("deleteHelper", () => { delete ns.$call; return "allowed"; });
  attempt("assignValue", () => { ns.getSum.value = 1; return "allowed"; });
})();
attempt("define", () => Object.defineProperty(ns, "evil", { value: 1 }) && "allowed");
attempt("setPrototype", () => Object.setPrototypeOf(ns, { hijack: 1 }) && "allowed");
attempt("hijacked", () => ("hijack" in ns) || ("evil" in ns) || Object.getPrototypeOf(ns) !== null ? "YES" : "no");
const unwrapped = await ns.getSum.value({ a: 2, b: 2 });
let unknown;
try { await ns.nope({}); } catch (e) { unknown = [e.code, e.message.includes("get-sum")]; }
const descriptor = (key) => (({ writable, enumerable, configurable }) => ({ writable, enumerable, configurable }))(
  Object.getOwnPropertyDescriptor(ns, key),
);
return {
  results,
  viaCall: viaCall.structuredContent.sum,
  unwrapped,
  unknown,
  frozen: Object.isFrozen(ns),
  keys: Object.keys(ns).sort(),
  member: descriptor("getSum"),
  helper: descriptor("$call"),
  sameAfterComplete: ns.getSum === ns["get-sum"] && MCP.fakeMcp === ns,
};
