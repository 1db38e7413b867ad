// The OpenAI Agents SDK adapter of the `codemode` package.
import type { FunctionTool } from '@openai/agents'
import type { AdapterOptions } from './adapter'
import type { CodeMode } from './index'

export type { AdapterOptions }

/** `[exec, wait]` as Agents SDK function tools, for `new Agent({ tools })` and `run`. */
export function codeModeTools(options?: CodeMode | AdapterOptions): FunctionTool[]
