// @requires stackLimit
// Deep recursion is a catchable RangeError, never a crash.
function f(n) {
  return f(n + 1) + 1;
}
try {
  f(0);
} catch (e) {
  return { name: e.name, message: e.message };
}
