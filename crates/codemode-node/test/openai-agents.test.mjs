// The OpenAI Agents SDK (JS) end to end, with a scripted `Model` (a function of the input items,
// as the SDK's own tests script theirs; no network, tracing off): `Agent` and `run` get `exec` and
// `wait`. The cell suspends on a slow JS tool; without auto-wait the model resumes it through
// `wait`, with the adapter's default it sees one call. A hostile cell stays in the sandbox.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { billing, codemode, require } from './helpers.mjs'

const { CodeMode } = codemode
const { Agent, run, Usage, setTracingDisabled } = require('@openai/agents')
const { codeModeTools } = require('../openai-agents.js')

setTracingDisabled(true)

const { findCustomer, openInvoices, CELL, SLOW } = billing

const text = (t) => ({ type: 'message', id: 'msg', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: t }] })
const call = (name, args, n) => ({ type: 'function_call', id: `fc_${n}`, callId: `call_${n}`, name, arguments: args, status: 'completed' })

// exec(code); while the result is waiting, wait(runId); then answer from the value.
function scripted(firstArguments) {
  const turns = []
  return {
    turns,
    async getResponse(request) {
      const items = typeof request.input === 'string' ? [{ type: 'message', role: 'user', content: request.input }] : request.input
      turns.push({ items, tools: request.tools })
      const last = items[items.length - 1]
      let output
      if (last.type !== 'function_call_result') output = [call('exec', firstArguments, 0)]
      else {
        const result = JSON.parse(last.output.text)
        if (result.status === 'waiting') output = [call('wait', JSON.stringify({ runId: result.runId }), items.length)]
        else if (result.status === 'failed') output = [text(`failed: ${result.code}`)]
        else output = [text(`${result.value.name} owes ${result.value.owed}`)]
      }
      return { usage: new Usage(), responseId: `r${turns.length}`, output }
    },
    async *getStreamedResponse() {
      throw new Error('the tests use run() without streaming')
    },
  }
}

const results = (model) =>
  model.turns[model.turns.length - 1].items.filter((i) => i.type === 'function_call_result').map((i) => JSON.parse(i.output.text))

test('Agent and run: exec, wait, answer', async () => {
  const cm = new CodeMode({ tools: [findCustomer, openInvoices], config: SLOW })
  const surface = Object.fromEntries(cm.modelTools().map((t) => [t.name, t]))
  const model = scripted(JSON.stringify({ code: CELL }))
  const agent = new Agent({ name: 'billing', instructions: 'Answer briefly.', model, tools: codeModeTools({ codeMode: cm, session: 'conv-1', autoWait: null }) })
  const r = await run(agent, 'How much does ada@example.com owe?', { maxTurns: 8 })
  assert.equal(r.finalOutput, 'Ada owes 200')
  const statuses = results(model).map((x) => x.status)
  assert.equal(statuses[0], 'waiting')
  assert.equal(statuses[statuses.length - 1], 'completed')
  const tools = Object.fromEntries(model.turns[0].tools.map((t) => [t.name, t]))
  assert.deepEqual(Object.keys(tools).sort(), ['exec', 'wait'])
  assert.equal(tools.exec.description, surface.exec.description)
  assert.equal(tools.exec.strict, false)
  assert.deepEqual(tools.exec.parameters, surface.exec.inputSchema)
  // The run belonged to the adapter's session.
  assert.equal((await cm.wait(results(model)[0].runId, { session: 'another' })).status, 'failed')
})

test('auto-wait spends one turn', async () => {
  const cm = new CodeMode({ tools: [findCustomer, openInvoices], config: SLOW })
  const model = scripted(JSON.stringify({ code: CELL }))
  const agent = new Agent({ name: 'billing', model, tools: codeModeTools({ codeMode: cm, session: 'conv-2' }) })
  const r = await run(agent, 'How much?', { maxTurns: 8 })
  assert.equal(r.finalOutput, 'Ada owes 200')
  assert.deepEqual(results(model).map((x) => x.status), ['completed'])
  assert.equal(model.turns.length, 2)
})

test('a hostile cell stays in the sandbox', async () => {
  const cm = new CodeMode({ tools: [findCustomer] })
  const hostile =
    "const names = ['process', 'Deno', 'Bun', 'XMLHttpRequest', 'WebSocket'];" +
    " const found = names.filter(n => typeof globalThis[n] !== 'undefined');" +
    " let net; try { await fetch('http://127.0.0.1:1/'); net = 'reached' } catch (e) { net = 'refused' }" +
    " return { name: (found.join(',') || 'none') + '/' + net, owed: 0 }"
  const model = scripted(JSON.stringify({ code: hostile }))
  const agent = new Agent({ name: 'a', model, tools: codeModeTools(cm) })
  const r = await run(agent, 'escape', { maxTurns: 4 })
  assert.equal(r.finalOutput, 'none/refused owes 0')
})
