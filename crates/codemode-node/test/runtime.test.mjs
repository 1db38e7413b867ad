// The Node API: exec/wait/approve/abort with plain-object results, JS functions
// (sync and async, JSON Schema or Zod) as tools, thrown errors as the guest's ToolError, non-JSON
// results, limits, hooks and approvers, AbortSignal, the main thread staying free, config errors.
// Contract ids: contract V3 (exec/wait), contract §16 (error codes), contract P5 (approvals), contract P6 (hooks), contract P7 (abort).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { z } from 'zod'
import { codemode, settle, sleep } from './helpers.mjs'

const { CodeMode, CodeModeError, tool } = codemode
const FAST = { tools: { codeMode: { timeoutMs: 300 } } }

const getWeather = tool({
  name: 'get_weather',
  description: 'Current weather of a city.',
  readOnly: true,
  inputSchema: z.object({ city: z.string(), unit: z.enum(['c', 'f']).default('c') }),
  handler: ({ city, unit }) => ({ city, temp: unit === 'c' ? 21 : 70 }),
})

const slowTotal = tool({
  name: 'slow_total',
  inputSchema: { type: 'object', properties: { items: { type: 'array', items: { type: 'integer' } } }, required: ['items'] },
  handler: async ({ items }) => {
    await sleep(600)
    return items.reduce((a, b) => a + b, 0)
  },
})

test('a cell calls sync and async JS tools and resumes through wait', async () => {
  const cm = new CodeMode({ tools: [getWeather, slowTotal], config: FAST })
  assert.equal(cm.engine, 'quickjs-wasi')
  assert.deepEqual(cm.toolIds(), ['plugin:node:get_weather', 'plugin:node:slow_total'])
  const r = await cm.exec(
    "const w = await tools.get_weather({city: 'Oslo'}); const t = await tools.slow_total({items: [1, 2, 3]}); console.log('done'); return {city: w.city, temp: w.temp, total: t}",
  )
  assert.equal(r.status, 'waiting', JSON.stringify(r))
  assert.equal(r.reason, 'pending_tools')
  assert.deepEqual(r.pendingToolCalls.map((p) => [p.toolId, p.kind]), [['plugin:node:slow_total', 'call']])
  const done = await settle(cm, r)
  assert.equal(done.status, 'completed')
  assert.deepEqual(done.value, { city: 'Oslo', temp: 21, total: 6 })
  assert.equal(done.text, 'done')
  assert.deepEqual(done.telemetry.nestedToolIds, ['plugin:node:get_weather', 'plugin:node:slow_total'])
  assert.deepEqual(JSON.parse(JSON.stringify(done)), { ...done }, 'a plain JSON object')
})

test('zod and JSON schemas become the tool types; inputs are checked before the handler runs', async () => {
  const cm = new CodeMode({ tools: [getWeather, slowTotal] })
  const exec = cm.modelTools().find((t) => t.name === 'exec')
  assert.match(exec.description, /plugin:node:get_weather\(\{city: string, unit\?: "c" \| "f"\}\)/)
  const d = await cm.exec("return (await tools.describe('plugin:node:get_weather')).description")
  assert.equal(d.value, 'Current weather of a city.')
  const bad = await cm.exec("try { await tools.get_weather({city: 5}) } catch (e) { return [e.code, e.message] }")
  assert.equal(bad.value[0], 'invalid_input')
  assert.match(bad.value[1], /city/)
  // Zod parses (defaults applied) before the handler sees the input.
  const f = await cm.exec("return await tools.get_weather({city: 'Rome', unit: 'f'})")
  assert.deepEqual(f.value, { city: 'Rome', temp: 70 })
})

