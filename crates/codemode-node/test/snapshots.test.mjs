// Snapshots the host may keep (the book's packages page, "Exported runs"): a waiting run exported as
// bytes resumes in another process holding the same signing key; a directory store chosen by config
// is shared by two processes; damaged or foreign bytes are refused with codes.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readdirSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { codemode, pkgDir, settle, sleep } from './helpers.mjs'

const { CodeMode, CodeModeError, tool } = codemode
const CONFIG = { tools: { codeMode: { timeoutMs: 200 } } }
const CELL = "const rate = await tools.fetch_rate({currency: 'EUR'}); return await tools.convert({amount: 100, rate})"

/** The tools, as source for a child process (`calls` counts fetch_rate's runs there). */
const TOOLS = `
const { CodeMode, tool } = require(${JSON.stringify(pkgDir)})
const calls = []
const fetchRate = tool({ name: 'fetch_rate', readOnly: READ_ONLY, handler: async ({ currency }) => {
  calls.push(currency); await new Promise((r) => setTimeout(r, DELAY)); return { EUR: 1.1 }[currency] } })
const convert = tool({ name: 'convert', handler: ({ amount, rate }) => Math.round(amount * rate * 100) / 100 })
`

function child(dir, body, { readOnly = false, delay = 500, env = process.env } = {}) {
  const file = path.join(dir, 'child.cjs')
  writeFileSync(file, TOOLS.replace('READ_ONLY', String(readOnly)).replace('DELAY', String(delay)) + body)
  return execFileSync(process.execPath, [file], { encoding: 'utf8', timeout: 120_000, env }).trim()
}

// Exported runs are signed (the book's security page, "Signed runs"): processes that hand runs to
// each other share a key.
const RUN_KEY = 'a key the two processes share, 32+ bytes'

test('an exported run resumes in another process holding the key, and only there', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'codemode-node-'))
  process.env.CODEMODE_RUN_SIGNING_KEY = RUN_KEY
  try {
    const calls = []
    const cm = new CodeMode({
      config: CONFIG,
      tools: [
        tool({ name: 'fetch_rate', handler: async ({ currency }) => { calls.push(currency); await sleep(500); return 1.1 } }),
        tool({ name: 'convert', handler: ({ amount, rate }) => Math.round(amount * rate * 100) / 100 }),
      ],
    })
    const r = await cm.exec(CELL)
    assert.equal(r.status, 'waiting')
    const bytes = await cm.exportRun(r.runId)
    assert.ok(Buffer.isBuffer(bytes))
    assert.equal(bytes.subarray(0, 15).toString(), 'codemode-run/2\n')
    writeFileSync(path.join(dir, 'run.bin'), bytes)
    const { CODEMODE_RUN_SIGNING_KEY: _, ...keyless } = process.env
    const refused = child(dir, `
;(async () => {
  const cm = new CodeMode({ tools: [fetchRate, convert], config: ${JSON.stringify(CONFIG)} })
  try { await cm.importRun(require('node:fs').readFileSync(${JSON.stringify(path.join(dir, 'run.bin'))})); console.log('imported') }
  catch (e) { console.log(e.code, /CODEMODE_RUN_SIGNING_KEY/.test(e.message)) }
})()`, { env: keyless })
    assert.equal(refused, 'invalid_input true', 'a process without the key refuses the bytes')
    assert.equal((await cm.wait(r.runId)).code, 'invalid_input', 'exported means moved')
    const out = child(dir, `
;(async () => {
  const cm = new CodeMode({ tools: [fetchRate, convert], config: ${JSON.stringify(CONFIG)} })
  const id = await cm.importRun(require('node:fs').readFileSync(${JSON.stringify(path.join(dir, 'run.bin'))}))
  let r = await cm.wait(id)
  while (r.status === 'waiting') r = await cm.wait(id)
  console.log(r.status, r.value, calls.length)
})()`)
    // fetch_rate finished here during the export; the child only ran convert.
    assert.equal(out, 'completed 110 0')
    assert.deepEqual(calls, ['EUR'])
  } finally {
    delete process.env.CODEMODE_RUN_SIGNING_KEY
    rmSync(dir, { recursive: true, force: true })
  }
})

test('a directory store from the config is shared by two processes', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'codemode-node-'))
  try {
    const config = { ...CONFIG, snapshotStore: { kind: 'directory', dir: path.join(dir, 'runs') } }
    // The first process suspends the run and ends while its read-only call is still running...
    const runId = child(dir, `
;(async () => {
  const cm = new CodeMode({ tools: [fetchRate, convert], config: ${JSON.stringify(config)} })
  const r = await cm.exec(${JSON.stringify(CELL)})
  console.log(r.status === 'waiting' ? r.runId : 'not waiting: ' + JSON.stringify(r))
  process.exit(0)
})()`, { readOnly: true, delay: 3000 })
    assert.match(runId, /^cm_/)
    assert.ok(readdirSync(path.join(dir, 'runs')).some((f) => f.endsWith('.run')), 'the run is a file in the shared directory')
    // ...and this one resumes it, issuing the lost read-only call again.
    const calls = []
    const cm = new CodeMode({
      config,
      tools: [
        tool({ name: 'fetch_rate', readOnly: true, handler: async ({ currency }) => { calls.push(currency); return 1.1 } }),
        tool({ name: 'convert', handler: ({ amount, rate }) => Math.round(amount * rate * 100) / 100 }),
      ],
    })
    const done = await settle(cm, await cm.wait(runId))
    assert.equal(done.status, 'completed', JSON.stringify(done))
    assert.equal(done.value, 110)
    assert.deepEqual(calls, ['EUR'])
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})

test('damaged and misdirected exports are refused', async () => {
  const cm = new CodeMode({ config: CONFIG, tools: [tool({ name: 'slow', handler: async () => { await sleep(400); return 1 } })] })
  const r = await cm.exec('return await tools.slow({})')
  await assert.rejects(cm.exportRun(r.runId, { session: 'someone-else' }), (e) => e instanceof CodeModeError && e.code === 'invalid_input')
  const bytes = await cm.exportRun(r.runId)
  const damaged = Buffer.from(bytes)
  damaged[damaged.length >> 1] ^= 0xff
  await assert.rejects(cm.importRun(damaged), (e) => e.code === 'invalid_input' && /altered/.test(e.message))
  await assert.rejects(cm.importRun(Buffer.alloc(0)), (e) => e.code === 'invalid_input')
  const native = new CodeMode({ config: { tools: { codeMode: { runtime: 'quickjs' } } } })
  await assert.rejects(native.importRun(bytes), (e) => e.code === 'invalid_input' && /quickjs-wasi/.test(e.message))
  assert.equal(await cm.importRun(new Uint8Array(bytes)), r.runId)
  const done = await settle(cm, await cm.wait(r.runId))
  assert.equal(done.value, 1)
})
