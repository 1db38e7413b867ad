// Unknown ids (and denied ones, which are not in the catalog) fail the same way; MCP entries are not reachable.
const out = {};
for (const [label, fn] of [
  ["call", () => tools.call("plugin:demo:does_not_exist", {})],
  ["callValue", () => tools.callValue("openclaw:core:browser", {})],
  ["describe", () => tools.describe("plugin:demo:does_not_exist")],
]) {
  try {
    await fn();
    out[label] = "resolved";
  } catch (e) {
    out[label] = { message: e.message, code: e.code };
  }
}
return out;
