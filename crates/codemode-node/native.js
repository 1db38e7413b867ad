'use strict'
// Loads the addon (see native.d.ts). In a checkout it is the one scripts/build-node.sh wrote next
// to this file; an installed package has none here and takes it from its platform package
// (`codemode-linux-x64-gnu`, an optional dependency npm installs only where it runs: napi-rs's
// layout, written by scripts/pack.mjs).
const { existsSync } = require('node:fs')
const path = require('node:path')

const { platform, arch } = process
if (platform !== 'linux' || arch !== 'x64') {
  throw new Error(`codemode: no prebuilt addon for ${platform}-${arch} (this package ships linux-x64-gnu)`)
}
const local = path.join(__dirname, 'codemode.linux-x64-gnu.node')
if (existsSync(local)) {
  module.exports = require(local)
} else {
  let addon
  try {
    addon = require('codemode-linux-x64-gnu')
  } catch (e) {
    if (e && e.code === 'MODULE_NOT_FOUND' && /codemode-linux-x64-gnu/.test(e.message)) {
      throw new Error(
        'codemode: its addon package `codemode-linux-x64-gnu` is not installed. npm skips optional ' +
          'dependencies when installing with --no-optional / --omit=optional, or when it could not fetch ' +
          'them: install `codemode` again without those, or add `codemode-linux-x64-gnu` yourself.',
        { cause: e },
      )
    }
    throw e
  }
  module.exports = addon
}
