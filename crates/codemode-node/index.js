'use strict'
// codemode for Node.js: code mode for LLM agents, in-process.
//
// The model sees two tools, `exec` and `wait`. It writes a short JavaScript or TypeScript program;
// the program runs in a sandbox that treats it as hostile (QuickJS compiled to WebAssembly, on
// codemode's own threads — never on Node's main thread), and your functions are reachable from it
// only through a JSON bridge. See index.d.ts for the API and README.md ("Node") for a tour.

const native = require('./native.js')
const { wake, awakeWhenSettled } = require('./awake.js')

/** A host API call that could not be made: `code` is `invalid_input`, `config_error`, … */
class CodeModeError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`)
    this.name = 'CodeModeError'
    this.code = code
    this.detail = message
  }
}

/**
 * Turns a native host API error — an Error named `CodeModeError` whose `code` property the addon
 * sets to the error code and whose `message` is the message alone — into a CodeModeError. Anything
 * else (a TypeError for an argument of the wrong type, …) passes through unchanged.
 */
function coded(e) {
  if (e instanceof Error && !(e instanceof CodeModeError) && e.name === 'CodeModeError' && typeof e.code === 'string') {
    return new CodeModeError(e.code, e.message)
  }
  return e
}

/**
 * The auto-wait budget the framework adapters use unless told otherwise: a call resumes a waiting
 * run itself for up to 5 minutes and 50 resumes.
 */
const ADAPTER_AUTO_WAIT = Object.freeze({ maxWallMs: 300000, maxResumes: 50 })

/** Checks an auto-wait budget `{ maxWallMs, maxResumes }` (non-negative integers). */
function budget(b) {
  const ok = (n) => Number.isInteger(n) && n >= 0 && n <= 0xffffffff
  if (!ok(b.maxWallMs) || !ok(b.maxResumes)) {
    throw new TypeError('autoWait must be { maxWallMs, maxResumes } with non-negative integers')
  }
  return { maxWallMs: b.maxWallMs, maxResumes: b.maxResumes }
}

/** Deepest nesting a tool result may have (a deeper one is refused, not converted). */
const MAX_DEPTH = 256

/**
 * Checks that `value` is JSON — null, booleans, finite numbers, strings, arrays and plain objects —
 * and returns it; anything else (undefined, a function, a BigInt, a symbol, NaN or Infinity, a
 * cycle, a Date, Map, Set, class instance or typed array) throws a TypeError naming where it is.
 * Nothing is converted silently, so a value means the same on both sides of the bridge.
 */
function checkJson(value, what) {
  const onPath = new Set()
  const visit = (v, path, depth) => {
    if (depth > MAX_DEPTH) throw new TypeError(`${what} returned a value that is not JSON: ${path}: nested deeper than ${MAX_DEPTH} levels`)
    if (v === null || typeof v === 'string' || typeof v === 'boolean') return
    const fail = (kind) => {
      throw new TypeError(`${what} returned a value that is not JSON: ${path}: ${kind}`)
    }
    switch (typeof v) {
      case 'number':
        if (!Number.isFinite(v)) fail(`${v} (only finite numbers are JSON)`)
        return
      case 'undefined':
        return fail('undefined')
      case 'function':
        return fail('a function')
      case 'bigint':
        return fail('a BigInt (convert it to a string or number)')
      case 'symbol':
        return fail('a symbol')
    }
    if (onPath.has(v)) fail('a circular reference (a value contains itself)')
    if (Array.isArray(v)) {
      onPath.add(v)
      for (let i = 0; i < v.length; i++) visit(v[i], `${path}[${i}]`, depth + 1)
      onPath.delete(v)
      return
    }
    const proto = Object.getPrototypeOf(v)
    if (proto !== Object.prototype && proto !== null) {
      fail(`an object of type ${(v.constructor && v.constructor.name) || 'unknown'} (only plain objects are JSON)`)
    }
    onPath.add(v)
    for (const key of Object.keys(v)) visit(v[key], `${path}.${key}`, depth + 1)
    onPath.delete(v)
  }
  visit(value, '$', 0)
  return value
}

/** The envelope of a failure: the exception's name and message. */
function failure(e) {
  const name = (e && e.name) || 'Error'
  const message = e && typeof e.message === 'string' ? e.message : String(e)
  return JSON.stringify({ error: { name, message } })
}

/** The envelope a wrapper answers the native side with, once `run` settles. */
async function envelope(run) {
  try {
    return JSON.stringify({ ok: await run() })
  } catch (e) {
    return failure(e)
  }
}

/** Whether `v` is a promise or another thenable (awaited before its value is checked). */
function thenable(v) {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof v.then === 'function'
}

/** A Standard Schema (Zod 4, Valibot, …) with a JSON Schema rendering, or a JSON Schema object. */
function schemaOf(schema, name, io) {
  if (schema == null) return { jsonSchema: undefined, validate: undefined }
  if (typeof schema !== 'object') throw new CodeModeError('invalid_input', `tool \`${name}\`: inputSchema must be a JSON Schema or a Zod schema`)
  const standard = schema['~standard']
  if (standard && typeof standard.validate === 'function') {
    if (typeof schema.toJSONSchema !== 'function') {
      throw new CodeModeError('invalid_input', `tool \`${name}\`: this schema library cannot render JSON Schema (Zod 4's schemas can; for Zod 3 pass zod-to-json-schema's output)`)
    }
    // An input schema describes what callers may send (defaults optional), an output schema what
    // the tool returns.
    const jsonSchema = schema.toJSONSchema({ io })
    delete jsonSchema.$schema
    return { jsonSchema, validate: (input) => standard.validate(input) }
  }
  return { jsonSchema: schema, validate: undefined }
}

