'use strict'
// Loads the addon built by scripts/build-node.sh (`codemode.linux-x64-gnu.node`); see native.d.ts.
const { platform, arch } = process
if (platform !== 'linux' || arch !== 'x64') {
  throw new Error(`codemode: no prebuilt addon for ${platform}-${arch} (this package ships linux-x64-gnu)`)
}
module.exports = require('./codemode.linux-x64-gnu.node')
