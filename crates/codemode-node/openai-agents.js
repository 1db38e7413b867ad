'use strict'
// The OpenAI Agents SDK adapter: `exec` and `wait` as `@openai/agents` function tools (see
// openai-agents.d.ts).
const { tool } = require('@openai/agents')
const { surface } = require('./adapter.js')

/**
 * `[exec, wait]` as Agents SDK tools over a code-mode runtime (a CodeMode, or the options to build
 * one), for `new Agent({ tools })` and `run`. Their JSON schemas are used as they are (`strict:
 * false`: strict mode would make every optional field of `exec` required). Each returns the run's
 * result JSON as a string; a run that suspends on slow tools is resumed by the tool itself
 * (`autoWait`, default ADAPTER_AUTO_WAIT; `null` turns it off).
 */
function codeModeTools(options = {}) {
  const { definitions, call } = surface(options)
  return ['exec', 'wait'].map((name) =>
    tool({
      name,
      description: definitions[name].description,
      parameters: definitions[name].inputSchema,
      strict: false,
      execute: async (args) => JSON.stringify(await call(name, args)),
    }),
  )
}

module.exports = { codeModeTools }