test('thrown errors become ToolErrors with their name and message', async () => {
  const cm = new CodeMode({
    tools: [
      tool({ name: 'fails', handler: ({ reason }) => { throw new RangeError(`no such city: ${reason}`) } }),
      tool({ name: 'rejects', handler: async () => { await sleep(1); throw new TypeError('not yours') } }),
      tool({ name: 'throws_string', handler: () => { throw 'just a string' } }),
    ],
  })
  const r = await cm.exec(
    "const out = []; for (const t of ['fails', 'rejects', 'throws_string']) { try { await tools[t]({reason: 'Atlantis'}) } catch (e) { out.push([e.code, e.message]) } } return out",
  )
  assert.deepEqual(r.value, [
    ['nested_tool_failed', 'plugin:node:fails: RangeError: no such city: Atlantis'],
    ['nested_tool_failed', 'plugin:node:rejects: TypeError: not yours'],
    ['nested_tool_failed', 'plugin:node:throws_string: Error: just a string'],
  ])
  const uncaught = await cm.exec("await tools.fails({reason: 'x'})")
  assert.equal(uncaught.status, 'failed')
  assert.equal(uncaught.code, 'nested_tool_failed')
})

test('non-JSON results are coded errors and the process keeps serving', async () => {
  const cyclic = {}
  cyclic.self = cyclic
  const values = {
    undefined_value: undefined,
    big_int: 10n,
    cyclic,
    a_function: () => 1,
    nan: NaN,
    infinity: [1, Infinity],
    a_date: new Date(0),
    a_map: new Map([[1, 2]]),
    a_symbol: Symbol('s'),
    nested_undefined: { a: [1, undefined] },
  }
  const cm = new CodeMode({ tools: Object.keys(values).map((name) => tool({ name, handler: () => values[name] })) })
  for (const name of Object.keys(values)) {
    const r = await cm.exec(`try { await tools.${name}({}); return 'accepted' } catch (e) { return [e.code, e.message] }`)
    assert.equal(r.status, 'completed', name)
    assert.equal(r.value[0], 'nested_tool_failed', `${name}: ${JSON.stringify(r.value)}`)
    assert.match(r.value[1], new RegExp(`tool \`${name}\` returned a value that is not JSON`), name)
  }
  assert.equal((await cm.exec('return 6 * 7')).value, 42)
})

test('a plain value is answered at once, a promise or thenable when it settles: same checks either way', async () => {
  const later = (v) => ({ then: (ok) => setTimeout(() => ok(v), 1) })
  const exploding = { get boom() { throw new Error('getter exploded') } }
  const handlers = {
    plain: () => ({ n: 1 }),
    thenable: () => later({ n: 2 }),
    promise_of_thenable: async () => later({ n: 3 }),
    thenable_of_non_json: () => later(10n),
    throwing_getter: () => exploding,
    rejected_promise: () => Promise.reject(new RangeError('refused later')),
    throwing_then: () => ({ get then() { throw new TypeError('then exploded') } }),
  }
  const cm = new CodeMode({ tools: Object.entries(handlers).map(([name, handler]) => tool({ name, handler })) })
  const out = {}
  for (const name of Object.keys(handlers)) {
    const r = await cm.exec(`try { return ['ok', await tools.${name}({})] } catch (e) { return [e.code, e.message] }`)
    assert.equal(r.status, 'completed', `${name}: ${JSON.stringify(r)}`)
    out[name] = r.value
  }
  assert.deepEqual(out.plain, ['ok', { n: 1 }])
  assert.deepEqual(out.thenable, ['ok', { n: 2 }])
  assert.deepEqual(out.promise_of_thenable, ['ok', { n: 3 }])
  assert.equal(out.thenable_of_non_json[0], 'nested_tool_failed')
  assert.match(out.thenable_of_non_json[1], /returned a value that is not JSON: \$: a BigInt/)
  assert.deepEqual(out.throwing_getter, ['nested_tool_failed', 'plugin:node:throwing_getter: Error: getter exploded'])
  assert.deepEqual(out.rejected_promise, ['nested_tool_failed', 'plugin:node:rejected_promise: RangeError: refused later'])
  assert.deepEqual(out.throwing_then, ['nested_tool_failed', 'plugin:node:throwing_then: TypeError: then exploded'])
})

