// K1-K4: convenience functions exist for unambiguous safe names and never shadow helpers.
const echoed = await tools.demo_echo({ a: 1 });
return {
  echoed,
  helpers: ["search", "describe", "call", "callValue"].map((k) => typeof tools[k]),
  conveniences: Object.keys(tools).filter((k) => k.startsWith("demo_")).sort(),
  noExec: typeof tools.exec,
  noWait: typeof tools.wait,
  frozen: Object.isFrozen(tools),
};
