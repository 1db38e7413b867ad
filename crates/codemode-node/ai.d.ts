// The Vercel AI SDK adapter of the `codemode` package.
import type { Tool } from 'ai'
import type { AutoWait, CodeMode, CodeModeOptions } from './index'

export interface CodeModeToolsOptions extends CodeModeOptions {
  /** Use this runtime instead of building one from the options. */
  codeMode?: CodeMode
  /**
   * How far each tool call resumes a waiting run itself (default: `ADAPTER_AUTO_WAIT`, 5 minutes
   * and 50 resumes; `null`: never — every `waiting` result goes to the model).
   */
  autoWait?: AutoWait | null
}

/** `{ exec, wait }` as AI SDK tools, for `generateText({ tools })` / `streamText`. */
export function codeModeTools(options?: CodeMode | CodeModeToolsOptions): { exec: Tool; wait: Tool }
