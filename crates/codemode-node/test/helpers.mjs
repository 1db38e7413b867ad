// Shared helpers of the Node package's tests (node's test runner, through the package itself).
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import path from 'node:path'

export const require = createRequire(import.meta.url)
export const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
export const repoDir = path.resolve(pkgDir, '../..')
export const codemode = require(pkgDir)

/** `wait` until the run no longer waits on running calls. */
export async function settle(cm, r, options = {}, limit = 100) {
  for (let i = 0; i < limit; i++) {
    if (r.status !== 'waiting' || r.pendingToolCalls.some((p) => p.kind === 'approval')) return r
    r = await cm.wait(r.runId, options)
  }
  throw new Error(`still waiting after ${limit} waits: ${JSON.stringify(r)}`)
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

/** The billing tools the agent-framework adapter tests share: a quick lookup, a slow call that
 * suspends a cell under `SLOW` (0.8 s against a 0.3 s `timeoutMs`), and the cell using both. */
export const billing = {
  findCustomer: codemode.tool({
    name: 'find_customer',
    readOnly: true,
    inputSchema: { type: 'object', properties: { email: { type: 'string' } }, required: ['email'] },
    handler: ({ email }) => ({ id: 'c-42', name: 'Ada', email }),
  }),
  openInvoices: codemode.tool({
    name: 'open_invoices',
    inputSchema: { type: 'object', properties: { customer_id: { type: 'string' } }, required: ['customer_id'] },
    handler: async () => {
      await sleep(800)
      return [{ id: 'inv-1', amount: 120.5 }, { id: 'inv-2', amount: 79.5 }]
    },
  }),
  CELL: `
const c = await tools.find_customer({ email: "ada@example.com" });
const invoices = await tools.open_invoices({ customer_id: c.id });
return { name: c.name, owed: invoices.reduce((s, i) => s + i.amount, 0) };
`,
  SLOW: { tools: { codeMode: { timeoutMs: 300 } } },
}
