// MCP tools named like JavaScript internals (`then`, `toString`) are never properties of
// the namespace: awaiting or coercing it calls nothing (callCount counts only the explicit calls).
const ns = MCP.fakeMcp;
const awaited = await ns;
const coerced = {};
for (const [k, f] of Object.entries({ string: () => String(ns), template: () => `${ns}`, plus: () => +ns })) {
  try { coerced[k] = f(); } catch (e) { coerced[k] = e.name; }
}
coerced.stringify = JSON.stringify(ns);
json(ns);
const viaCall = await ns.$call("then", {});
const toStr = await ns.$call("toString", {});
let unknown;
try { await ns.$call("nope", {}); } catch (e) { unknown = e.code; }
const dts = await API.read("mcp/fake-mcp.d.ts");
return {
  awaitedIsNamespace: awaited === ns,
  coerced,
  keys: Object.keys(ns).sort(),
  own: { then: Object.prototype.hasOwnProperty.call(ns, "then"), toString: Object.prototype.hasOwnProperty.call(ns, "toString") },
  viaCall: viaCall.content[0].text,
  toStr: toStr.content[0].text,
  unknown,
  callForm: (await ns.$api("then")).tools[0].call,
  dtsCallForm: dts.includes('call as MCP.fakeMcp.$call("then", input)'),
  dtsPwned: dts.split("\n").some((l) => l.includes("pwned") && !/^\s*(\*|\/\/|\/\*\*)/.test(l)),
};