/**
 * Declares a function as a tool: `tool({ name, description, inputSchema, outputSchema, readOnly,
 * owner, handler })`. The guest calls it as `tools.<name>(input)`; `handler(input, info)` may be
 * sync or async, and its result must be JSON.
 */
function tool(spec) {
  if (!spec || typeof spec !== 'object') throw new TypeError('tool(spec): spec must be an object')
  const { handler, inputSchema, outputSchema, ...rest } = spec
  if (typeof handler !== 'function') throw new TypeError(`tool \`${spec.name}\`: handler must be a function`)
  const input = schemaOf(inputSchema, spec.name, 'input')
  const output = schemaOf(outputSchema, spec.name, 'output')
  return Object.freeze({ ...rest, inputSchema: input.jsonSchema, outputSchema: output.jsonSchema, handler, validate: input.validate })
}

/**
 * What the native side calls for a tool: parses the arguments, validates, runs, checks the result.
 * It answers with the envelope string itself when the handler returns a plain value and there is
 * no validator to await, and with a promise of it otherwise: a synchronous answer saves the native
 * side a second turn of the event loop (the promise's settlement) per call.
 */
function toolWrapper(t) {
  const what = `tool \`${t.name}\``
  const validated = async (input, info) => {
    const checked = await t.validate(input)
    if (checked.issues) {
      const issues = checked.issues.map((i) => `${(i.path || []).map((p) => (typeof p === 'object' ? p.key : p)).join('.') || '(input)'}: ${i.message}`)
      throw new TypeError(`${what}: invalid input: ${issues.join('; ')}`)
    }
    return checkJson(await t.handler(checked.value, info), what)
  }
  return (argsJson) => {
    try {
      const [input, info] = JSON.parse(argsJson)
      if (t.validate) return envelope(() => validated(input, info))
      const out = t.handler(input, info)
      if (thenable(out)) return envelope(async () => checkJson(await out, what))
      return JSON.stringify({ ok: checkJson(out, what) })
    } catch (e) {
      return failure(e)
    }
  }
}

/** What the native side calls for a hook or an approver. */
function callbackWrapper(fn, what) {
  return (argsJson) =>
    envelope(async () => {
      const [arg] = JSON.parse(argsJson)
      const out = await fn(arg)
      return out === undefined ? null : checkJson(out, what)
    })
}

/** The result of `exec` / `wait`: its JSON, plus `text` (what the cell printed). */
function result(json) {
  const r = JSON.parse(json)
  Object.defineProperty(r, 'text', {
    enumerable: false,
    get() {
      return (this.output || []).filter((o) => o.type === 'text').map((o) => o.text).join('\n')
    },
  })
  return r
}

