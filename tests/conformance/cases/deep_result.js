// Results nested deeper than the bridge allows are refused.
try {
  await tools.conformance_deep({ depth: 200 });
  return "delivered";
} catch (e) {
  return { name: e.name, code: e.code, message: e.message };
}
