// @config {"timeoutMs": 150}
// @timing
// E12, E13, V21: a slow nested call makes exec return waiting/pending_tools; wait delivers the result.
text("starting");
const started = Date.now();
const [slow, fast] = await Promise.all([tools.demo_sleep({ ms: 700 }), tools.demo_echo({ fast: true })]);
text("resumed");
return { slow, fast, waitedAtLeast: Date.now() - started >= 650 };
