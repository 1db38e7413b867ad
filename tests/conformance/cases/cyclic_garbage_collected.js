// @requires memoryLimit
// @config {"memoryLimitBytes": 8388608}
// V19 with garbage: reference cycles the cell drops are collected before the memory limit refuses
// anything. About 30 MiB of cyclic garbage (reference counting alone never frees a cycle) under an
// 8 MiB limit: an engine that put off its first cycle collection past the limit (to spare short
// runs a collection) would fail this with memory_limit_exceeded.
let kept = 0;
for (let i = 0; i < 100000; i++) {
  const a = { i, pad: "x".repeat(200) + i };
  const b = { a };
  a.b = b;
  if (a.b.a.i === i) kept++;
}
return kept;
