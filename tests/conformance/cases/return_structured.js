// Nested JSON values, unicode, and key order survive the bridge.
return {
  z: 1,
  a: [true, false, null, -0.5, 1e21, "ünïcødé ✓ 😀"],
  nested: { deep: { list: [1, [2, [3]]] } },
  empty: {},
};
