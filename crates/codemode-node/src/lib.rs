//! # codemode-node
//!
//! The native half of the `codemode` npm package: a code-mode runtime
//! ([`codemode_embed::Embedded`]) owned by Node.js, with JavaScript functions as tools, a
//! before-call hook and an approver. The JavaScript half (`index.js`, `ai.js`) gives it its API:
//! `CodeMode`, strict JSON checks of tool results, Zod schemas, and the Vercel AI SDK adapter.
//!
//! Threads: the guest never runs on Node's main thread — it runs on codemode's guest worker
//! threads, and nested calls are awaited on a tokio runtime owned by this addon. A JavaScript
//! tool runs on the main thread (where JavaScript lives), reached through a Node-API threadsafe
//! function; its `Promise` is awaited without blocking either side. An `exec` / `wait` result is
//! handed from the guest worker to the main thread directly.
//!
//! Only JSON crosses, as text: the JavaScript side checks and serializes every value (refusing
//! `undefined`, functions, BigInts, cycles, non-finite numbers with a coded error) and this side
//! parses it; no JavaScript object ever reaches the guest.
//!
//! Layering (docs/src/layout.md): a language package on top of `codemode-embed`.
// The `#[napi]` macros expand to Node-API FFI glue with `unsafe` blocks; this crate's own code
// has none.
#![allow(unsafe_code)]

use codemode_embed::{
    CallHandle, Caller, EmbedError, EmbedOptions, Embedded, HookVerdict, HostApprover, HostFailure, HostFunction,
    HostHook, ToolDefinition,
};
use napi::bindgen_prelude::{Buffer, Promise};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Status, bindgen_prelude::Unknown};
use napi_derive::napi;
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock};

/// A JavaScript function the runtime calls: `(argsJson) => Promise<envelopeJson>` (the package's
/// wrapper around a tool, hook or approver). Weak: it does not keep Node's event loop alive.
type JsCall = ThreadsafeFunction<String, Promise<String>, String, Status, false, true>;

/// The callback receiving an `exec` / `wait` result (JSON text). Strong: a pending call keeps the
/// event loop alive until its result arrives.
type JsDone = ThreadsafeFunction<String, Unknown<'static>, String, Status, false, false>;

static RUNTIME: OnceLock<tokio::runtime::Handle> = OnceLock::new();

#[napi_derive::module_init]
fn init() {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("codemode-tokio")
        .enable_all()
        .build()
    {
        Ok(rt) => {
            let _ = RUNTIME.set(rt.handle().clone());
            napi::bindgen_prelude::create_custom_tokio_runtime(rt);
        }
        Err(e) => eprintln!("codemode: cannot start the tokio runtime: {e}"),
    }
    // Logs go to stderr, filtered by CODEMODE_LOG (default: warnings).
    let filter = tracing_subscriber::EnvFilter::try_from_env("CODEMODE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).try_init();
}

fn runtime() -> napi::Result<&'static tokio::runtime::Handle> {
    RUNTIME.get().ok_or_else(|| napi::Error::from_reason("internal_error: the codemode runtime did not start"))
}

/// A host API error as a JavaScript error whose message is `"<code>: <message>"` (the package
/// turns it into a `CodeModeError` with `.code`).
fn js_error(e: EmbedError) -> napi::Error {
    napi::Error::from_reason(format!("{}: {}", e.code, e.message))
}

/// Calls a JavaScript wrapper and reads its envelope: `{ "ok": value }` or `{ "error": { name,
/// message } }`.
async fn call_js(f: &JsCall, what: &str, args: Value) -> Result<Value, HostFailure> {
    let promise = f
        .call_async_catch(args.to_string())
        .await
        .map_err(|e| HostFailure::new("Error", format!("{what} could not be called: {}", e.reason)))?;
    let text = promise.await.map_err(|e| HostFailure::new("Error", format!("{what} failed: {}", e.reason)))?;
    let envelope: Value = serde_json::from_str(&text)
        .map_err(|e| HostFailure::new("TypeError", format!("{what} answered with unreadable JSON: {e}")))?;
    match envelope {
        Value::Object(mut o) if o.contains_key("ok") => Ok(o.remove("ok").unwrap_or_default()),
        Value::Object(o) => {
            let err = o.get("error");
            let field = |k: &str| err.and_then(|e| e.get(k)).and_then(Value::as_str).map(str::to_string);
            Err(HostFailure::new(field("name").unwrap_or_else(|| "Error".into()), field("message").unwrap_or_default()))
        }
        _ => Err(HostFailure::new("TypeError", format!("{what} answered with an unreadable envelope"))),
    }
}

struct JsTool {
    call: JsCall,
    what: String,
}

