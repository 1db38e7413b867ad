// V17, B3: no filesystem, network, process, env, timers or host globals; nothing reachable via constructors.
const probe = {};
for (const name of ["process", "Deno", "Bun", "std", "os", "fetch", "XMLHttpRequest", "WebSocket", "setTimeout", "setInterval", "setImmediate", "module", "exports", "__filename", "importScripts", "__codemode_host", "__codemode_settle", "scriptArgs", "print"]) {
  probe[name] = typeof globalThis[name];
}
probe.viaFunctionCtor = globalThis.constructor.constructor("return typeof process + '/' + typeof std + '/' + typeof os")();
probe.viaEval = (0, eval)("typeof require === 'function' ? 'require is the guard' : 'no require'");
probe.globalKeys = Object.getOwnPropertyNames(globalThis).filter((k) => /host|settle|codemode|openclaw/i.test(k));
return probe;