/** Runs a native call that reports through a callback, as a promise; `signal` aborts its run. */
function call(start, signal) {
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(signal.reason ?? new Error('aborted'))
    let handle
    const onAbort = () => handle && handle.cancel()
    try {
      handle = start((json) => {
        if (signal) signal.removeEventListener('abort', onAbort)
        resolve(result(json))
      })
    } catch (e) {
      return reject(coded(e))
    }
    if (signal) signal.addEventListener('abort', onAbort, { once: true })
  })
}

function nativeOptions(options, box) {
  const { tools = [], config, hook, approver } = options || {}
  if (!Array.isArray(tools)) throw new TypeError('tools must be an array')
  const declared = tools.map((t) => (t && Object.isFrozen(t) && 'validate' in t ? t : tool(t)))
  let doc = config
  if (typeof config === 'string') {
    const text = require('node:fs').readFileSync(config, 'utf8')
    doc = JSON.parse(native.parseConfig(text))
  }
  box.wrappers = declared.map(toolWrapper)
  return {
    config: doc == null ? undefined : JSON.stringify(doc),
    tools: declared.map((t, i) => {
      const spec = { name: t.name, description: t.description, inputSchema: t.inputSchema, outputSchema: t.outputSchema, readOnly: t.readOnly, owner: t.owner, label: t.label }
      for (const k of Object.keys(spec)) if (spec[k] === undefined) delete spec[k]
      const wrapper = box.wrappers[i]
      return {
        spec: JSON.stringify(spec),
        call: (argsJson) => {
          const answer = wrapper(argsJson)
          if (typeof answer === 'string') wake(box)
          else awakeWhenSettled(box, answer)
          return answer
        },
      }
    }),
    hook: hook ? callbackWrapper(hook, 'the before-call hook') : undefined,
    approver: approver ? callbackWrapper(approver, 'the approver') : undefined,
  }
}

/** A code-mode runtime in this process (see index.d.ts). */
class CodeMode {
  constructor(options = {}, _runtime) {
    this.session = options.session || 'default'
    if (_runtime) {
      this._rt = _runtime
      return
    }
    try {
      const box = {}
      this._rt = native.start(nativeOptions(options, box))
      box.rt = new WeakRef(this._rt)
    } catch (e) {
      throw coded(e)
    }
  }

  /** Like the constructor, without blocking while upstream MCP servers connect. */
  static async create(options = {}) {
    try {
      const box = {}
      const rt = await native.startAsync(nativeOptions(options, box))
      box.rt = new WeakRef(rt)
      return new CodeMode(options, rt)
    } catch (e) {
      throw coded(e)
    }
  }

  get engine() {
    return this._rt.engine
  }

  toolIds() {
    return this._rt.toolIds()
  }

  modelTools() {
    return JSON.parse(this._rt.modelTools())
  }

  _caller(options) {
    const { session = this.session, agent, provider, model, autoWait } = options
    return {
      session,
      agent: agent ?? undefined,
      provider: provider ?? undefined,
      model: model ?? undefined,
      autoWait: autoWait ? budget(autoWait) : undefined,
    }
  }

  exec(code, options = {}) {
    const { language = null, signal } = options
    return call((done) => this._rt.exec(code, language, this._caller(options), done), signal)
  }

  wait(runId, options = {}) {
    return call((done) => this._rt.wait(runId, this._caller(options), done), options.signal)
  }

  execJson(args, options = {}) {
    return call((done) => this._rt.execJson(JSON.stringify(args ?? null), this._caller(options), done), options.signal)
  }

  waitJson(args, options = {}) {
    return call((done) => this._rt.waitJson(JSON.stringify(args ?? null), this._caller(options), done), options.signal)
  }

  async approve(runId, requestId, options = {}) {
    try {
      await this._rt.approve(runId, requestId, options.deny ?? null)
    } catch (e) {
      throw coded(e)
    }
  }

  abort(runId) {
    return this._rt.abort(runId)
  }

  async exportRun(runId, options = {}) {
    try {
      return await this._rt.exportRun(runId, this._caller({ ...options, session: options.session || this.session }))
    } catch (e) {
      throw coded(e)
    }
  }

  async importRun(data) {
    try {
      return await this._rt.importRun(Buffer.from(data))
    } catch (e) {
      throw coded(e)
    }
  }

  close() {
    return this._rt.close()
  }
}

module.exports = { CodeMode, CodeModeError, tool, checkJson, ADAPTER_AUTO_WAIT, version: native.version() }
