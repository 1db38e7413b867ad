// Peer numbers for `make bench-peers`: quickjs-emscripten, the QuickJS-in-WebAssembly library that
// JavaScript code-mode runtimes embed, measured the way `codemode bench` measures codemode.
//
// Usage: node bench/peers/peers.mjs [SAMPLES] [--seconds S] [--warmup-ms MS] [--json]
//   SAMPLES     samples per latency row, after a warm-up (default 300)
//   --seconds   how long the throughput row runs (default 2)
//   --warmup-ms untimed runs before each row, so V8 has tiered the code up (default 1500)
//   --json      print one JSON object instead of a table
// Needs Node 20+ and bench/peers/node_modules (scripts/setup.sh installs it from package-lock.json).
//
// Rows (latencies in microseconds, p50 and p90 of the samples, timed with process.hrtime.bigint):
//   fresh_sync_us          sync build: new runtime + context, evalCode("1+1"), dispose; per sample.
//   fresh_async_us         asyncify build, one shared WebAssembly module: the same with an async
//                          runtime + context and evalCodeAsync.
//   fresh_async_module_us  asyncify build, what newAsyncRuntime() does: a new WebAssembly module per
//                          runtime (one asyncify module can only suspend one call at a time, so
//                          concurrent runs need one each), then the same as fresh_async_us.
//   async_host_call_us     asyncify build: a host function made with newAsyncifiedFunction that
//                          echoes its number argument, called 1000 times sequentially by one
//                          evalCodeAsync; per call = time / 1000.
//   sync_host_call_us      sync build: the same with newFunction and evalCode.
//   throughput_sync        fresh_sync_us back to back on one thread for --seconds (yielding to the
//                          event loop every 100 cells): cells per second.
// The 1000-call rows take max(5, SAMPLES / 20) samples and the new-module row max(5, SAMPLES / 10),
// as `codemode bench` does for its nested-call row.

import {
  newQuickJSWASMModule,
  newQuickJSAsyncWASMModule,
  newAsyncRuntime,
  RELEASE_SYNC,
  RELEASE_ASYNC,
} from "quickjs-emscripten";

const HOST_CALLS = 1000;
// A block, so the same context can evaluate it again (a top-level `let` could not be redeclared).
const LOOP = `{ let s = 0; for (let i = 0; i < ${HOST_CALLS}; i++) { s += echo(i); } s }`;
const LOOP_SUM = (HOST_CALLS * (HOST_CALLS - 1)) / 2;

function parseArgs(argv) {
  const opts = { samples: 300, seconds: 2, warmupMs: 1500, json: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--json") opts.json = true;
    else if (a === "--seconds") opts.seconds = Number(argv[++i]);
    else if (a === "--warmup-ms") opts.warmupMs = Number(argv[++i]);
    else if (/^\d+$/.test(a)) opts.samples = Number(a);
    else throw new Error(`unknown argument ${a}; usage: peers.mjs [SAMPLES] [--seconds S] [--warmup-ms MS] [--json]`);
  }
  opts.samples = Math.max(5, opts.samples);
  return opts;
}

const nowNs = () => process.hrtime.bigint();
const usSince = (t0) => Number(nowNs() - t0) / 1e3;

// Same percentile as `codemode bench`: the sample at round((n - 1) * q) of the sorted list.
function stats(samples) {
  const v = [...samples].sort((a, b) => a - b);
  const p = (q) => v[Math.round((v.length - 1) * q)];
  const r = (x) => Math.round(x * 1000) / 1000;
  return { p50: r(p(0.5)), p90: r(p(0.9)) };
}

// Runs `once` untimed for at least `warmMs` milliseconds (and 3 times), then `n` times timed; `once`
// returns microseconds (or a promise of them). V8 tiers WebAssembly and JavaScript up while it runs:
// after only ~100 warm-up runs, fresh_sync_us still had multi-millisecond outliers every few samples.
async function sample(n, warmMs, once) {
  const warmUntil = nowNs() + BigInt(warmMs) * 1_000_000n;
  for (let i = 0; i < 3 || nowNs() < warmUntil; i++) await once();
  const out = [];
  for (let i = 0; i < n; i++) out.push(await once());
  return stats(out);
}

function expectNumber(ctx, result, want) {
  const handle = ctx.unwrapResult(result);
  const got = ctx.getNumber(handle);
  handle.dispose();
  if (got !== want) throw new Error(`expected ${want}, got ${got}`);
}

// a. / e. One fresh sync runtime evaluating 1+1, untimed; callers time it.
function freshSync(mod) {
  const rt = mod.newRuntime();
  const ctx = rt.newContext();
  expectNumber(ctx, ctx.evalCode("1+1"), 2);
  ctx.dispose();
  rt.dispose();
}

// b. / b'. One fresh async runtime (from `makeRuntime`) evaluating 1+1.
async function freshAsync(makeRuntime) {
  const rt = await makeRuntime();
  const ctx = rt.newContext();
  expectNumber(ctx, await ctx.evalCodeAsync("1+1"), 2);
  ctx.dispose();
  rt.dispose();
}

