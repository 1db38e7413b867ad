// contract O3/O4: non-JSON values become plain strings or JSON-safe fallbacks.
const cyclic = { name: "loop" };
cyclic.self = cyclic;
const shared = { s: 1 };
return {
  bigint: 12345678901234567890n,
  fn: function namedFunction() {},
  arrow: () => 1,
  sym: Symbol("tag"),
  nan: NaN,
  inf: -Infinity,
  undef: undefined,
  arrayHoles: [undefined, () => 0, 1],
  date: new Date(Date.UTC(2026, 0, 2, 3, 4, 5)),
  map: new Map([["k", 1], [2, "two"]]),
  set: new Set([1, "a", 1]),
  error: Object.assign(new TypeError("bad thing"), { code: "E_BAD" }),
  cyclic,
  sharedTwice: [shared, shared],
  bytes: new Uint8Array([1, 2, 3]),
  buffer: new ArrayBuffer(8),
};
