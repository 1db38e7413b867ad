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
//! function; it answers with its envelope at once (a plain return value) or with a `Promise` of
//! it (an async handler, a validator), awaited without blocking either side. Between a cell's
//! quick calls the main thread stays awake a moment and takes them directly (`awake`). An
//! `exec` / `wait` result is handed from the guest worker to the main thread directly.
//!
//! Only JSON crosses, as text: the JavaScript side checks and serializes every value (refusing
//! `undefined`, functions, BigInts, cycles, non-finite numbers with a coded error) and this side
//! parses it; no JavaScript object ever reaches the guest.
//!
//! Layering (docs/src/layout.md): a language package on top of `codemode-embed`.
// The `#[napi]` macros expand to Node-API FFI glue with `unsafe` blocks; this crate's own code
// has one: the conversion of a [`Coded`] result (napi-rs's `ToNapiValue` is an `unsafe` trait
// method), which only forwards napi-rs's own arguments.
#![allow(unsafe_code)]

mod awake;

use codemode_embed::{
    CallHandle, Caller, EmbedError, EmbedOptions, Embedded, HookVerdict, HostApprover, HostFailure, HostFunction,
    HostHook, ToolDefinition,
};
use napi::bindgen_prelude::{Buffer, Either, JsObjectValue, JsValue, Promise, ToNapiValue, Unknown};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, Status, sys};
use napi_derive::napi;
use serde_json::{Value, json};
use std::sync::{Arc, OnceLock};

/// A JavaScript function the runtime calls: `(argsJson) => envelopeJson | Promise<envelopeJson>`
/// (the package's wrapper around a tool, hook or approver). An envelope answered at once costs one
/// turn of Node's event loop; a promise costs a second one (its settlement). Weak: it does not keep
/// Node's event loop alive.
type JsCall = ThreadsafeFunction<String, Either<String, Promise<String>>, String, Status, false, true>;

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

fn runtime() -> Result<&'static tokio::runtime::Handle, Failure> {
    RUNTIME.get().ok_or_else(|| Failure::internal("the codemode runtime did not start"))
}

/// A host API call that could not be made, as JavaScript receives it: the wire name of its code
/// (`invalid_input`, `config_error`, … — [`codemode_embed::ErrorCode::as_str`]) and its message,
/// kept apart.
struct Failure {
    code: &'static str,
    message: String,
}

impl Failure {
    fn internal(message: impl Into<String>) -> Self {
        EmbedError::internal(message).into()
    }

    fn invalid(message: impl Into<String>) -> Self {
        EmbedError::invalid(message).into()
    }

    /// The JavaScript error: an `Error` named `CodeModeError` whose `code` property is the wire
    /// name and whose `message` is the message (the package turns it into its `CodeModeError`
    /// class by these properties). Held by reference, so napi-rs throws or rejects with this very
    /// object.
    fn into_js(self, env: &Env) -> napi::Error {
        let build = || -> napi::Result<napi::Error> {
            let mut error = env.create_error(napi::Error::from_reason(self.message))?;
            error.set_named_property("code", self.code)?;
            error.set_named_property("name", "CodeModeError")?;
            Ok(napi::Error::from(error.to_unknown()))
        };
        // Building fails only while the environment tears down, when nothing can receive it.
        build().unwrap_or_else(|e| e)
    }
}

impl From<EmbedError> for Failure {
    fn from(e: EmbedError) -> Self {
        Self { code: e.code.as_str(), message: e.message }
    }
}

/// The result of a native function that can fail with a host API error: its value, or a
/// JavaScript `Error` named `CodeModeError` with the error code's wire name as its `code` property
/// and the bare message as its `message`, thrown by a synchronous function and rejecting an
/// asynchronous one's promise. (napi-rs builds an `Error`'s `code` from its own status names, and
/// a `#[napi] async fn` must fail with that status type, hence this conversion, which runs on the
/// JavaScript thread.)
pub struct Coded<T>(Result<T, Failure>);

