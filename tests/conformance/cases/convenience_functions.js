// K1-K4, B9: convenience functions exist for unambiguous safe names and never shadow helpers; the
// control tools `exec` / `wait` are not reachable (a name that is no catalog tool rejects, naming
// the nearest tools; `in` tells which convenience functions exist).
const echoed = await tools.demo_echo({ a: 1 });
const refusal = async (f) => { try { await f(); return "called"; } catch (e) { return e.code + ": " + e.message.split(";")[0]; } };
return {
  echoed,
  helpers: ["search", "describe", "call", "callValue"].map((k) => typeof tools[k]),
  conveniences: Object.keys(tools).filter((k) => k.startsWith("demo_")).sort(),
  noExec: "exec" in tools,
  noWait: "wait" in tools,
  execRefused: await refusal(() => tools.exec({ code: "return 1" })),
  waitRefused: await refusal(() => tools.wait({ runId: "x" })),
  frozen: Object.isFrozen(tools),
};