// c. A context whose global `echo` is an asyncified host function (each call unwinds and rewinds the
//    QuickJS stack around an awaited host promise).
function asyncEchoContext(mod) {
  const rt = mod.newRuntime();
  const ctx = rt.newContext();
  const echo = ctx.newAsyncifiedFunction("echo", async (arg) => ctx.newNumber(ctx.getNumber(arg)));
  ctx.setProp(ctx.global, "echo", echo);
  echo.dispose();
  return { rt, ctx };
}

// d. The same with a plain synchronous host function.
function syncEchoContext(mod) {
  const rt = mod.newRuntime();
  const ctx = rt.newContext();
  const echo = ctx.newFunction("echo", (arg) => ctx.newNumber(ctx.getNumber(arg)));
  ctx.setProp(ctx.global, "echo", echo);
  echo.dispose();
  return { rt, ctx };
}

// Drops `echo` before the context: quickjs-emscripten 0.32 throws when a host function is still alive
// while its runtime is being freed.
function disposeEchoContext(rt, ctx) {
  ctx.setProp(ctx.global, "echo", ctx.undefined);
  ctx.dispose();
  rt.dispose();
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const n = opts.samples;
  const nLoop = Math.max(5, Math.floor(n / 20));
  const nModule = Math.max(5, Math.floor(n / 10));
  const warmMs = opts.warmupMs;

  const syncMod = await newQuickJSWASMModule(RELEASE_SYNC);
  const asyncMod = await newQuickJSAsyncWASMModule(RELEASE_ASYNC);

  const report = { samples: n, host_call_samples: nLoop, new_module_samples: nModule, warmup_ms: warmMs };

  report.fresh_sync_us = await sample(n, warmMs, () => {
    const t0 = nowNs();
    freshSync(syncMod);
    return usSince(t0);
  });

  report.fresh_async_us = await sample(n, warmMs, async () => {
    const t0 = nowNs();
    await freshAsync(async () => asyncMod.newRuntime());
    return usSince(t0);
  });

  report.fresh_async_module_us = await sample(nModule, 0, async () => {
    const t0 = nowNs();
    await freshAsync(() => newAsyncRuntime());
    return usSince(t0);
  });

  {
    const { rt, ctx } = asyncEchoContext(asyncMod);
    report.async_host_call_us = await sample(nLoop, warmMs, async () => {
      const t0 = nowNs();
      expectNumber(ctx, await ctx.evalCodeAsync(LOOP), LOOP_SUM);
      return usSince(t0) / HOST_CALLS;
    });
    disposeEchoContext(rt, ctx);
  }

  {
    const { rt, ctx } = syncEchoContext(syncMod);
    report.sync_host_call_us = await sample(nLoop, warmMs, () => {
      const t0 = nowNs();
      expectNumber(ctx, ctx.evalCode(LOOP), LOOP_SUM);
      return usSince(t0) / HOST_CALLS;
    });
    disposeEchoContext(rt, ctx);
  }

  {
    const budgetNs = BigInt(Math.round(opts.seconds * 1e9));
    const t0 = nowNs();
    let cells = 0;
    let elapsed = 0n;
    while (elapsed < budgetNs) {
      freshSync(syncMod);
      cells++;
      // Back to the event loop now and then, as a server would between requests.
      if (cells % 100 === 0) await new Promise((resolve) => setImmediate(resolve));
      elapsed = nowNs() - t0;
    }
    const seconds = Number(elapsed) / 1e9;
    report.throughput_sync = { cells, seconds: Math.round(seconds * 1000) / 1000, cells_per_s: Math.round(cells / seconds) };
  }

  if (opts.json) {
    console.log(JSON.stringify(report, null, 2));
    return;
  }
  const rows = [
    ["fresh runtime + 1+1, sync build", report.fresh_sync_us],
    ["fresh runtime + 1+1, asyncify build", report.fresh_async_us],
    ["…asyncify, new wasm module (newAsyncRuntime)", report.fresh_async_module_us],
    ["async host call (newAsyncifiedFunction)", report.async_host_call_us],
    ["sync host call (newFunction)", report.sync_host_call_us],
  ];
  const fmt = (x) => x.toFixed(x < 10 ? 3 : 1);
  console.log(`quickjs-emscripten — ${n} samples (host calls: ${nLoop} × ${HOST_CALLS}, new module: ${nModule}), node ${process.version}`);
  console.log(`${"row".padEnd(48)}${"p50 (µs)".padStart(12)}${"p90 (µs)".padStart(12)}`);
  for (const [name, s] of rows) console.log(`${name.padEnd(48)}${fmt(s.p50).padStart(12)}${fmt(s.p90).padStart(12)}`);
  const tp = report.throughput_sync;
  console.log(`throughput, fresh sync runtime + 1+1, one thread: ${tp.cells_per_s} cells/s (${tp.cells} in ${tp.seconds} s)`);
}

try {
  await main();
} catch (e) {
  console.error(`peers.mjs: ${e?.message ?? e}`); if (process.env.DEBUG) console.error(e?.stack);
  process.exit(1);
}
