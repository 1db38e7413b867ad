// @requires memoryLimit
// @config {"memoryLimitBytes": 8388608}
// @redact-error
// V19: a bomb of small objects, where QuickJS cannot even allocate the error object, still fails with memory_limit_exceeded.
const m = new Map();
for (let i = 0; ; i++) m.set(i, { i, s: "v" + i });
