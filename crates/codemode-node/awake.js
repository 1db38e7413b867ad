'use strict'
// Node's main thread kept awake between a cell's quick tool calls: the JavaScript half of the
// addon's `awake` module (crates/codemode-node/src/awake.rs), which says why and what bounds it.
// Internal to the package; index.js uses it.

/**
 * How long, in milliseconds, Node's main thread answers a cell's back-to-back tool calls in one
 * stretch before it lets its event loop turn (timers, I/O, other callbacks). See `keepAwake`.
 */
const AWAKE_BUDGET_MS = 1

/**
 * Keeps the main thread answering tool calls a moment: each call that reached it through the
 * event loop (a wake-up from epoll, the largest cost of a quick call) schedules this loop, which
 * asks the addon for the next call and answers it directly. The addon waits for one only a
 * moment, and only while a core is idle; after AWAKE_BUDGET_MS the loop stops asking to stay and
 * the event loop turns before the next call wakes it again. An answer that is a promise settles
 * in a microtask, after the loop: the loop stops asking to stay, and starts again once the
 * promise settles (the cell's next call is likely a moment away then). `box` holds the runtime
 * (a WeakRef: the tools' threadsafe functions hold their wrappers, which hold `box`, and a strong
 * reference would keep a dropped runtime alive) and the tools' wrappers by the index the addon
 * names them with.
 */
function keepAwake(box) {
  const rt = box.rt && box.rt.deref()
  const { wrappers } = box
  if (!rt) {
    box.awake = false
    return
  }
  const start = performance.now()
  let pending = null
  try {
    for (let job; (job = rt.takeJob(pending === null && performance.now() - start < AWAKE_BUDGET_MS)) !== null; ) {
      const w = wrappers[job[0]]
      const answer = w ? w(job[1]) : JSON.stringify({ error: { name: 'Error', message: `no tool at index ${job[0]}` } })
      rt.answerJob(answer)
      if (typeof answer !== 'string') pending = answer
    }
  } catch {
    // Only the addon's own conversions can throw here (the wrappers catch everything): the loop
    // ends, and the calls handed to it fail (restJobs) rather than take the process down from a
    // microtask.
  } finally {
    // Normally a no-op; if the loop broke, calls handed to it fail instead of waiting forever.
    rt.restJobs()
    box.awake = false
  }
  if (pending !== null) awakeWhenSettled(box, pending)
}

/** Schedules `keepAwake` after the current call, unless it runs already or the runtime is not up. */
function wake(box) {
  if (box.rt && !box.awake) {
    box.awake = true
    queueMicrotask(() => keepAwake(box))
  }
}

/** Wakes once `answer` (a wrapper's promise, which never rejects) has settled. */
function awakeWhenSettled(box, answer) {
  answer.then(() => wake(box), () => wake(box))
}

module.exports = { AWAKE_BUDGET_MS, keepAwake, wake, awakeWhenSettled }
