'use strict'
// What the framework adapters share: `exec` and `wait` over a runtime for one conversation (session,
// target, auto-wait), returning the run's result JSON without its `text` convenience field.
const { CodeMode, ADAPTER_AUTO_WAIT } = require('./index.js')

function surface(options = {}) {
  const own = options instanceof CodeMode
  const cm = own ? options : options.codeMode || new CodeMode(options)
  const pick = (k) => (own ? undefined : options[k])
  const autoWait = own || options.autoWait === undefined ? ADAPTER_AUTO_WAIT : options.autoWait
  const target = { session: pick('session'), agent: pick('agent'), provider: pick('provider'), model: pick('model') }
  const definitions = Object.fromEntries(cm.modelTools().map((t) => [t.name, t]))
  const call = async (name, args, signal) => {
    const o = { ...target, autoWait, signal }
    const { text, ...json } = await (name === 'exec' ? cm.execJson(args, o) : cm.waitJson(args, o))
    return json
  }
  return { cm, definitions, call }
}

module.exports = { surface }
