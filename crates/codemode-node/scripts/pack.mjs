// Packs the npm package in napi-rs's platform-package layout, the way it is published:
// - `codemode-linux-x64-gnu`: the addon alone (`codemode.linux-x64-gnu.node`), with `os`, `cpu`
//   and `libc` so that npm installs it only where it runs;
// - `codemode`: the JavaScript, the declarations and the README, without the addon, naming the
//   platform package as an optional dependency of the same version (what napi-rs's `prepublish`
//   writes into package.json; the checked-in package.json has no such dependency, so that a
//   checkout's `npm ci` never looks for a package that is not published yet).
// Both packages are staged in a temporary directory (with the repository's licence texts) and
// packed with `npm pack` into OUT_DIR. The addon is the one next to package.json unless --addon
// names another (scripts/dist.sh passes the release build's). Prints one JSON line:
// `{ main: {filename, files}, platform: {filename, files} }`.
// Usage: node scripts/pack.mjs OUT_DIR [--addon FILE]
import { execFileSync } from 'node:child_process'
import { copyFileSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const pkgDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const repoDir = path.resolve(pkgDir, '../..')
/** The one platform this package is built for (napi-rs's name for it). */
export const PLATFORM = { triple: 'linux-x64-gnu', os: 'linux', cpu: 'x64', libc: 'glibc' }
export const ADDON = `codemode.${PLATFORM.triple}.node`

function npmPack(dir, outDir) {
  const [packed] = JSON.parse(execFileSync('npm', ['pack', '--json', '--pack-destination', outDir], { cwd: dir, encoding: 'utf8' }))
  return { filename: path.join(outDir, packed.filename), files: packed.files.map((f) => f.path).sort() }
}

/** Packs both packages into `outDir`; returns their tarballs and file lists. */
export function pack(outDir, addon = path.join(pkgDir, ADDON)) {
  const meta = JSON.parse(readFileSync(path.join(pkgDir, 'package.json'), 'utf8'))
  const stage = mkdtempSync(path.join(tmpdir(), 'codemode-stage-'))
  try {
    const licences = ['LICENSE-MIT', 'LICENSE-APACHE']
    const platformName = `${meta.name}-${PLATFORM.triple}`

    const platformDir = path.join(stage, 'platform')
    mkdirSync(platformDir)
    copyFileSync(addon, path.join(platformDir, ADDON))
    for (const l of licences) copyFileSync(path.join(repoDir, l), path.join(platformDir, l))
    writeFileSync(path.join(platformDir, 'README.md'),
      `# ${platformName}\n\nThe prebuilt addon of the \`${meta.name}\` package for ${PLATFORM.triple} (glibc). ` +
      `Install \`${meta.name}\`, not this package: npm adds it where it runs.\n`)
    writeFileSync(path.join(platformDir, 'package.json'), JSON.stringify({
      name: platformName,
      version: meta.version,
      description: `The ${PLATFORM.triple} addon of ${meta.name}.`,
      license: meta.license,
      main: ADDON,
      files: [ADDON, ...licences],
      os: [PLATFORM.os],
      cpu: [PLATFORM.cpu],
      libc: [PLATFORM.libc],
      engines: meta.engines,
    }, null, 2) + '\n')

    const mainDir = path.join(stage, 'main')
    mkdirSync(mainDir)
    const files = meta.files.filter((f) => f !== ADDON)
    for (const f of [...files, 'README.md']) copyFileSync(path.join(pkgDir, f), path.join(mainDir, f))
    for (const l of licences) copyFileSync(path.join(repoDir, l), path.join(mainDir, l))
    const { devDependencies: _dev, scripts: _scripts, ...published } = meta
    writeFileSync(path.join(mainDir, 'package.json'), JSON.stringify({
      ...published,
      files: [...files, ...licences],
      optionalDependencies: { [platformName]: meta.version },
    }, null, 2) + '\n')

    mkdirSync(outDir, { recursive: true })
    return { platform: npmPack(platformDir, outDir), main: npmPack(mainDir, outDir) }
  } finally {
    rmSync(stage, { recursive: true, force: true })
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2)
  const at = args.indexOf('--addon')
  const addon = at >= 0 ? path.resolve(args[at + 1]) : undefined
  if (at >= 0) args.splice(at, 2)
  if (args.length !== 1) {
    console.error('usage: node scripts/pack.mjs OUT_DIR [--addon FILE]')
    process.exit(2)
  }
  console.log(JSON.stringify(pack(path.resolve(args[0]), addon)))
}
