// The package as a user gets it: `npm pack`, then `npm install <tarball>` into a
// fresh npm project (offline: it has no dependencies), then the README's first example there.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { pkgDir } from './helpers.mjs'

test('the tarball installs into a fresh npm project and runs a cell', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'codemode-pack-'))
  try {
    const packed = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', dir], { cwd: pkgDir, encoding: 'utf8' }))
    const files = packed[0].files.map((f) => f.path).sort()
    assert.deepEqual(files, [
      'README.md', 'adapter.d.ts', 'adapter.js', 'ai.d.ts', 'ai.js', 'ai.mjs', 'codemode.linux-x64-gnu.node', 'index.d.ts',
      'index.js', 'index.mjs', 'langchain.d.ts', 'langchain.js', 'langchain.mjs', 'native.d.ts', 'native.js',
      'openai-agents.d.ts', 'openai-agents.js', 'openai-agents.mjs', 'package.json',
    ])
    const app = path.join(dir, 'app')
    mkdirSync(app)
    writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true }))
    execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', path.join(dir, packed[0].filename)], { cwd: app })
    const script = `
      const { CodeMode, tool } = require('codemode')
      const getWeather = tool({ name: 'get_weather', readOnly: true,
        inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        handler: async ({ city }) => ({ city, celsius: 21 }) })
      const cm = new CodeMode({ tools: [getWeather] })
      cm.exec("return (await tools.get_weather({city: 'Oslo'})).celsius").then((r) => console.log(r.status, r.value))`
    const out = execFileSync(process.execPath, ['-e', script], { cwd: app, encoding: 'utf8' }).trim()
    assert.equal(out, 'completed 21')
    // The same as an ES module, and the package's own metadata through its `./package.json` export.
    const esm = `
      import { CodeMode, tool, version } from 'codemode'
      import { createRequire } from 'node:module'
      const meta = createRequire(import.meta.url)('codemode/package.json')
      const cm = new CodeMode({ tools: [tool({ name: 'twice', inputSchema: { type: 'object' }, handler: ({ n }) => 2 * n })] })
      const r = await cm.exec('return await tools.twice({ n: 21 })')
      console.log(r.status, r.value, meta.version === version)`
    const esmOut = execFileSync(process.execPath, ['--input-type=module', '-e', esm], { cwd: app, encoding: 'utf8' }).trim()
    assert.equal(esmOut, 'completed 42 true')
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
