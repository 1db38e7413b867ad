// The conformance corpus's cells (tests/conformance/cases, with the expected results the Rust
// suite snapshots) through the Node API ("Security and bad input"): infinite loops,
// memory bombs, deep recursion, prototype tampering, hostile values, forbidden imports… each
// ends exactly as through the Rust API, and the process keeps serving. Cases that need the
// conformance catalog's tools, or snapshot every step, stay with the Rust suite.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { codemode, repoDir } from './helpers.mjs'

const { CodeMode } = codemode
const corpus = path.join(repoDir, 'tests/conformance')
const NEEDS_CATALOG = /tools\.|tools\[|MCP\.|namespaces|API\.|Shipping|ALL_TOOLS|@steps|@timing/

function cases() {
  return readdirSync(path.join(corpus, 'cases'))
    .filter((f) => f.endsWith('.js'))
    .map((file) => {
      const source = readFileSync(path.join(corpus, 'cases', file), 'utf8')
      const header = source.split('\n').filter((l) => l.startsWith('// @')).map((l) => l.slice(4))
      const directive = (name) => header.find((l) => l.startsWith(name))?.slice(name.length).trim()
      const snap = readFileSync(path.join(corpus, 'snapshots', file.replace(/\.js$/, '.snap')), 'utf8')
      const expected = JSON.parse(snap.split('\n---\n').slice(1).join('\n---\n'))
      return {
        name: file.replace(/\.js$/, ''),
        source,
        config: JSON.parse(directive('config') || '{}'),
        exec: JSON.parse(directive('exec') || '{}'),
        redactError: header.includes('redact-error'),
        expected,
        usable: !NEEDS_CATALOG.test(source),
      }
    })
}

const all = cases()
const runtimes = new Map()
function runtimeFor(config) {
  const key = JSON.stringify(config)
  if (!runtimes.has(key)) runtimes.set(key, new CodeMode({ config: { tools: { codeMode: config } }, session: 'conformance-session' }))
  return runtimes.get(key)
}

test('the corpus has hostile cells to run', () => {
  const names = all.filter((c) => c.usable).map((c) => c.name)
  for (const expected of ['infinite_loop', 'infinite_loop_caught', 'memory_bomb', 'memory_bomb_small_objects', 'deep_recursion', 'dynamic_import_via_eval', 'json_output_cycles', 'non_json_values', 'sandbox_surface', 'unavailable_globals']) {
    assert.ok(names.includes(expected), `${expected} is in the corpus and runs here`)
  }
})

for (const c of all.filter((c) => c.usable)) {
  test(`corpus: ${c.name}`, async () => {
    const cm = runtimeFor(c.config)
    let r = await cm.execJson({ code: c.source, ...c.exec })
    for (let i = 0; r.status === 'waiting' && i < 60; i++) r = await cm.wait(r.runId)
    const want = c.expected
    assert.equal(r.status, want.status, JSON.stringify(r))
    assert.equal(r.code, want.code)
    assert.deepEqual(r.value, want.value)
    assert.deepEqual(r.output, want.output)
    if (!c.redactError) assert.equal(r.error, want.error)
    // Still serving.
    assert.equal((await cm.exec('return 1 + 1')).value, 2)
  })
}
