// @config {"maxPendingToolCalls": 2}
// contract §12: more nested calls in flight than maxPendingToolCalls fails the run.
await Promise.all([1, 2, 3].map((i) => tools.demo_sleep({ ms: 50 * i })));
return "not reached";