impl<T, E: Into<Failure>> From<Result<T, E>> for Coded<T> {
    fn from(r: Result<T, E>) -> Self {
        Coded(r.map_err(Into::into))
    }
}

impl<T: ToNapiValue> ToNapiValue for Coded<T> {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> napi::Result<sys::napi_value> {
        match val.0 {
            // SAFETY: `env` is the valid environment napi-rs hands this conversion, passed on as is.
            Ok(value) => unsafe { T::to_napi_value(env, value) },
            Err(failure) => Err(failure.into_js(&Env::from_raw(env))),
        }
    }
}

/// Calls a JavaScript wrapper through its threadsafe function (waking Node's main thread).
async fn call_js(f: &JsCall, what: &str, args: String) -> Result<Value, HostFailure> {
    let answer = f
        .call_async_catch(args)
        .await
        .map_err(|e| HostFailure::new("Error", format!("{what} could not be called: {}", e.reason)))?;
    read_answer(what, answer).await
}

/// Reads a wrapper's envelope, once it settles: `{ "ok": value }` or `{ "error": { name,
/// message } }`.
async fn read_answer(what: &str, answer: awake::Answer) -> Result<Value, HostFailure> {
    let text = match answer {
        Either::A(text) => text,
        Either::B(promise) => {
            promise.await.map_err(|e| HostFailure::new("Error", format!("{what} failed: {}", e.reason)))?
        }
    };
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
    /// Its index in the package's list of tools (what the main thread's loop calls it by).
    index: u32,
    mailbox: Arc<awake::Mailbox>,
}

#[async_trait::async_trait]
impl HostFunction for JsTool {
    async fn call(&self, input: Value, info: Value) -> Result<Value, HostFailure> {
        let args = json!([input, info]).to_string();
        // Straight to the main thread while it is awake in its loop (see `awake`), otherwise
        // through the threadsafe function, which wakes it.
        match self.mailbox.offer(self.index, args) {
            Ok(reply) => {
                let answer = reply.await.map_err(|_| {
                    HostFailure::new(
                        "Error",
                        format!("{} could not be called: Node's main thread dropped the call", self.what),
                    )
                })?;
                read_answer(&self.what, answer).await
            }
            Err(args) => call_js(&self.call, &self.what, args).await,
        }
    }
}

struct JsHook(JsCall);

#[async_trait::async_trait]
impl HostHook for JsHook {
    async fn before_call(&self, call: Value) -> Result<HookVerdict, HostFailure> {
        HookVerdict::from_json(call_js(&self.0, "the before-call hook", json!([call]).to_string()).await?)
    }
}

struct JsApprover(JsCall);

#[async_trait::async_trait]
impl HostApprover for JsApprover {
    async fn decide(&self, request: Value) -> Result<Option<codemode_embed::ApprovalDecision>, HostFailure> {
        codemode_embed::decision_from_json(call_js(&self.0, "the approver", json!([request]).to_string()).await?)
    }
}

/// A tool as the package hands it over.
#[napi(object, object_to_js = false)]
pub struct NativeTool {
    /// The spec (`{ name, description, inputSchema, outputSchema, readOnly, owner }`) as JSON text.
    pub spec: String,
    /// The package's wrapper of the function.
    #[napi(ts_type = "(argsJson: string) => string | Promise<string>")]
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
    #[napi(ts_type = "(argsJson: string) => string | Promise<string>")]
    pub hook: Option<JsCall>,
    /// The approver's wrapper.
    #[napi(ts_type = "(argsJson: string) => string | Promise<string>")]
    pub approver: Option<JsCall>,
}