// The main thread stays awake between a cell's quick calls (the addon's `awake` module): what it
// must not cost is correctness, other runtimes' calls, or the event loop's turns.
test("a cell calling tools back to back cannot starve Node's event loop", async () => {
  let turned = false
  let calls = 0
  const cm = new CodeMode({
    tools: [tool({ name: 'turned', handler: () => { calls++; return turned } })],
    config: { tools: { codeMode: { timeoutMs: 20_000 } } },
  })
  // The cell loops until a callback only the event loop runs has run: were the loop never to
  // yield, the cell would spin to its deadline and fail.
  const running = cm.exec('let n = 0; while (!(await tools.turned({}))) n++; return n')
  setImmediate(() => { turned = true })
  const r = await running
  assert.equal(r.status, 'completed', JSON.stringify(r))
  assert.equal(r.value, calls - 1)
  // A timer, too, while another cell hammers.
  turned = false
  const again = cm.exec('let n = 0; while (!(await tools.turned({}))) n++; return n')
  setTimeout(() => { turned = true }, 0)
  assert.equal((await again).status, 'completed')
})

test('a dropped runtime is garbage collected, its tools and their main-thread loop with it', async () => {
  const v8 = await import('node:v8')
  const vm = await import('node:vm')
  v8.setFlagsFromString('--expose-gc')
  const gc = vm.runInNewContext('gc')
  let collected = 0
  const registry = new FinalizationRegistry(() => { collected++ })
  for (let i = 0; i < 8; i++) {
    const cm = new CodeMode({ tools: [tool({ name: 'add', handler: ({ a, b }) => a + b })] })
    // Calls through the threadsafe function and through the main thread's loop.
    assert.equal((await cm.exec('let s = 0; for (let i = 0; i < 20; i++) s = await tools.add({a: s, b: 1}); return s')).value, 20)
    registry.register(cm._rt, i)
  }
  for (let turn = 0; turn < 100 && collected < 6; turn++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
  }
  // All but the last few: a reference held anywhere (the tools' wrappers hold the runtime only
  // weakly) would keep every one of them.
  assert.ok(collected >= 6, `collected ${collected} of 8`)
})

test('fan-outs, mixed sync and async tools, two runtimes and re-entrant cells all get their own answers', async () => {
  const double = tool({ name: 'double', handler: ({ n }) => n * 2 })
  const later = tool({ name: 'later', handler: async ({ n }) => { await new Promise((r) => setImmediate(r)); return n + 1000 } })
  const failing = tool({ name: 'failing', handler: ({ n }) => { throw new RangeError(`bad ${n}`) } })
  const a = new CodeMode({ tools: [double, later, failing] })
  const b = new CodeMode({
    tools: [
      tool({ name: 'triple', handler: ({ n }) => n * 3 }),
      // Re-entrant: a tool that runs a cell of the other runtime while its own cell waits.
      tool({ name: 'nested_cell', handler: async ({ n }) => (await a.exec(`return await tools.double({n: ${n}})`)).value }),
    ],
  })
  const fan = "const xs = await Promise.all(Array.from({length: 12}, (_, n) => n % 3 === 0 ? tools.later({n}) : tools.double({n}))); let s = 0; for (let i = 0; i < 200; i++) s += await tools.double({n: i}); let bad = 0; for (let i = 0; i < 20; i++) { try { await tools.failing({n: i}) } catch (e) { if (e.message.endsWith(`bad ${i}`)) bad++ } } return [xs, s, bad]"
  const chain = 'let s = 0; for (let i = 0; i < 300; i++) s += await tools.triple({n: i}); const viaA = []; for (let i = 0; i < 5; i++) viaA.push(await tools.nested_cell({n: i})); return [s, viaA]'
  const [ra1, ra2, rb1, rb2] = await Promise.all([a.exec(fan), a.exec(fan), b.exec(chain), b.exec(chain)])
  const xs = Array.from({ length: 12 }, (_, n) => (n % 3 === 0 ? n + 1000 : n * 2))
  for (const r of [ra1, ra2]) {
    assert.equal(r.status, 'completed', JSON.stringify(r))
    assert.deepEqual(r.value, [xs, 2 * (199 * 200) / 2, 20])
  }
  for (const r of [rb1, rb2]) {
    assert.equal(r.status, 'completed', JSON.stringify(r))
    assert.deepEqual(r.value, [3 * (299 * 300) / 2, [0, 2, 4, 6, 8]])
  }
})

