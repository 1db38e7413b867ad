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
