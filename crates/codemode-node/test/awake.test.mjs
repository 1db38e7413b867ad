// The main thread's loop of quick tool calls (awake.js; the book's "Python and Node" page, "Tool calls on the
// main thread"), driven by a scripted stand-in for the addon's three methods so that its bounds
// are checked exactly: the budget ends the stay, a promise ends it and wakes the loop once
// settled, and a broken loop fails its calls instead of leaving them waiting.
// The real addon's loop runs in every runtime test (runtime.test.mjs).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const { AWAKE_BUDGET_MS, keepAwake, wake } = require('../awake.js')

/** An addon stand-in: `next(stay)` scripts takeJob; answers, stays and rests are recorded. */
function scripted(next) {
  const seen = { stays: [], answers: [], rests: 0 }
  const rt = {
    takeJob(stay) {
      seen.stays.push(stay)
      return next(stay, seen)
    },
    answerJob(answer) {
      seen.answers.push(answer)
    },
    restJobs() {
      seen.rests++
    },
  }
  return { rt, seen }
}

const busy = (ms) => {
  const until = performance.now() + ms
  while (performance.now() < until) {}
}

test('the loop stops asking to stay after its budget, drains what is queued, and rests', () => {
  let queuedAfterStay = 2
  const { rt, seen } = scripted((stay) => {
    if (stay) return [0, '[1]']
    return queuedAfterStay-- > 0 ? [0, '[2]'] : null
  })
  // The stand-in has another call whenever the loop asks to stay: only the budget (the clock)
  // can end the loop. Each call takes a fifth of the budget.
  const box = { rt: new WeakRef(rt), wrappers: [(args) => { busy(AWAKE_BUDGET_MS / 5); return `answer ${args}` }], awake: true }
  const start = performance.now()
  keepAwake(box)
  assert.ok(performance.now() - start >= AWAKE_BUDGET_MS, 'it stayed for its budget')
  const firstLeave = seen.stays.indexOf(false)
  assert.ok(firstLeave >= 1, `asked to stay first: ${seen.stays}`)
  assert.ok(seen.stays.slice(0, firstLeave).every((s) => s === true))
  assert.ok(seen.stays.slice(firstLeave).every((s) => s === false), 'never asks to stay again')
  assert.equal(seen.answers.length, firstLeave + 2, 'every call taken was answered, the queued ones too')
  assert.equal(seen.answers.at(-1), 'answer [2]')
  assert.equal(seen.rests, 1)
  assert.equal(box.awake, false)
})

test('a promise answer ends the stay, and the loop wakes again once it settles', async () => {
  let round = 0
  let settle
  const promise = new Promise((resolve) => { settle = resolve })
  const { rt, seen } = scripted((stay, s) => {
    if (round === 0 && s.stays.length === 1) return [1, '[async]']
    if (round === 0) return null
    return s.stays.length === 3 ? [0, '[sync]'] : null
  })
  const box = { rt: new WeakRef(rt), wrappers: [() => 'sync answer', () => promise], awake: true }
  keepAwake(box)
  assert.deepEqual(seen.stays, [true, false], 'after a promise the loop only drains')
  assert.deepEqual(seen.answers, [promise])
  assert.equal(box.awake, false)
  round = 1
  settle('{"ok":1}')
  await promise
  // The wake-up is a microtask queued when the promise settled; let it (and the loop) run.
  await new Promise((resolve) => setImmediate(resolve))
  assert.deepEqual(seen.stays.slice(2), [true, true], 'woken again: it asks to stay')
  assert.deepEqual(seen.answers.slice(1), ['sync answer'])
  assert.equal(seen.rests, 2)
})

test('a loop that breaks fails its calls (restJobs) and does not throw out of its microtask', () => {
  const { rt, seen } = scripted(() => [0, '[1]'])
  rt.answerJob = () => {
    throw new Error('the addon refused the answer')
  }
  const box = { rt: new WeakRef(rt), wrappers: [() => 'x'], awake: true }
  assert.doesNotThrow(() => keepAwake(box))
  assert.equal(seen.rests, 1)
  assert.equal(box.awake, false)
  // A runtime not up yet, or a loop already running, is not woken twice.
  const idle = { rt: null, awake: false }
  wake(idle)
  assert.equal(idle.awake, false)
  const running = { rt: new WeakRef(rt), wrappers: [], awake: true }
  wake(running)
  assert.equal(seen.stays.length, 1, 'no second loop started')
})