#[async_trait::async_trait]
impl HostFunction for JsTool {
    async fn call(&self, input: Value, info: Value) -> Result<Value, HostFailure> {
        call_js(&self.call, &self.what, json!([input, info])).await
    }
}

struct JsHook(JsCall);

#[async_trait::async_trait]
impl HostHook for JsHook {
    async fn before_call(&self, call: Value) -> Result<HookVerdict, HostFailure> {
        HookVerdict::from_json(call_js(&self.0, "the before-call hook", json!([call])).await?)
    }
}

struct JsApprover(JsCall);

#[async_trait::async_trait]
impl HostApprover for JsApprover {
    async fn decide(&self, request: Value) -> Result<Option<codemode_embed::ApprovalDecision>, HostFailure> {
        codemode_embed::decision_from_json(call_js(&self.0, "the approver", json!([request])).await?)
    }
}

/// A tool as the package hands it over.
#[napi(object, object_to_js = false)]
pub struct NativeTool {
    /// The spec (`{ name, description, inputSchema, outputSchema, readOnly, owner }`) as JSON text.
    pub spec: String,
    /// The package's wrapper of the function.
    #[napi(ts_type = "(argsJson: string) => Promise<string>")]
    pub call: JsCall,
}

/// Everything a runtime is built from.
#[napi(object, object_to_js = false)]
pub struct NativeOptions {
    /// The configuration document as JSON text (`None`: the defaults).
    pub config: Option<String>,
    /// The JavaScript tools.
    pub tools: Vec<NativeTool>,
    /// The before-call hook's wrapper.
    #[napi(ts_type = "(argsJson: string) => Promise<string>")]
    pub hook: Option<JsCall>,
    /// The approver's wrapper.
    #[napi(ts_type = "(argsJson: string) => Promise<string>")]
    pub approver: Option<JsCall>,
}

fn embed_options(options: NativeOptions) -> Result<EmbedOptions, EmbedError> {
    let config = match options.config {
        Some(text) => Some(serde_json::from_str(&text).map_err(|e| EmbedError::config(format!("(root): {e}")))?),
        None => None,
    };
    let mut tools: Vec<(ToolDefinition, Arc<dyn HostFunction>)> = Vec::new();
    for t in options.tools {
        let spec: Value =
            serde_json::from_str(&t.spec).map_err(|e| EmbedError::invalid(format!("unreadable tool spec: {e}")))?;
        let def = codemode_embed::tool_definition(&spec, "node")?;
        let what = format!("tool `{}`", def.name);
        tools.push((def, Arc::new(JsTool { call: t.call, what })));
    }
    Ok(EmbedOptions {
        config,
        tools,
        hook: options.hook.map(|h| Arc::new(JsHook(h)) as _),
        approver: options.approver.map(|a| Arc::new(JsApprover(a)) as _),
    })
}

/// The runtime the JavaScript `CodeMode` wraps.
#[napi]
pub struct NativeRuntime {
    inner: Arc<Embedded>,
}

/// Builds a runtime, blocking the calling thread while upstream MCP servers connect and the engine
/// loads (a few milliseconds without servers).
#[napi]
pub fn start(options: NativeOptions) -> napi::Result<NativeRuntime> {
    let options = embed_options(options).map_err(js_error)?;
    let embedded = runtime()?.block_on(Embedded::start(options)).map_err(js_error)?;
    Ok(NativeRuntime { inner: Arc::new(embedded) })
}

/// [`start`] without blocking (for configurations with slow upstream servers).
#[napi]
pub async fn start_async(options: NativeOptions) -> napi::Result<NativeRuntime> {
    let options = embed_options(options).map_err(js_error)?;
    let embedded = Embedded::start(options).await.map_err(js_error)?;
    Ok(NativeRuntime { inner: Arc::new(embedded) })
}

/// An `exec` / `wait` in progress.
#[napi]
pub struct NativeCall {
    handle: CallHandle,
}

#[napi]
impl NativeCall {
    /// Aborts the call's run.
    #[napi]
    pub fn cancel(&self) {
        self.handle.cancel();
    }
}

/// Hands a result to JavaScript (from the guest worker that finished the run).
fn deliver(done: JsDone) -> impl FnOnce(Value) + Send + 'static {
    move |v| {
        let status = done.call(v.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
        if status != Status::Ok {
            tracing::warn!(?status, "an exec/wait result could not be handed to JavaScript");
        }
    }
}

fn parse_args(args_json: &str) -> napi::Result<Value> {
    serde_json::from_str(args_json).map_err(|e| napi::Error::from_reason(format!("invalid_input: {e}")))
}

impl NativeRuntime {
    /// Starts an `exec` / `wait` (inside the runtime's context) whose result goes to `on_done`.
    fn call(
        &self,
        on_done: JsDone,
        start: impl FnOnce(&Embedded, Box<dyn FnOnce(Value) + Send>) -> CallHandle,
    ) -> napi::Result<NativeCall> {
        let _entered = runtime()?.enter();
        Ok(NativeCall { handle: start(&self.inner, Box::new(deliver(on_done))) })
    }
}

