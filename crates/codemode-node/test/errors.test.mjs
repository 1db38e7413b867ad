// Host API errors: the addon hands over each error's code as its own property (never inside the
// message text), the package throws them as CodeModeError (`code`, `detail`, `message` =
// `<code>: <detail>`) on the synchronous, callback and promise paths, and errors napi-rs raises
// itself (an argument of the wrong type) pass through as they are.
// Contract ids: contract §16 (error codes), contract P5 (approvals).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { codemode, require, pkgDir } from './helpers.mjs'

const { CodeMode, CodeModeError, tool } = codemode
const native = require(`${pkgDir}/native.js`)

/** An assert.throws / assert.rejects check: a CodeModeError with `code` whose detail matches `detail`. */
const coded = (code, detail) => (e) => {
  assert.ok(e instanceof CodeModeError, `not a CodeModeError: ${e && e.stack}`)
  assert.equal(e.name, 'CodeModeError')
  assert.equal(e.code, code)
  assert.match(e.detail, detail)
  assert.equal(e.message, `${code}: ${e.detail}`)
  return true
}

test('the addon sets the code as a property of its error, apart from the message', () => {
  let caught
  try {
    native.parseConfig('{ tools: ')
  } catch (e) {
    caught = e
  }
  assert.ok(caught instanceof Error)
  assert.equal(caught.name, 'CodeModeError')
  assert.equal(caught.code, 'config_error')
  assert.match(caught.message, /^invalid config at \(document\): not valid JSON5/)
  assert.doesNotMatch(caught.message, /config_error/)
})

test('a bad config is a config_error, whatever its message contains', async () => {
  // The value (quoted in the message) looks like another code and its message.
  const options = { config: { snapshotStore: { kind: 'invalid_input: tape' } } }
  assert.throws(() => new CodeMode(options), coded('config_error', /^invalid config at snapshotStore\.kind: unknown store `invalid_input: tape`/))
  await assert.rejects(CodeMode.create(options), coded('config_error', /`invalid_input: tape`/))
  assert.throws(() => new CodeMode({ config: { tools: { codeMode: { timeoutMs: 'failed: soon' } } } }), coded('config_error', /timeoutMs/))
  assert.throws(() => new CodeMode({ tools: [tool({ name: 'internal_error: x', handler: () => 1 })] }), coded('invalid_input', /identifier/))
})

test('unknown runs and wrong request ids are invalid_input', async () => {
  const cm = new CodeMode({
    tools: [tool({ name: 'delete_file', handler: ({ path }) => `deleted ${path}` })],
    config: { tools: { codeMode: { timeoutMs: 2000 } }, approvals: { require: ['plugin:node:delete_file'] } },
    approver: () => undefined,
  })
  const parked = await cm.exec("return await tools.delete_file({path: 'a.txt'})")
  assert.equal(parked.status, 'waiting', JSON.stringify(parked))
  const [pending] = parked.pendingToolCalls
  await assert.rejects(cm.approve(parked.runId, pending.requestId + 99), coded('invalid_input', /./))
  await assert.rejects(cm.approve(parked.runId, 1.5), coded('invalid_input', /^requestId must be a non-negative integer$/))
  await assert.rejects(cm.approve('cm_doesnotexist', 1), coded('invalid_input', /unavailable or expired/))
  await assert.rejects(cm.exportRun('cm_doesnotexist'), coded('invalid_input', /./))
  await assert.rejects(cm.importRun(Buffer.alloc(0)), coded('invalid_input', /too short/))
  // `wait` answers a result (the wire shape), coded the same way.
  const gone = await cm.wait('cm_doesnotexist')
  assert.equal(gone.status, 'failed')
  assert.equal(gone.code, 'invalid_input')
  // The synchronous start of an exec/wait throws the addon's coded error (unreachable through
  // the package, which always passes JSON text).
  assert.throws(() => cm._rt.waitJson('{', { session: 'default' }, () => {}), (e) => e.name === 'CodeModeError' && e.code === 'invalid_input')
  await cm.approve(parked.runId, pending.requestId)
})

test("napi-rs's own argument errors are not CodeModeErrors", async () => {
  const cm = new CodeMode()
  await assert.rejects(cm.approve('cm_x', 'one'), (e) => e instanceof Error && !(e instanceof CodeModeError) && e.name !== 'CodeModeError')
  // A value whose JSON is `undefined` reaches the addon as a non-string: the callback path rejects.
  await assert.rejects(cm.execJson({ toJSON: () => undefined }), (e) => e instanceof Error && !(e instanceof CodeModeError))
})
