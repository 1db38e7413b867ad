// @config {"memoryLimitBytes": 4194304}
// A tool result larger than the bridge allows becomes a catchable error, not a guest OOM or a host copy.
try {
  await tools.conformance_big({ bytes: 3000000 });
  return "delivered";
} catch (e) {
  return { name: e.name, code: e.code, tooLarge: /exceeds the bridge limit/.test(e.message) };
}
