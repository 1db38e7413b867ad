// The LangChain.js adapter of the `codemode` package.
import type { StructuredToolInterface } from '@langchain/core/tools'
import type { AdapterOptions } from './adapter'
import type { CodeMode } from './index'

export type { AdapterOptions }

/** `[exec, wait]` as LangChain tools, for `createAgent({ tools })`, LangGraph and `bindTools`. */
export function codeModeTools(options?: CodeMode | AdapterOptions): StructuredToolInterface[]
