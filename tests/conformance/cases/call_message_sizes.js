// A tool call's message (its head, its input's JSON, its tail) crosses whole at every size: an
// engine may write it straight into a buffer of its own (quickjs-wasi's shim: 4 KiB, then a guest
// allocation it copies into), so messages just below, at and past that size, and far past it with
// non-ASCII text, echo back exactly as JSON.stringify writes them. A value that is not plain data
// (a toJSON) after a large one takes the prelude's own path; every call is made once (callCount).
const mismatches = [];
let calls = 0;
for (let n = 3950; n <= 4150; n += 8) {
  const value = { s: "x".repeat(n), n };
  const out = await tools.demo_echo({ value });
  calls++;
  if (JSON.stringify(out.value) !== JSON.stringify(value)) mismatches.push(n);
}
const big = { list: Array.from({ length: 2000 }, (_, i) => ({ i, s: "é" + i + "\n" })) };
const bigOut = await tools.demo_echo({ value: big });
calls++;
if (JSON.stringify(bigOut.value) !== JSON.stringify(big)) mismatches.push("big");
const withToJson = { a: "y".repeat(5000), toJSON() { return { replaced: true }; } };
const replaced = await tools.demo_echo({ value: withToJson });
calls++;
return { mismatches, calls, replaced: replaced.value, bigLength: JSON.stringify(big).length };
