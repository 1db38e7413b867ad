// N8 (by analogy) / B7: a nested failure is a plain, catchable Error with a code.
try {
  await tools.demo_fail({ message: "the warehouse is closed" });
  return "not reached";
} catch (e) {
  return {
    isError: e instanceof Error,
    name: e.name,
    message: e.message,
    code: e.code,
    protoIsErrorPrototype: Object.getPrototypeOf(e) === Error.prototype,
  };
}
