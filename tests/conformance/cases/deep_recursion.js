// @requires stackLimit
// Deep recursion is a catchable RangeError, never a crash.
function f(n) {
  return f(n + 1) + 1;
}
try {
  f(0);
} catch (e) {
  // The error's name is the contract; its message is the engine's wording.
  return { name: e.name, isRangeError: e instanceof RangeError };
}
