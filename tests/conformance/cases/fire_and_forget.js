// Un-awaited nested calls still finish before the run completes (no guest work pending).
const log = [];
tools.demo_echo({ n: 1 }).then((r) => { log.push(r.n); text("callback ran"); });
return log;
