// The `codemode` Node package next to quickjs-emscripten (sync and asyncify builds, installed in
// bench/peers for `make bench-peers`) and `node:vm` (not a sandbox; the floor of "run JS in a
// fresh context"), on the same small tasks: a trivial cell, and 100 nested calls into a JS
// function. Numbers are medians on this machine, now; never assertions (`make bench-node`).
//
// Usage: node bench/node/bench.mjs [SAMPLES] [--json]   (after scripts/build-node.sh [--release])
import { createRequire } from 'node:module'
import vm from 'node:vm'

const require = createRequire(import.meta.url)
const { CodeMode, tool } = require('../../crates/codemode-node')
const peers = createRequire(new URL('../peers/package.json', import.meta.url))
const { newQuickJSWASMModule, newQuickJSAsyncWASMModule, RELEASE_SYNC, RELEASE_ASYNC } = peers('quickjs-emscripten')

const samples = Number(process.argv.find((a) => /^\d+$/.test(a)) ?? 200)
const json = process.argv.includes('--json')
const CALLS = 100

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1]
async function time(n, once) {
  for (let i = 0; i < Math.min(20, n); i++) await once()
  const out = []
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint()
    await once()
    out.push(Number(process.hrtime.bigint() - t) / 1e3)
  }
  return median(out)
}

const rows = {}

// codemode: a fresh sandboxed VM per cell (that is what exec is), tools over the JSON bridge.
{
  const add = tool({ name: 'add', inputSchema: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } } }, handler: ({ a, b }) => a + b })
  const addAsync = tool({ name: 'add_async', inputSchema: { type: 'object' }, handler: async ({ a, b }) => a + b })
  const cm = new CodeMode({ tools: [add, addAsync], config: { tools: { codeMode: { timeoutMs: 30_000 } } } })
  const loop = (name) => `let s = 0; for (let i = 0; i < ${CALLS}; i++) s = await tools.${name}({a: s, b: 1}); return s`
  if ((await cm.exec(loop('add'))).value !== CALLS) throw new Error('codemode loop')
  const trivial = await time(samples, () => cm.exec('return 1 + 1'))
  const hundred = await time(Math.max(10, samples / 10), () => cm.exec(loop('add')))
  const hundredAsync = await time(Math.max(10, samples / 10), () => cm.exec(loop('add_async')))
  rows['codemode (Node)'] = { trivial_cell_us: trivial, nested_call_us: (hundred - trivial) / CALLS, nested_async_call_us: (hundredAsync - trivial) / CALLS }
}

// quickjs-emscripten: a fresh runtime + context per cell, a host function `add`. The sync build
// registers it with newFunction; the asyncify build with newAsyncifiedFunction, so it may be async
// (as codemode's tools are), and evaluates with evalCodeAsync.
async function quickjsRow(label, qjs, asyncify) {
  const open = (withHost) => {
    const rt = qjs.newRuntime()
    const ctx = rt.newContext()
    if (withHost) {
      const add = (a, b) => ctx.newNumber(ctx.getNumber(a) + ctx.getNumber(b))
      const fn = asyncify ? ctx.newAsyncifiedFunction('add', async (a, b) => add(a, b)) : ctx.newFunction('add', add)
      ctx.setProp(ctx.global, 'add', fn)
      fn.dispose()
    }
    return { rt, ctx }
  }
  const close = ({ rt, ctx }, result, withHost) => {
    ctx.unwrapResult(result).dispose()
    // quickjs-emscripten 0.32 throws when a host function outlives its runtime's disposal.
    if (withHost) ctx.setProp(ctx.global, 'add', ctx.undefined)
    ctx.dispose()
    rt.dispose()
  }
  // The sync build's cell stays synchronous: no promise of ours in what it measures.
  const cell = asyncify
    ? async (code, withHost) => {
        const vm = open(withHost)
        close(vm, await vm.ctx.evalCodeAsync(code), withHost)
      }
    : (code, withHost) => {
        const vm = open(withHost)
        close(vm, vm.ctx.evalCode(code), withHost)
      }
  const loop = `{ let s = 0; for (let i = 0; i < ${CALLS}; i++) s = add(s, 1); s }`
  const trivial = await time(samples, () => cell('1 + 1', false))
  const hundred = await time(Math.max(10, samples / 10), () => cell(loop, true))
  rows[label] = { trivial_cell_us: trivial, nested_call_us: (hundred - trivial) / CALLS }
}
await quickjsRow('quickjs-emscripten (sync)', await newQuickJSWASMModule(RELEASE_SYNC), false)
await quickjsRow('quickjs-emscripten (asyncify)', await newQuickJSAsyncWASMModule(RELEASE_ASYNC), true)

// node:vm: a fresh context per cell, a host function called directly (no isolation at all).
{
  const cell = (code) => vm.runInNewContext(code, { add: (a, b) => a + b })
  const trivial = await time(samples, () => cell('1 + 1'))
  const hundred = await time(Math.max(10, samples / 10), () => cell(`{ let s = 0; for (let i = 0; i < ${CALLS}; i++) s = add(s, 1); s }`))
  rows['node:vm (not a sandbox)'] = { trivial_cell_us: trivial, nested_call_us: (hundred - trivial) / CALLS }
}

// The floor of any design that keeps the guest off Node's main thread: another thread asks the
// main thread (idle in its event loop, as it is while `await cm.exec(...)` is pending) to run a JS
// function and spins on a shared word for the answer, so only the main thread is woken (the way
// codemode's guest worker waits for a tool's answer). No sandbox, no JSON: the wake-up and
// Node's message dispatch alone.
{
  const { Worker } = await import('node:worker_threads')
  const word = new Int32Array(new SharedArrayBuffer(4))
  const add = (a, b) => a + b
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads')
     const word = workerData
     let asked = 0
     parentPort.on('message', (n) => {
       const t = process.hrtime.bigint()
       for (let i = 0; i < n; i++) {
         asked++
         parentPort.postMessage(asked)
         while (Atomics.load(word, 0) !== asked) {}
       }
       parentPort.postMessage({ us: Number(process.hrtime.bigint() - t) / 1e3 / n })
     })`,
    { eval: true, workerData: word },
  )
  let s = 0
  let done
  worker.on('message', (m) => {
    if (typeof m === 'number') {
      s = add(s, 1)
      Atomics.store(word, 0, m)
    } else done(m.us)
  })
  const batch = () => new Promise((resolve) => {
    done = resolve
    worker.postMessage(CALLS)
  })
  for (let i = 0; i < 5; i++) await batch()
  const perCall = []
  for (let i = 0; i < Math.max(10, samples / 10); i++) perCall.push(await batch())
  await worker.terminate()
  rows['floor: a call to the main thread'] = { nested_call_us: median(perCall) }
}

if (json) {
  console.log(JSON.stringify(rows, null, 2))
} else {
  const f = (v) => (v === undefined ? '-' : v.toFixed(1))
  console.log(`${'runtime'.padEnd(32)} ${'trivial cell (µs)'.padStart(18)} ${'nested call (µs)'.padStart(17)} ${'async call (µs)'.padStart(16)}`)
  for (const [name, r] of Object.entries(rows)) {
    console.log(`${name.padEnd(32)} ${f(r.trivial_cell_us).padStart(18)} ${f(r.nested_call_us).padStart(17)} ${f(r.nested_async_call_us).padStart(16)}`)
  }
}
