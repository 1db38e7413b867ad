// The public API of the `codemode` package. The native layer underneath is declared in
// native.d.ts (generated from the Rust sources).

/** JSON: what crosses between the sandbox and your functions. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json }

/** A JSON Schema object. */
export type JsonSchema = { [key: string]: unknown }

/** A Standard Schema with a JSON Schema rendering (Zod 4's schemas). */
export interface StandardSchemaWithJson<T = unknown> {
  readonly '~standard': {
    validate(value: unknown): { value: T; issues?: undefined } | { issues: ReadonlyArray<{ message: string; path?: ReadonlyArray<PropertyKey | { key: PropertyKey }> }> } | Promise<unknown>
  }
  toJSONSchema(): JsonSchema
}

/** Who calls a tool: the run, the bridge request, the catalog id, the session. */
export interface CallInfo {
  runId: string
  requestId: number
  toolId: string
  session: string | null
  /**
   * `<runId>/<requestId>`: the same when the call is issued again (the process running it was lost)
   * or replayed (a fleet replica took the run over) — keep the keys you have seen to make a side
   * effect happen once.
   */
  idempotencyKey: string
}

/** A JavaScript function as a tool (see {@link tool}). */
export interface ToolSpec<I = any> {
  /** The guest's `tools.<name>`; an identifier of at most 64 characters. */
  name: string
  /** What the tool does (`tools.describe`, the model's `.d.ts`). */
  description?: string
  /** The input's JSON Schema, or a Zod 4 schema (rendered to JSON Schema; inputs are validated and parsed by it). */
  inputSchema?: JsonSchema | StandardSchemaWithJson<I>
  /** The result's JSON Schema, or a Zod 4 schema (shown to the model as the tool's result type). */
  outputSchema?: JsonSchema | StandardSchemaWithJson
  /** No side effects: a resuming process may repeat a lost call, and `restartSafe` cells may call it. */
  readOnly?: boolean
  /** The middle part of the catalog id `plugin:<owner>:<name>` (default `node`). */
  owner?: string
  /** A short human label. */
  label?: string
  /** The function: sync or async; its result must be JSON; what it throws reaches the guest as a ToolError. */
  handler: (input: I, info: CallInfo) => unknown
}

/** A declared tool. */
export type Tool = Readonly<ToolSpec>

/** Declares a function as a tool. */
export function tool<I = any>(spec: ToolSpec<I>): Tool

/** `hook(call)` before every nested call: nothing/true (run it), false or a reason (refuse it), `{input}` (rewrite its input), `{refuse: reason}`. May be async; a throw refuses the call. */
export type Hook = (call: CallInfo & { input: Json }) => unknown

/** `approver(request)` for a call the `approvals` policy gates: true (run it), false or a reason (deny it), nothing (park it until {@link CodeMode.approve}). May be async. */
export type Approver = (request: {
  runId: string
  requestId: number
  toolId: string
  inputPreview: string
  reason: string
  cellLine?: number
  context: Record<string, unknown>
}) => unknown

export interface CodeModeOptions {
  /** JavaScript functions as tools. */
  tools?: Array<Tool | ToolSpec>
  /** The configuration document — the keys of a `codemode.json5` file (`tools.codeMode`, `approvals`, `snapshotStore`, `mcpServers`, …) — or a path to such a file. Code mode is enabled unless it says otherwise. */
  config?: Record<string, unknown> | string
  hook?: Hook
  approver?: Approver
  /** The default session of runs (a run is resumed only from its own session). */
  session?: string
}

export interface CallOptions {
  /** The session of the run (default: the runtime's). */
  session?: string
  /**
   * The agent the run is for (`agents.list[].id`; default: the runtime's). Part of the run's
   * scope: a `wait` names the same.
   */
  agent?: string
  /** The model provider the run is for (`tools.byProvider`); a `wait` names the same. */
  provider?: string
  /** The model the run is for; a `wait` names the same. */
  model?: string
  /**
   * Zero-token waiting: the call resumes a `waiting` run itself until it ends or this budget runs
   * out (wall time from the call's start, checked between resumes; number of resumes), and only
   * then hands `waiting` back. A run with a call parked for approval comes back at once. The
   * output of the results not handed back is carried into the one that is. Default: none.
   */
  autoWait?: AutoWait
  /** Aborts the run when signalled. */
  signal?: AbortSignal
}

