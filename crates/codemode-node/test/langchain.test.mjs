// LangChain.js end to end, with a scripted chat model (a function of the conversation, as
// LangChain's own agent tests script theirs; no network): `createAgent` gets `exec` and `wait`
// instead of its tools. The cell suspends on a slow JS tool; without auto-wait the model resumes it
// through `wait`, with the adapter's default it sees one call. A hostile cell stays in the sandbox,
// and a malformed call is refused.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { billing, codemode, require } from './helpers.mjs'

const { CodeMode } = codemode
const { createAgent } = require('langchain')
const { BaseChatModel } = require('@langchain/core/language_models/chat_models')
const { AIMessage, HumanMessage, ToolMessage } = require('@langchain/core/messages')
const { convertToOpenAITool } = require('@langchain/core/utils/function_calling')
const { codeModeTools } = require('../langchain.js')

const { findCustomer, openInvoices, CELL, SLOW } = billing

/** A chat model whose reply is a function of the conversation; it records the tools bound. */
class ScriptedChatModel extends BaseChatModel {
  constructor(script) {
    super({})
    this.script = script
    this.bound = []
  }
  _llmType() {
    return 'scripted'
  }
  bindTools(tools) {
    this.bound.push(tools.map((t) => convertToOpenAITool(t)))
    return this
  }
  async _generate(messages) {
    const message = this.script(messages)
    return { generations: [{ message, text: typeof message.content === 'string' ? message.content : '' }] }
  }
}

const callTool = (name, args, n) => new AIMessage({ content: '', tool_calls: [{ name, args, id: `call_${n}`, type: 'tool_call' }] })

function execWaitAnswer(cell) {
  return (messages) => {
    const last = messages[messages.length - 1]
    if (HumanMessage.isInstance(last)) return callTool('exec', { code: cell }, 0)
    assert.ok(ToolMessage.isInstance(last), `unexpected ${last.constructor.name}`)
    const result = JSON.parse(last.content)
    if (result.status === 'waiting') return callTool('wait', { runId: result.runId }, messages.length)
    if (result.status === 'failed') return new AIMessage(`failed: ${result.code}`)
    return new AIMessage(`${result.value.name} owes ${result.value.owed}`)
  }
}

const toolResults = (messages) => messages.filter((m) => ToolMessage.isInstance(m)).map((m) => JSON.parse(m.content))

test('createAgent: exec, wait, answer', async () => {
  const cm = new CodeMode({ tools: [findCustomer, openInvoices], config: SLOW })
  const surface = Object.fromEntries(cm.modelTools().map((t) => [t.name, t]))
  const model = new ScriptedChatModel(execWaitAnswer(CELL))
  const agent = createAgent({ model, tools: codeModeTools({ codeMode: cm, session: 'conv-1', autoWait: null }) })
  const out = await agent.invoke({ messages: [new HumanMessage('How much does ada@example.com owe?')] })
  assert.equal(out.messages[out.messages.length - 1].content, 'Ada owes 200')
  const statuses = toolResults(out.messages).map((r) => r.status)
  assert.equal(statuses[0], 'waiting')
  assert.equal(statuses[statuses.length - 1], 'completed')
  const bound = Object.fromEntries(model.bound[0].map((t) => [t.function.name, t.function]))
  assert.deepEqual(Object.keys(bound).sort(), ['exec', 'wait'])
  assert.equal(bound.exec.description, surface.exec.description)
  assert.deepEqual(bound.exec.parameters.required, surface.exec.inputSchema.required)
  // The run belonged to the adapter's session.
  assert.equal((await cm.wait(toolResults(out.messages)[0].runId, { session: 'another' })).status, 'failed')
})

test('auto-wait spends one turn', async () => {
  const cm = new CodeMode({ tools: [findCustomer, openInvoices], config: SLOW })
  const agent = createAgent({ model: new ScriptedChatModel(execWaitAnswer(CELL)), tools: codeModeTools({ codeMode: cm, session: 'conv-2' }) })
  const out = await agent.invoke({ messages: [new HumanMessage('How much?')] })
  assert.equal(out.messages[out.messages.length - 1].content, 'Ada owes 200')
  const results = toolResults(out.messages)
  assert.deepEqual(results.map((r) => r.status), ['completed'])
  assert.ok(results[0].telemetry.waitCount >= 1, 'the adapter resumed the run itself')
})

test('a hostile cell stays in the sandbox and a malformed call is refused', async () => {
  const cm = new CodeMode({ tools: [findCustomer] })
  const agent = createAgent({
    model: new ScriptedChatModel(execWaitAnswer("require('child_process').execSync('touch /tmp/pwned'); return 1")),
    tools: codeModeTools(cm),
  })
  const out = await agent.invoke({ messages: [new HumanMessage('escape')] })
  assert.equal(out.messages[out.messages.length - 1].content, 'failed: module_access_denied')
  // LangChain.js checks the input against the tool's schema (the runtime's own) before the call.
  const [exec] = codeModeTools(cm)
  await assert.rejects(exec.invoke({ code: 42 }), /did not match expected schema/)
  await assert.rejects(exec.invoke({ code: 'return 1', language: 'cobol' }), /did not match expected schema/)
})
