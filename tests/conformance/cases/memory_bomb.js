// @requires memoryLimit
// @config {"memoryLimitBytes": 16777216}
// V19: a memory bomb that escapes the guest fails with memory_limit_exceeded.
const a = [];
for (;;) a.push("x".repeat(65536) + a.length);
