// The ES module entry of `codemode/langchain`: the CommonJS module's exports (langchain.js), named.
import cjs from './langchain.js'

export const { codeModeTools } = cjs
export default cjs
