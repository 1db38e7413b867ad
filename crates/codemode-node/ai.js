'use strict'
// The Vercel AI SDK adapter: `exec` and `wait` as AI SDK tools (see ai.d.ts).
const { tool: aiTool, jsonSchema } = require('ai')
const { CodeMode } = require('./index.js')

/**
 * The AI SDK tool set `{ exec, wait }` over a code-mode runtime: pass a CodeMode, or the options to
 * build one. The `exec` description is generated from the catalog exactly as `codemode serve`
 * lists it; each tool returns the run's result JSON (a `waiting` result tells the model to call
 * `wait` with its `runId`).
 */
function codeModeTools(options = {}) {
  const cm = options instanceof CodeMode ? options : options.codeMode || new CodeMode(options)
  const session = options instanceof CodeMode ? undefined : options.session
  const byName = Object.fromEntries(cm.modelTools().map((t) => [t.name, t]))
  const make = (name, run) =>
    aiTool({
      description: byName[name].description,
      inputSchema: jsonSchema(byName[name].inputSchema),
      execute: async (args, { abortSignal } = {}) => {
        const { text, ...json } = await run(args, { session, signal: abortSignal })
        return json
      },
    })
  return {
    exec: make('exec', (args, o) => cm.execJson(args, o)),
    wait: make('wait', (args, o) => cm.waitJson(args, o)),
  }
}

module.exports = { codeModeTools }
