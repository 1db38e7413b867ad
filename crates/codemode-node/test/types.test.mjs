// The TypeScript declarations: `tsc --noEmit` over a file using the API as the README
// does, against index.d.ts, ai.d.ts and the generated native.d.ts; and a misuse must fail to type.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { writeFileSync, rmSync } from 'node:fs'
import path from 'node:path'
import { pkgDir } from './helpers.mjs'

const tsc = path.join(pkgDir, 'node_modules/typescript/bin/tsc')

function typecheck(project) {
  return spawnSync(process.execPath, [tsc, '-p', project], { cwd: pkgDir, encoding: 'utf8' })
}

test('the declarations type the documented usage', () => {
  const r = typecheck('test/tsconfig.json')
  assert.equal(r.status, 0, r.stdout + r.stderr)
})

test('a misuse does not type-check', () => {
  const bad = path.join(pkgDir, 'test/_misuse.ts')
  const project = path.join(pkgDir, 'test/_misuse.tsconfig.json')
  writeFileSync(bad, "import { CodeMode } from 'codemode'\nconst cm = new CodeMode({ tools: [] })\nvoid cm.exec(42)\nvoid cm.wait('x', { session: 7 })\n")
  writeFileSync(project, JSON.stringify({ extends: './tsconfig.json', files: ['_misuse.ts'] }))
  try {
    const r = typecheck(project)
    assert.notEqual(r.status, 0)
    assert.match(r.stdout, /_misuse\.ts\(3,/)
    assert.match(r.stdout, /_misuse\.ts\(4,/)
  } finally {
    rmSync(bad, { force: true })
    rmSync(project, { force: true })
  }
})
