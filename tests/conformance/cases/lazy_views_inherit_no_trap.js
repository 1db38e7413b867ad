// K1-K5, V9: the lazy views `tools`, `MCP` and `MCP.<server>` take no proxy trap
// from `Object.prototype`. A proxy reads its handler's traps as ordinary properties, so a handler
// inheriting from `Object.prototype` would run a cell's function there for any trap it lacks, with
// the view's target itself, which that function could then write to. Every trap name is poisoned
// before the views are touched; none may run, and nothing may reach a target.
const TRAPS = ["getPrototypeOf", "setPrototypeOf", "isExtensible", "preventExtensions", "getOwnPropertyDescriptor",
  "defineProperty", "has", "get", "set", "deleteProperty", "ownKeys", "apply", "construct"];
const called = [];
let written = 0;
for (const trap of TRAPS) {
  Object.defineProperty(Object.prototype, trap, {
    __proto__: null,
    configurable: true,
    writable: true,
    value: function (target) {
      called.push(trap);
      try { target.evil = () => "pwned"; written++; } catch (_) { /* a frozen target */ }
      return trap === "getPrototypeOf" ? null : undefined;
    },
  });
}
const protos = {};
const views = [["tools", () => tools], ["MCP", () => MCP], ["namespace", () => MCP.fakeMcp]];
for (const [name, view] of views) {
  const v = view();
  // The prototype first: the trap the views' handlers used to lack.
  protos[name] = Reflect.getPrototypeOf(v);
  // Every other operation (whether each succeeds does not matter here: with `get` and `set` on
  // `Object.prototype`, the descriptors the engine hands around are the cell's own to break).
  const ops = [
    () => Reflect.has(v, "evil"),
    () => Reflect.get(v, "evil"),
    () => Reflect.defineProperty(v, "evil", { __proto__: null, value: 1 }),
    () => Reflect.deleteProperty(v, "evil"),
    () => Reflect.set(v, "evil", 1),
    () => Reflect.setPrototypeOf(v, null),
    () => Reflect.ownKeys(v),
    () => Reflect.getOwnPropertyDescriptor(v, "evil"),
    () => Reflect.isExtensible(v),
    () => Reflect.preventExtensions(v),
  ];
  for (const op of ops) {
    try { op(); } catch (_) { /* see above */ }
  }
}
for (const trap of TRAPS) delete Object.prototype[trap];
return {
  called,
  written,
  protos,
  frozen: [Object.isFrozen(tools), Object.isFrozen(MCP), Object.isFrozen(MCP.fakeMcp)],
  evil: ["evil" in tools, "evil" in MCP, "evil" in MCP.fakeMcp],
};
