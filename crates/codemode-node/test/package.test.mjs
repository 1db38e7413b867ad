// The package as a user gets it: packed in napi-rs's platform-package layout (scripts/pack.mjs:
// `codemode` plus its optional `codemode-linux-x64-gnu`), both tarballs installed offline into a
// fresh npm project, then the README's first example there, as CommonJS and as an ES module.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFileSync, spawnSync } from 'node:child_process'
import { existsSync, mkdtempSync, mkdirSync, readFileSync, writeFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { pkgDir } from './helpers.mjs'
import { pack, ADDON } from '../scripts/pack.mjs'

test('the tarballs install into a fresh npm project and run a cell', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'codemode-pack-'))
  try {
    const packed = pack(dir)
    assert.deepEqual(packed.platform.files, ['LICENSE-APACHE', 'LICENSE-MIT', 'README.md', ADDON, 'package.json'])
    assert.deepEqual(packed.main.files, [
      'LICENSE-APACHE', 'LICENSE-MIT', 'README.md', 'adapter.d.ts', 'adapter.js', 'ai.d.ts', 'ai.js', 'ai.mjs', 'awake.js', 'index.d.ts',
      'index.js', 'index.mjs', 'langchain.d.ts', 'langchain.js', 'langchain.mjs', 'native.d.ts', 'native.js',
      'openai-agents.d.ts', 'openai-agents.js', 'openai-agents.mjs', 'package.json',
    ])
    const npmInstall = (cwd, ...tarballs) => execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', ...tarballs], { cwd, encoding: 'utf8' })
    const project = (name) => {
      const at = path.join(dir, name)
      mkdirSync(at)
      writeFileSync(path.join(at, 'package.json'), JSON.stringify({ name, private: true }))
      return at
    }
    const app = project('app')
    npmInstall(app, packed.main.filename, packed.platform.filename)
    const installed = JSON.parse(readFileSync(path.join(app, 'node_modules/codemode/package.json'), 'utf8'))
    assert.deepEqual(installed.optionalDependencies, { 'codemode-linux-x64-gnu': installed.version })
    assert.ok(!existsSync(path.join(app, 'node_modules/codemode', ADDON)), 'the main package carries no addon')
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
    // The package page's example itself (README.md's first js block, an ES module), as printed there.
    const readme = readFileSync(path.join(pkgDir, 'README.md'), 'utf8').match(/```js\n([\s\S]*?)```/)[1]
    writeFileSync(path.join(app, 'readme.mjs'), readme)
    const readmeOut = execFileSync(process.execPath, ['readme.mjs'], { cwd: app, encoding: 'utf8' }).trim()
    assert.equal(readmeOut, 'completed 21')
    // Without its platform package (npm skipped the optional dependency: offline, nothing to fetch
    // it from), loading says what is missing and how to get it, instead of a bare resolve error.
    const bare = project('bare')
    npmInstall(bare, packed.main.filename)
    const failed = spawnSync(process.execPath, ['-e', "require('codemode')"], { cwd: bare, encoding: 'utf8' })
    assert.notEqual(failed.status, 0)
    assert.match(failed.stderr, /its addon package `codemode-linux-x64-gnu` is not installed/)
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
})
