// The runtime require guard throws a catchable Error whose message names the denial.
const r = globalThis["req" + "uire"];
try {
  r("node:fs");
} catch (e) {
  return e.message;
}
