// @requires interrupt
// @config {"timeoutMs": 300}
// V18: a loop in a job after an await also times out.
await tools.demo_echo({});
for (;;) {}
