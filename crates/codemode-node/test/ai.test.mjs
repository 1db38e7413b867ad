// Vercel AI SDK end to end, with the AI SDK's own mock model (`ai/test`, no network):
// the model has `exec` and `wait` instead of its tools; its scripted `exec` calls two JS tools and
// suspends on the slow one. Without auto-wait the model resumes it through `wait`; with the
// adapter's default auto-wait it sees one tool call and one result, however many times the cell
// suspended. The final text uses the result.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { generateText, isStepCount } from 'ai'
import { MockLanguageModelV4 } from 'ai/test'
import { codemode, require, sleep } from './helpers.mjs'

const { tool } = codemode
const { codeModeTools } = require('../ai.js')

const calls = []
const findCustomer = tool({
  name: 'find_customer',
  description: 'Looks a customer up by email.',
  readOnly: true,
  inputSchema: { type: 'object', properties: { email: { type: 'string' } }, required: ['email'] },
  handler: ({ email }) => {
    calls.push('find_customer')
    return { id: 'c-42', name: 'Ada', email }
  },
})
const openInvoices = tool({
  name: 'open_invoices',
  description: 'Open invoices of a customer (slow: a billing system).',
  inputSchema: { type: 'object', properties: { customer_id: { type: 'string' } }, required: ['customer_id'] },
  handler: async () => {
    calls.push('open_invoices')
    await sleep(800)
    return [{ id: 'inv-1', amount: 120.5 }, { id: 'inv-2', amount: 79.5 }]
  },
})

const CELL = `
const c = await tools.find_customer({ email: "ada@example.com" });
const invoices = await tools.open_invoices({ customer_id: c.id });
console.log(invoices.length + " invoices");
return { name: c.name, total: invoices.reduce((s, i) => s + i.amount, 0) };
`

const usage = {
  inputTokens: { total: 10, noCache: 10, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 5, text: 5, reasoning: undefined },
}
const toolCall = (id, toolName, input) => ({
  content: [{ type: 'tool-call', toolCallId: id, toolName, input: JSON.stringify(input) }],
  finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
  usage,
  warnings: [],
})
const lastResult = (prompt) => {
  for (const msg of [...prompt].reverse()) {
    if (msg.role !== 'tool') continue
    for (const part of msg.content) if (part.type === 'tool-result') return part.output
  }
  throw new Error('no tool result yet')
}

test('an agent runs a cell that suspends and answers from its result', async () => {
  const statuses = []
  let offered
  const model = new MockLanguageModelV4({
    doGenerate: async (options) => {
      offered ??= options.tools
      const step = options.prompt.filter((m) => m.role === 'assistant').length
      if (step === 0) return toolCall('call-0', 'exec', { code: CELL })
      const out = lastResult(options.prompt)
      assert.equal(out.type, 'json', JSON.stringify(out))
      statuses.push(out.value.status)
      if (out.value.status === 'waiting') return toolCall(`call-${step}`, 'wait', { runId: out.value.runId })
      assert.equal(out.value.status, 'completed', JSON.stringify(out.value))
      const { name, total } = out.value.value
      return { content: [{ type: 'text', text: `${name} owes ${total.toFixed(2)}` }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] }
    },
  })
  const tools = codeModeTools({
    tools: [findCustomer, openInvoices],
    config: { tools: { codeMode: { timeoutMs: 300 } } },
    session: 'conversation-1',
    autoWait: null,
  })
  const result = await generateText({ model, tools, stopWhen: isStepCount(10), prompt: 'How much does ada@example.com owe?' })
  assert.equal(result.text, 'Ada owes 200.00')
  // The model saw exactly two tools, with the generated exec description.
  assert.deepEqual(offered.map((t) => t.name).sort(), ['exec', 'wait'])
  const exec = offered.find((t) => t.name === 'exec')
  assert.match(exec.description, /plugin:node:find_customer\(\{email: string\}\)/)
  assert.deepEqual(exec.inputSchema.required, ['code'])
  // It suspended on the slow tool and resumed through wait.
  assert.equal(statuses[0], 'waiting')
  assert.equal(statuses.at(-1), 'completed')
  assert.deepEqual(calls, ['find_customer', 'open_invoices'])
})

const THREE_SLOW = `
const c = await tools.find_customer({ email: "ada@example.com" });
let total = 0;
for (let i = 0; i < 3; i++) {
  const invoices = await tools.open_invoices({ customer_id: c.id });
  total += invoices.reduce((s, inv) => s + inv.amount, 0);
  console.log("round " + i);
}
return { name: c.name, total };
`

test('with auto-wait the model sees one call and one result for a cell that suspended three times', async () => {
  const results = []
  const model = new MockLanguageModelV4({
    doGenerate: async (options) => {
      const step = options.prompt.filter((m) => m.role === 'assistant').length
      if (step === 0) return toolCall('call-0', 'exec', { code: THREE_SLOW })
      const out = lastResult(options.prompt)
      results.push(out.value)
      if (out.value.status === 'waiting') return toolCall(`call-${step}`, 'wait', { runId: out.value.runId })
      const { name, total } = out.value.value
      return { content: [{ type: 'text', text: `${name} owes ${total.toFixed(2)}` }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] }
    },
  })
  // Each slow call (800 ms) outlasts the run's 300 ms: the run suspends on every one of them.
  const tools = codeModeTools({ tools: [findCustomer, openInvoices], config: { tools: { codeMode: { timeoutMs: 300 } } }, session: 'conversation-2' })
  const result = await generateText({ model, tools, stopWhen: isStepCount(10), prompt: 'How much, three times over?' })
  assert.equal(result.text, 'Ada owes 600.00')
  assert.deepEqual(results.map((r) => r.status), ['completed'], 'one tool result, and it is the end')
  assert.ok(results[0].telemetry.waitCount >= 3, JSON.stringify(results[0].telemetry))
  assert.deepEqual(results[0].output.map((o) => o.text), ['round 0', 'round 1', 'round 2'])
  assert.ok(results[0].telemetry.toolResultBytes > 0 && results[0].telemetry.returnedBytes > 0)
})

test('an auto-wait budget that is not two non-negative integers is refused', async () => {
  const cm = new codemode.CodeMode({})
  await assert.rejects(cm.exec('return 1', { autoWait: { maxWallMs: -1, maxResumes: 2 } }), TypeError)
  const ok = await cm.exec('await yield_control(); await yield_control(); return 7', { autoWait: { maxWallMs: 60000, maxResumes: 5 } })
  assert.equal(ok.value, 7)
  assert.equal(ok.telemetry.waitCount, 2)
})
