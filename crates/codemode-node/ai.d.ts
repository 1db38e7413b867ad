// The Vercel AI SDK adapter of the `codemode` package.
import type { Tool } from 'ai'
import type { CodeMode, CodeModeOptions } from './index'

export interface CodeModeToolsOptions extends CodeModeOptions {
  /** Use this runtime instead of building one from the options. */
  codeMode?: CodeMode
}

/** `{ exec, wait }` as AI SDK tools, for `generateText({ tools })` / `streamText`. */
export function codeModeTools(options?: CodeMode | CodeModeToolsOptions): { exec: Tool; wait: Tool }
