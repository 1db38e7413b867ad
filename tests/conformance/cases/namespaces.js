// N1, N6-N8 (contract §10, L5-L6): a plugin namespace and an MCP-owned one, as direct globals and under
// `namespaces`, frozen; their calls are catalog tool calls (counted as such); failures are catchable.
const over = await Shipping.unpaidOver(20);
const marked = await Shipping.markPaid("SHP-1005");
const after = (await namespaces.Shipping.unpaidOver(20)).map((s) => s.id);
const sum = await Sums.add(2, 40);
const failures = [];
for (const f of [() => Shipping.markPaid("SHP-0000"), () => Shipping.unpaidOver("x"), () => Sums.limits.max()]) {
  try {
    await f();
    failures.push("ok");
  } catch (e) {
    // Host failures carry a code and the host's message; the engine's own TypeError wording differs.
    failures.push(e.code ? { name: e.name, code: e.code, message: e.message } : { name: e.name });
  }
}
try {
  Shipping.unpaid = () => [];
} catch (_) {}
const stillReal = (await Shipping.unpaid()).length;
return {
  over: over.map((s) => s.id),
  marked,
  after,
  sum: sum.structuredContent.sum,
  failures,
  stillReal,
  keys: Object.keys(namespaces),
  same: namespaces.Sums === Sums,
  frozen: [Shipping, Sums, Sums.limits, Sums.limits.labels, namespaces].every(Object.isFrozen),
  data: [Shipping.unit, Sums.limits],
  types: [typeof Shipping.unpaid, typeof Shipping.unit],
};
