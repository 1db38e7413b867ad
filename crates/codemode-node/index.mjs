// The ES module entry of the `codemode` package: the CommonJS module's exports (index.js), named.
import cjs from './index.js'

export const { CodeMode, CodeModeError, tool, checkJson, ADAPTER_AUTO_WAIT, version } = cjs
export default cjs