fn embed_options(options: NativeOptions, mailbox: &Arc<awake::Mailbox>) -> Result<EmbedOptions, EmbedError> {
    let config = match options.config {
        Some(text) => Some(serde_json::from_str(&text).map_err(|e| EmbedError::config(format!("(root): {e}")))?),
        None => None,
    };
    let mut tools: Vec<(ToolDefinition, Arc<dyn HostFunction>)> = Vec::new();
    for (index, t) in (0u32..).zip(options.tools) {
        let spec: Value =
            serde_json::from_str(&t.spec).map_err(|e| EmbedError::invalid(format!("unreadable tool spec: {e}")))?;
        let def = codemode_embed::tool_definition(&spec, "node")?;
        let what = format!("tool `{}`", def.name);
        tools.push((def, Arc::new(JsTool { call: t.call, what, index, mailbox: mailbox.clone() })));
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
    /// Where its tools' calls reach the main thread while it stays awake (see `awake`).
    mailbox: Arc<awake::Mailbox>,
}

/// Builds a runtime, blocking the calling thread while upstream MCP servers connect and the engine
/// loads (a few milliseconds without servers).
#[napi(ts_return_type = "NativeRuntime")]
pub fn start(options: NativeOptions) -> Coded<NativeRuntime> {
    let start = || -> Result<NativeRuntime, Failure> {
        let mailbox = Arc::default();
        let options = embed_options(options, &mailbox)?;
        let embedded = runtime()?.block_on(Embedded::start(options))?;
        Ok(NativeRuntime { inner: Arc::new(embedded), mailbox })
    };
    start().into()
}

/// [`start`] without blocking (for configurations with slow upstream servers).
#[napi(ts_return_type = "Promise<NativeRuntime>")]
pub async fn start_async(options: NativeOptions) -> Coded<NativeRuntime> {
    let mailbox = Arc::default();
    let started = match embed_options(options, &mailbox) {
        Ok(options) => Embedded::start(options).await,
        Err(e) => Err(e),
    };
    started.map(|embedded| NativeRuntime { inner: Arc::new(embedded), mailbox }).into()
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

fn parse_args(args_json: &str) -> Result<Value, Failure> {
    serde_json::from_str(args_json).map_err(|e| Failure::invalid(e.to_string()))
}

impl NativeRuntime {
    /// Starts an `exec` / `wait` (inside the runtime's context) whose result goes to `on_done`.
    fn call(
        &self,
        on_done: JsDone,
        start: impl FnOnce(&Embedded, Box<dyn FnOnce(Value) + Send>) -> CallHandle,
    ) -> Result<NativeCall, Failure> {
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
    /// How far the call resumes a `waiting` run itself (none when left out).
    pub auto_wait: Option<JsAutoWait>,
}

/// An auto-wait budget: at most `maxWallMs` from the call's start (checked between resumes) and
/// `maxResumes` resumes.
#[napi(object)]
pub struct JsAutoWait {
    /// Longest wall time, in milliseconds.
    pub max_wall_ms: u32,
    /// Most resumes.
    pub max_resumes: u32,
}

impl From<JsCaller> for Caller {
    fn from(c: JsCaller) -> Caller {
        let auto_wait = c.auto_wait.map(|b| {
            codemode_embed::AutoWait::new(std::time::Duration::from_millis(u64::from(b.max_wall_ms)), b.max_resumes)
        });
        Caller { session: c.session, agent: c.agent, provider: c.provider, model: c.model, auto_wait }
    }
}

#[napi]
impl NativeRuntime {
    /// The next tool call for the main thread's loop (see `awake`): `[toolIndex, argsJson]`,
    /// waiting for one a moment while `stay` holds and a core is idle; `null` when none came (the
    /// loop ends).
    #[napi(ts_return_type = "[number, string] | null")]
    pub fn take_job(&self, stay: bool) -> Option<(u32, String)> {
        self.mailbox.take(stay)
    }

    /// Answers the call [`Self::take_job`] returned last with the tool wrapper's envelope (or a
    /// promise of it).
    #[napi]
    pub fn answer_job(&self, #[napi(ts_arg_type = "string | Promise<string>")] answer: awake::Answer) {
        self.mailbox.answer(answer);
    }

    /// Ends the main thread's loop: calls still handed to it fail (only after a loop ended
    /// abnormally are there any).
    #[napi]
    pub fn rest_jobs(&self) {
        self.mailbox.rest();
    }

    /// Runs a cell; `on_done` receives the result as JSON text.
    #[napi(ts_return_type = "NativeCall")]
    pub fn exec(
        &self,
        code: String,
        language: Option<String>,
        caller: JsCaller,
        #[napi(ts_arg_type = "(resultJson: string) => void")] on_done: JsDone,
    ) -> Coded<NativeCall> {
        let caller = Caller::from(caller);
        self.call(on_done, |rt, done| rt.exec_then(&code, language.as_deref(), &caller, done)).into()
    }

    /// Resumes a waiting run; `on_done` receives the result as JSON text.
    #[napi(ts_return_type = "NativeCall")]
    pub fn wait(
        &self,
        run_id: String,
        caller: JsCaller,
        #[napi(ts_arg_type = "(resultJson: string) => void")] on_done: JsDone,
    ) -> Coded<NativeCall> {
        let caller = Caller::from(caller);
        self.call(on_done, |rt, done| rt.wait_then(&run_id, &caller, done)).into()
    }

    /// `exec` from a model's raw tool arguments (JSON text).
    #[napi(ts_return_type = "NativeCall")]
    pub fn exec_json(
        &self,
        args_json: String,
        caller: JsCaller,
        #[napi(ts_arg_type = "(resultJson: string) => void")] on_done: JsDone,
    ) -> Coded<NativeCall> {
        let caller = Caller::from(caller);
        parse_args(&args_json)
            .and_then(|args| self.call(on_done, |rt, done| rt.exec_json_then(&args, &caller, done)))
            .into()
    }

    /// `wait` from a model's raw tool arguments (JSON text).
    #[napi(ts_return_type = "NativeCall")]
    pub fn wait_json(
        &self,
        args_json: String,
        caller: JsCaller,
        #[napi(ts_arg_type = "(resultJson: string) => void")] on_done: JsDone,
    ) -> Coded<NativeCall> {
        let caller = Caller::from(caller);
        parse_args(&args_json)
            .and_then(|args| self.call(on_done, |rt, done| rt.wait_json_then(&args, &caller, done)))
            .into()
    }

    /// Records a decision on a parked call (`deny`: the reason of a denial).
    #[napi(ts_return_type = "Promise<void>")]
    pub async fn approve(&self, run_id: String, request_id: f64, deny: Option<String>) -> Coded<()> {
        if !(request_id.is_finite() && request_id >= 0.0 && request_id.fract() == 0.0) {
            return Coded(Err(Failure::invalid("requestId must be a non-negative integer")));
        }
        self.inner.approve(&run_id, request_id as u64, deny).await.into()
    }

    /// Aborts a run; whether there was one.
    #[napi]
    pub async fn abort(&self, run_id: String) -> bool {
        self.inner.abort(&run_id).await
    }

    /// Takes a waiting run out as bytes.
    #[napi(ts_return_type = "Promise<Buffer>")]
    pub async fn export_run(&self, run_id: String, caller: JsCaller) -> Coded<Buffer> {
        self.inner.export_run(&run_id, &Caller::from(caller)).await.map(Buffer::from).into()
    }

    /// Puts exported bytes into this runtime's store; the run id.
    #[napi(ts_return_type = "Promise<string>")]
    pub async fn import_run(&self, data: Buffer) -> Coded<String> {
        self.inner.import_run(data.to_vec()).await.into()
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
#[napi(ts_return_type = "string")]
pub fn parse_config(text: String) -> Coded<String> {
    codemode_embed::parse_config_text(&text).map(|v| v.to_string()).into()
}

/// The package version (the crate's).
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
