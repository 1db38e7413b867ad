// B10, S5: the code-mode globals cannot be overwritten or deleted.
const attempts = {};
for (const name of ["tools", "text", "json", "yield_control", "ALL_TOOLS", "MCP", "API", "namespaces", "console", "require"]) {
  const before = globalThis[name];
  try { globalThis[name] = 1; } catch (e) { attempts[name + ".assign"] = e.name; }
  try { delete globalThis[name]; } catch (e) { attempts[name + ".delete"] = e.name; }
  try { Object.defineProperty(globalThis, name, { value: 2 }); } catch (e) { attempts[name + ".define"] = e.name; }
  attempts[name] = globalThis[name] === before ? "unchanged" : "CHANGED";
}
const hijack = () => "hijacked";
try { tools.search = hijack; } catch (e) { attempts["tools.search.assign"] = e.name; }
attempts["tools.search"] = tools.search === hijack ? "CHANGED" : "unchanged";
try { tools.extra = 1; } catch (e) { attempts["tools.extra.assign"] = e.name; }
attempts["tools.extra"] = "extra" in tools ? "CHANGED" : "absent";
(function () {
  "use strict";
  try { tools.search = hijack; } catch (e) { attempts["tools.search.strict"] = e.name; }
  try { text = null; } catch (e) { attempts["text.strict"] = e.name; }
})();
try { ALL_TOOLS.push({}); } catch (e) { attempts["ALL_TOOLS.push"] = e.name; }
const stillWorks = await tools.demo_echo({ ok: true });
return { attempts, stillWorks };
