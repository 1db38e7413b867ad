// `tools.<name>` for a name that is no catalog tool rejects with
// nested_tool_failed and names the nearest catalog tools, instead of "not a function".
let caught;
try {
  await tools.demo_ech({ text: "hi" });
} catch (e) {
  caught = { name: e.name, code: e.code, message: e.message };
}
return {
  caught,
  // Internal names are never synthesized (no accidental thenable, no coercion through a tool).
  then: typeof tools.then,
  toJSON: typeof tools.toJSON,
  has: "demo_ech" in tools,
  frozen: Object.isFrozen(tools),
  awaited: (await tools) === tools,
};
