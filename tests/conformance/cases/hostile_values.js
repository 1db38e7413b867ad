// contract O3/O4: hostile values keep the documented mapping through `return` and through a
// nested call's input and result (callValue): getters are read, Proxies are read through their
// traps, a self-returning toJSON is a cycle, and lone UTF-16 surrogates become U+FFFD.
const lone = "a\uD800b\uDC00c";
const pair = "\uD83D\uDE00";
const getter = { get x() { return 5; } };
const proxy = new Proxy({ a: 1 }, { get: (t, k) => (k === "a" ? 2 : t[k]) });
const selfJson = { v: 1, toJSON() { return this; } };
const nested = { list: [lone, pair], deep: { getter } };
const values = { lone, pair, getter, proxy, selfJson, nested };
const echoed = await tools.demo_echo(values);
let throwing;
try {
  await tools.demo_echo({ get boom() { throw new Error("getter refused"); } });
} catch (e) {
  throwing = e.message;
}
return { direct: values, echoed, throwing };
