// @config {"maxPendingToolCalls": 2}
// Sequential calls never count against maxPendingToolCalls; batches of two are fine.
let total = 0;
for (let i = 0; i < 6; i += 2) {
  const [a, b] = await Promise.all([tools.demo_echo({ n: i }), tools.demo_echo({ n: i + 1 })]);
  total += a.n + b.n;
}
return total;