/** An auto-wait budget (see `CallOptions.autoWait`). */
export interface AutoWait {
  maxWallMs: number
  maxResumes: number
}

/** The framework adapters' default auto-wait budget: 5 minutes, 50 resumes. */
export const ADAPTER_AUTO_WAIT: Readonly<AutoWait>

/** An output item of a cell (`console.log`, `text(...)`, `json(...)`). */
export type Output = { type: 'text'; text: string } | { type: 'json'; value: Json }

/** A nested call a `waiting` run still waits for (`kind: "approval"`: parked until approved). */
export interface PendingToolCall {
  requestId: number
  kind: 'call' | 'approval'
  toolId: string
  elapsedMs: number
  /** For a call parked on a question its tool asked (an upstream MCP task's `input_required`):
   * the question; approving answers yes, denying answers no. */
  question?: string
}

interface ResultBase {
  output?: Output[]
  telemetry: Record<string, unknown>
  /** What the cell printed, one item a line. */
  readonly text: string
}

/** The result of `exec` / `wait`: the same JSON as the Rust API and `codemode serve`. */
export type Result =
  | (ResultBase & { status: 'completed'; value: Json })
  | (ResultBase & { status: 'waiting'; runId: string; reason: 'pending_tools' | 'yield'; pendingToolCalls: PendingToolCall[]; rerunnable?: boolean })
  | (ResultBase & { status: 'failed'; error: string; code?: string })

/** A model-visible tool: `exec` or `wait`. */
export interface ModelTool {
  name: 'exec' | 'wait'
  description: string
  inputSchema: JsonSchema
}

/** A host API call that could not be made. */
export class CodeModeError extends Error {
  constructor(code: string, message: string)
  /** `invalid_input`, `config_error`, `snapshot_expired`, `snapshot_limit_exceeded`, … */
  readonly code: string
  /** The message without the code. */
  readonly detail: string
}

/** A code-mode runtime in this process. The constructor blocks while upstream MCP servers connect and the engine loads (milliseconds without servers); {@link CodeMode.create} does not. */
export class CodeMode {
  constructor(options?: CodeModeOptions)
  static create(options?: CodeModeOptions): Promise<CodeMode>
  /** The default session. */
  readonly session: string
  /** The engine (`quickjs-wasi` unless the config chooses another). */
  readonly engine: string
  /** The catalog ids the guest can call. */
  toolIds(): string[]
  /** The two tools the model sees, `exec` (its description generated from the catalog) and `wait`. */
  modelTools(): ModelTool[]
  /** Runs a cell (`language`: `"javascript"`, the default, or `"typescript"`). */
  exec(code: string, options?: CallOptions & { language?: 'javascript' | 'typescript' }): Promise<Result>
  /** Resumes a `waiting` run. */
  wait(runId: string, options?: CallOptions): Promise<Result>
  /** `exec` from a model's raw tool arguments (`{code, language?, restartSafe?}`). */
  execJson(args: unknown, options?: CallOptions): Promise<Result>
  /** `wait` from a model's raw tool arguments (`{runId}`). */
  waitJson(args: unknown, options?: CallOptions): Promise<Result>
  /** Approves a parked call, or denies it with `deny` as the reason. */
  approve(runId: string, requestId: number, options?: { deny?: string }): Promise<void>
  /** Aborts a run; whether there was one. */
  abort(runId: string): Promise<boolean>
  /** Takes a `waiting` run out as bytes to keep anywhere; nested calls it started finish first. */
  exportRun(runId: string, options?: Omit<CallOptions, 'signal'>): Promise<Buffer>
  /** Puts an exported run into this runtime; its run id. */
  importRun(data: Uint8Array): Promise<string>
  /** Closes the connections to upstream MCP servers. */
  close(): Promise<void>
}

/** Checks that a value is JSON (throws a TypeError naming where it is not) and returns it. */
export function checkJson<T>(value: T, what: string): T

/** The package version. */
export const version: string
