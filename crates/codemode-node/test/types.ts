// Compiled by `tsc --noEmit` in test/types.test.mjs: the package's declarations (index.d.ts, ai.d.ts
// and the generated native.d.ts) describe the API as the README uses it.
import { CodeMode, CodeModeError, tool, type Result } from 'codemode'
import { codeModeTools } from 'codemode/ai'
import { codeModeTools as langchainTools } from 'codemode/langchain'
import { codeModeTools as agentsTools } from 'codemode/openai-agents'
import type { NativeRuntime } from '../native'
import { z } from 'zod'

const weather = tool({
  name: 'get_weather',
  description: 'Current weather of a city.',
  readOnly: true,
  inputSchema: z.object({ city: z.string() }),
  handler: async ({ city }: { city: string }) => ({ city, celsius: 21 }),
})
const add = tool({ name: 'add', inputSchema: { type: 'object' }, handler: (input: { a: number; b: number }) => input.a + input.b })

async function main(): Promise<number> {
  const cm = new CodeMode({ tools: [weather, add], config: { tools: { codeMode: { timeoutMs: 5000 } } } })
  let r: Result = await cm.exec('return (await tools.get_weather({city: "Oslo"})).celsius')
  while (r.status === 'waiting') r = await cm.wait(r.runId, { signal: AbortSignal.timeout(10_000) })
  if (r.status === 'failed') throw new CodeModeError(r.code ?? 'failed', r.error)
  const bytes: Buffer = await cm.exportRun('cm_x').catch(() => Buffer.alloc(0))
  const id: string = await cm.importRun(new Uint8Array(bytes)).catch(() => '')
  await cm.approve(id, 1, { deny: 'no' }).catch(() => undefined)
  const names: string[] = cm.modelTools().map((t) => t.name)
  const { exec, wait } = codeModeTools({ tools: [weather] })
  const lcTools = langchainTools({ codeMode: cm, session: 'conversation-1', agent: 'support', autoWait: null })
  const lcNames: string[] = lcTools.map((t) => t.name)
  const agentTools = agentsTools(cm)
  const agentNames: string[] = agentTools.map((t) => t.name)
  void lcNames
  void agentNames
  void exec
  void wait
  const native: NativeRuntime | undefined = undefined
  void native
  return typeof r.value === 'number' ? r.value + names.length : 0
}

void main
