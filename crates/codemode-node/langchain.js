'use strict'
// The LangChain.js adapter: `exec` and `wait` as LangChain tools (see langchain.d.ts).
const { tool } = require('@langchain/core/tools')
const { surface } = require('./adapter.js')

/**
 * `[exec, wait]` as LangChain tools over a code-mode runtime (a CodeMode, or the options to build
 * one), for `createAgent({ tools })`, a LangGraph `ToolNode` or a chat model's `bindTools`. Each
 * returns the run's result JSON as a string; a run that suspends on slow tools is resumed by the
 * tool itself (`autoWait`, default ADAPTER_AUTO_WAIT; `null` turns it off).
 */
function codeModeTools(options = {}) {
  const { definitions, call } = surface(options)
  return ['exec', 'wait'].map((name) =>
    tool(async (args, config) => JSON.stringify(await call(name, args, config && config.signal)), {
      name,
      description: definitions[name].description,
      schema: definitions[name].inputSchema,
    }),
  )
}

module.exports = { codeModeTools }
