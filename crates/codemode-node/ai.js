'use strict'
// The Vercel AI SDK adapter: `exec` and `wait` as AI SDK tools (see ai.d.ts).
const { tool: aiTool, jsonSchema } = require('ai')
const { CodeMode, ADAPTER_AUTO_WAIT } = require('./index.js')

/**
 * The AI SDK tool set `{ exec, wait }` over a code-mode runtime: pass a CodeMode, or the options to
 * build one. The `exec` description is generated from the catalog exactly as `codemode serve`
 * lists it; each tool returns the run's result JSON. A run that suspends on slow tools is resumed
 * by the tool itself (`autoWait`, default ADAPTER_AUTO_WAIT: up to 5 minutes and 50 resumes per
 * call; `autoWait: null` turns it off), so the model pays one step for a cell however long its
 * tools take; only a run past that budget, or one with a call parked for approval, comes back
 * `waiting` — telling the model to call `wait` with its `runId`.
 */
function codeModeTools(options = {}) {
  const cm = options instanceof CodeMode ? options : options.codeMode || new CodeMode(options)
  const session = options instanceof CodeMode ? undefined : options.session
  const autoWait = options instanceof CodeMode || options.autoWait === undefined ? ADAPTER_AUTO_WAIT : options.autoWait
  const byName = Object.fromEntries(cm.modelTools().map((t) => [t.name, t]))
  const make = (name, run) =>
    aiTool({
      description: byName[name].description,
      inputSchema: jsonSchema(byName[name].inputSchema),
      execute: async (args, { abortSignal } = {}) => {
        const { text, ...json } = await run(args, { session, signal: abortSignal, autoWait })
        return json
      },
    })
  return {
    exec: make('exec', (args, o) => cm.execJson(args, o)),
    wait: make('wait', (args, o) => cm.waitJson(args, o)),
  }
}

module.exports = { codeModeTools }
