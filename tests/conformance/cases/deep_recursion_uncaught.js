// @requires stackLimit
// Uncaught deep recursion fails the run (no code) and the host is unharmed.
function f(n) {
  return f(n + 1) + 1;
}
return f(0);