test('a tool that never returns is bounded by the run, and abort stops the run', async () => {
  let started = false
  const cm = new CodeMode({ tools: [tool({ name: 'hangs', handler: () => { started = true; return new Promise(() => {}) } })], config: FAST })
  const r = await cm.exec('return await tools.hangs({})')
  // The tool's promise never settles: `waiting` means exec returned at the run's deadline.
  assert.equal(r.status, 'waiting')
  assert.ok(started)
  assert.equal(await cm.abort(r.runId), true)
  const gone = await cm.wait(r.runId)
  assert.equal(gone.status, 'failed')
  assert.equal(gone.code, 'invalid_input')
  assert.equal((await cm.exec('return 1')).value, 1)
})

test('an AbortSignal aborts the run of its call', async () => {
  const seen = []
  const cm = new CodeMode({
    tools: [tool({ name: 'forever', handler: () => new Promise((resolve) => setTimeout(resolve, 30_000).unref()) })],
    config: { tools: { codeMode: { timeoutMs: 20_000 } } },
    hook: (call) => { seen.push(call.runId) },
  })
  const controller = new AbortController()
  const pending = cm.exec('return await tools.forever({})', { signal: controller.signal })
  while (seen.length === 0) await sleep(10)
  controller.abort()
  const r = await pending
  assert.equal(r.status, 'failed')
  assert.equal(r.code, 'aborted')
  const after = await cm.wait(seen[0])
  assert.equal(after.code, 'invalid_input')
})

test("the guest never runs on Node's main thread", async () => {
  const cm = new CodeMode({ config: { tools: { codeMode: { timeoutMs: 5000 } } } })
  let ticks = 0
  const timer = setInterval(() => { ticks++ }, 5)
  const r = await cm.exec('const end = Date.now() + 400; while (Date.now() < end) {} return "spun"')
  clearInterval(timer)
  assert.equal(r.value, 'spun')
  assert.ok(ticks > 20, `the main thread ticked only ${ticks} times during a 400 ms cell`)
})

test('hooks refuse and rewrite; approvers decide or park', async () => {
  const deleted = []
  const deleteFile = tool({ name: 'delete_file', handler: ({ path }) => { deleted.push(path); return `deleted ${path}` } })
  const decisions = { 'a.txt': true, 'b.txt': 'not b', 'c.txt': undefined }
  const cm = new CodeMode({
    tools: [deleteFile],
    config: { tools: { codeMode: { timeoutMs: 2000 } }, approvals: { require: ['plugin:node:delete_file'] } },
    hook: async (call) => {
      if (call.input.path === '/etc/passwd') return 'system files are off limits'
      if (call.input.path === 'typo.txt') return { input: { path: 'fixed.txt' } }
    },
    approver: async (request) => decisions[JSON.parse(request.inputPreview).path] ?? (JSON.parse(request.inputPreview).path === 'c.txt' ? undefined : true),
  })
  const r = await cm.exec(
    "const out = []; for (const path of ['/etc/passwd', 'typo.txt', 'a.txt', 'b.txt']) { try { out.push(await tools.delete_file({path})) } catch (e) { out.push(e.message) } } return out",
  )
  assert.equal(r.status, 'completed', JSON.stringify(r))
  assert.match(r.value[0], /system files are off limits/)
  assert.equal(r.value[1], 'deleted fixed.txt')
  assert.equal(r.value[2], 'deleted a.txt')
  assert.match(r.value[3], /not b/)
  assert.deepEqual(deleted, ['fixed.txt', 'a.txt'])
  const parked = await cm.exec("return await tools.delete_file({path: 'c.txt'})")
  assert.equal(parked.status, 'waiting')
  const [pending] = parked.pendingToolCalls
  assert.equal(pending.kind, 'approval')
  await assert.rejects(cm.approve(parked.runId, pending.requestId + 99), (e) => e instanceof CodeModeError && e.code === 'invalid_input')
  await cm.approve(parked.runId, pending.requestId)
  const done = await settle(cm, await cm.wait(parked.runId))
  assert.equal(done.value, 'deleted c.txt')
  const parked2 = await cm.exec("try { return await tools.delete_file({path: 'c.txt'}) } catch (e) { return e.message }")
  await cm.approve(parked2.runId, parked2.pendingToolCalls[0].requestId, { deny: 'not today' })
  assert.match((await cm.wait(parked2.runId)).value, /not today/)
})

