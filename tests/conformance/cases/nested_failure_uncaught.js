// An uncaught nested failure fails the run with nested_tool_failed.
text("before the failure");
await tools.callValue("plugin:demo:demo_fail", { message: "boom" });
return "not reached";
