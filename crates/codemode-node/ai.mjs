// The ES module entry of `codemode/ai`: the CommonJS module's exports (ai.js), named.
import cjs from './ai.js'

export const { codeModeTools } = cjs
export default cjs
