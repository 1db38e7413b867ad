// Options shared by the framework adapters of the `codemode` package (langchain, openai-agents).
import type { AutoWait, CodeMode, CodeModeOptions } from './index'

export interface AdapterOptions extends CodeModeOptions {
  /** Use this runtime instead of building one from the options. */
  codeMode?: CodeMode
  /** The agent whose tool policy the runs get (`agents.list[].id`). */
  agent?: string
  /** The model provider the runs are for (`tools.byProvider`). */
  provider?: string
  /** The model the runs are for. */
  model?: string
  /**
   * How far each tool call resumes a waiting run itself (default: `ADAPTER_AUTO_WAIT`, 5 minutes
   * and 50 resumes; `null`: never — every `waiting` result goes to the model).
   */
  autoWait?: AutoWait | null
}
