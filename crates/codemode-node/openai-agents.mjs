// The ES module entry of `codemode/openai-agents`: the CommonJS module's exports (openai-agents.js), named.
import cjs from './openai-agents.js'

export const { codeModeTools } = cjs
export default cjs