/// Who runs a cell: its session, and the agent, provider and model its run is for (each the
/// runtime's default when left out).
#[napi(object)]
pub struct JsCaller {
    /// The session (the run's scope).
    pub session: String,
    /// The agent (`agents.list[].id`).
    pub agent: Option<String>,
    /// The model provider.
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
}

impl From<JsCaller> for Caller {
    fn from(c: JsCaller) -> Caller {
        Caller { session: c.session, agent: c.agent, provider: c.provider, model: c.model }
    }
}

#[napi]
impl NativeRuntime {
    /// Runs a cell; `on_done` receives the result as JSON text.
    #[napi]
    pub fn exec(
        &self,
        code: String,
        language: Option<String>,
        caller: JsCaller,
        #[napi(ts_arg_type = "(resultJson: string) => void")] on_done: JsDone,
    ) -> napi::Result<NativeCall> {
        let caller = Caller::from(caller);
        self.call(on_done, |rt, done| rt.exec_then(&code, language.as_deref(), &caller, done))
    }

    /// Resumes a waiting run; `on_done` receives the result as JSON text.
    #[napi]
    pub fn wait(
        &self,
        run_id: String,
        caller: JsCaller,
        #[napi(ts_arg_type = "(resultJson: string) => void")] on_done: JsDone,
    ) -> napi::Result<NativeCall> {
        let caller = Caller::from(caller);
        self.call(on_done, |rt, done| rt.wait_then(&run_id, &caller, done))
    }

    /// `exec` from a model's raw tool arguments (JSON text).
    #[napi]
    pub fn exec_json(
        &self,
        args_json: String,
        caller: JsCaller,
        #[napi(ts_arg_type = "(resultJson: string) => void")] on_done: JsDone,
    ) -> napi::Result<NativeCall> {
        let args = parse_args(&args_json)?;
        let caller = Caller::from(caller);
        self.call(on_done, |rt, done| rt.exec_json_then(&args, &caller, done))
    }

    /// `wait` from a model's raw tool arguments (JSON text).
    #[napi]
    pub fn wait_json(
        &self,
        args_json: String,
        caller: JsCaller,
        #[napi(ts_arg_type = "(resultJson: string) => void")] on_done: JsDone,
    ) -> napi::Result<NativeCall> {
        let args = parse_args(&args_json)?;
        let caller = Caller::from(caller);
        self.call(on_done, |rt, done| rt.wait_json_then(&args, &caller, done))
    }

    /// Records a decision on a parked call (`deny`: the reason of a denial).
    #[napi]
    pub async fn approve(&self, run_id: String, request_id: f64, deny: Option<String>) -> napi::Result<()> {
        if !(request_id.is_finite() && request_id >= 0.0 && request_id.fract() == 0.0) {
            return Err(napi::Error::from_reason("invalid_input: requestId must be a non-negative integer"));
        }
        self.inner.approve(&run_id, request_id as u64, deny).await.map_err(js_error)
    }

    /// Aborts a run; whether there was one.
    #[napi]
    pub async fn abort(&self, run_id: String) -> bool {
        self.inner.abort(&run_id).await
    }

    /// Takes a waiting run out as bytes.
    #[napi]
    pub async fn export_run(&self, run_id: String, caller: JsCaller) -> napi::Result<Buffer> {
        self.inner.export_run(&run_id, &Caller::from(caller)).await.map(Buffer::from).map_err(js_error)
    }

    /// Puts exported bytes into this runtime's store; the run id.
    #[napi]
    pub async fn import_run(&self, data: Buffer) -> napi::Result<String> {
        self.inner.import_run(data.to_vec()).await.map_err(js_error)
    }

    /// Closes the upstream MCP servers' connections.
    #[napi]
    pub async fn close(&self) {
        self.inner.close().await;
    }

    /// The model-visible `exec` and `wait` tools as JSON text: `[{name, description, inputSchema}]`.
    #[napi]
    pub fn model_tools(&self) -> String {
        self.inner.model_tools().to_string()
    }

    /// The catalog ids the guest can call.
    #[napi]
    pub fn tool_ids(&self) -> Vec<String> {
        self.inner.tool_ids()
    }

    /// The engine's name.
    #[napi(getter)]
    pub fn engine(&self) -> String {
        self.inner.engine().to_string()
    }
}

/// The document of a configuration file's text (JSON5), as JSON text.
#[napi]
pub fn parse_config(text: String) -> napi::Result<String> {
    codemode_embed::parse_config_text(&text).map(|v| v.to_string()).map_err(js_error)
}

/// The package version (the crate's).
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
