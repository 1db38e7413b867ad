// Timers, fetch and require exist only to say why they are
// unavailable and what to use instead; every refusal carries module_access_denied.
const out = {};
for (const [name, f] of Object.entries({
  setTimeout: () => setTimeout(() => 1, 10),
  setInterval: () => setInterval(() => 1, 10),
  setImmediate: () => setImmediate(() => 1),
  clearTimeout: () => clearTimeout(1),
  fetch: () => fetch("https://example.com"),
  require: () => globalThis["req" + "uire"]("fs"),
})) {
  try {
    f();
    out[name] = "no error";
  } catch (e) {
    out[name] = { code: e.code, message: e.message };
  }
}
// A cell may define its own helper under these names.
globalThis.setTimeout = (fn) => fn();
let ran = false;
setTimeout(() => { ran = true; });
out.ownHelper = ran;
return out;