test('typescript cells, and bad configs and tools are refused with codes', async () => {
  const cm = new CodeMode({ tools: [tool({ name: 'doubled', handler: async ({ n }) => n * 2 })] })
  const r = await cm.exec('const n: number = await tools.doubled({n: 21}); return n', { language: 'typescript' })
  assert.equal(r.value, 42)
  assert.equal((await cm.exec('return 1', { language: 'cobol' })).code, 'unsupported_language')
  const refused = (options, code, pattern) =>
    assert.throws(() => new CodeMode(options), (e) => e instanceof CodeModeError && e.code === code && pattern.test(e.message))
  refused({ config: { tools: { codeMode: { timeoutMs: 'soon' } } } }, 'config_error', /timeoutMs/)
  refused({ config: { tool: {} } }, 'config_error', /did you mean `tools`/)
  refused({ config: { snapshotStore: { kind: 'tape' } } }, 'config_error', /snapshotStore/)
  refused({ tools: [tool({ name: 'not a name', handler: () => 1 })] }, 'invalid_input', /identifier/)
  refused({ tools: [tool({ name: 'twice', handler: () => 1 }), tool({ name: 'twice', handler: () => 2 })] }, 'invalid_input', /plugin:node:twice/)
  assert.throws(() => tool({ name: 'x' }), TypeError)
  await assert.rejects(cm.approve('no-such-run', 1), (e) => e.code === 'invalid_input')
  assert.equal((await cm.wait('cm_doesnotexist')).code, 'invalid_input')
  assert.equal((await cm.execJson({ code: 5 })).code, 'invalid_input')
})

test('a tool sees who calls it, with an idempotency key of the run and request', async () => {
  const seen = []
  const pay = tool({
    name: 'pay',
    inputSchema: { type: 'object', properties: { amount: { type: 'integer' } }, required: ['amount'] },
    handler: ({ amount }, info) => {
      seen.push(info)
      return `paid ${amount}`
    },
  })
  const cm = new CodeMode({ tools: [pay], config: FAST })
  const r = await cm.exec('return [await tools.pay({ amount: 3 }), await tools.pay({ amount: 4 })]')
  assert.deepEqual(r.value, ['paid 3', 'paid 4'])
  assert.deepEqual(seen.map((s) => s.idempotencyKey), seen.map((s) => `${s.runId}/${s.requestId}`))
  assert.notEqual(seen[0].idempotencyKey, seen[1].idempotencyKey)
})

test('each call names the agent, provider and model its run is for', async () => {
  const lookup = tool({ name: 'lookup', handler: () => 'customer' })
  const refund = tool({ name: 'refund', handler: () => 'refunded' })
  const config = {
    tools: { codeMode: { timeoutMs: 300 }, byProvider: { openai: { deny: ['lookup'] } } },
    agents: { list: [{ id: 'support', tools: { deny: ['refund'] } }, { id: 'ops', tools: {} }] },
  }
  const cm = new CodeMode({ tools: [lookup, refund], config })
  const ids = 'return ALL_TOOLS.map((t) => t.id).sort()'
  assert.deepEqual((await cm.exec(ids, { agent: 'support' })).value, ['plugin:node:lookup'])
  assert.deepEqual((await cm.exec(ids, { agent: 'ops', provider: 'openai' })).value, ['plugin:node:refund'])
  const first = await cm.exec("await yield_control(); return 'mine'", { agent: 'support' })
  assert.equal(first.status, 'waiting')
  const refused = await cm.wait(first.runId, { agent: 'ops' })
  assert.equal(refused.status, 'failed')
  assert.equal(refused.code, 'invalid_input')
  assert.equal((await cm.wait(first.runId, { agent: 'support' })).value, 'mine')
})
