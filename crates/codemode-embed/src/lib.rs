//! # codemode-embed
//!
//! The host side of codemode's language packages: what the Python package (`crates/codemode-python`,
//! PyO3) and the Node package (`crates/codemode-node`, napi-rs) share, so that each of them is only
//! the glue between its language and these types.
//!
//! - [`Embedded`]: a [`CodeMode`] runtime built from a configuration *document* — the same JSON as a
//!   `codemode.json5` file (`tools.codeMode`, `approvals`, `snapshotStore`, `mcpServers`, …), given
//!   as a value instead of a path — plus the host language's own functions as tools, a before-call
//!   hook and an approver. Its methods take and return JSON ([`serde_json::Value`]): results have
//!   exactly the wire shape of the Rust API and of `codemode serve`.
//! - [`tool_definition`] / [`HostFunction`]: a host-language function as a catalog tool (a `plugin`
//!   tool owned by the package, `plugin:<owner>:<name>`); [`HostHook`] and [`HostApprover`]:
//!   callbacks for [`ToolHook::before_tool_call`] and [`codemode::Approver`].
//!
//! Only JSON crosses between the guest and the host language: a language binding converts its
//! values to [`serde_json::Value`] (refusing what is not JSON) before they reach this crate, and the
//! guest never holds a host object.
//!
//! Layering (docs/src/layout.md): above the facade (`codemode`) and `codemode-mcp` (upstream servers and the
//! snapshot stores a configuration names); below the language packages.
#![forbid(unsafe_code)]

use codemode::CodeModeErrorCode;
use codemode::config_file::ConfigFile;
pub use codemode::{
    AnswerSpin, ApprovalDecision, AutoWait, CallHandle, GUEST_THREAD_NAME, ToolDefinition, answer_spin, core_idle,
};
use codemode::{
    CodeMode, CodeModeError, CodeModeExecInput, CodeModeWaitInput, NestedToolCall, PolicyTarget, RunContext, RunId,
    ToolSource,
};
use serde_json::{Value, json};
use std::sync::Arc;

mod host;

use host::{ApproverAdapter, HookAdapter, HostTool};
pub use host::{HookVerdict, HostApprover, HostFailure, HostFunction, HostHook, decision_from_json};

/// What kind of host API failure an [`EmbedError`] is: one of the contract's error codes
/// (contract §16), or one of the embedding layer's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// A code of the contract (`invalid_input`, `snapshot_expired`, …).
    Contract(CodeModeErrorCode),
    /// The configuration document is malformed (`config_error`; the message names the place).
    ConfigError,
    /// A failure the runtime gave no code (`failed`).
    Failed,
}

impl ErrorCode {
    /// The code's wire name, as the Python and Node packages expose it (`.code`).
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorCode::Contract(c) => c.as_str(),
            ErrorCode::ConfigError => "config_error",
            ErrorCode::Failed => "failed",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A host API call that could not be made (a malformed tool spec or config, an unknown run), with
/// its typed [`ErrorCode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct EmbedError {
    /// The error code.
    pub code: ErrorCode,
    /// What went wrong.
    pub message: String,
}

impl EmbedError {
    /// An error with `code`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// An `invalid_input` error.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Contract(CodeModeErrorCode::InvalidInput), message)
    }

    /// An `internal_error` (the host side itself failed, e.g. its runtime did not start).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Contract(CodeModeErrorCode::InternalError), message)
    }

    /// A `config_error`.
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ConfigError, message)
    }
}

impl From<CodeModeError> for EmbedError {
    fn from(e: CodeModeError) -> Self {
        Self { code: e.code.map_or(ErrorCode::Failed, ErrorCode::Contract), message: e.message }
    }
}

impl From<codemode::config_file::ConfigError> for EmbedError {
    fn from(e: codemode::config_file::ConfigError) -> Self {
        Self::config(e.to_string())
    }
}

/// Parses the text of a configuration file (JSON5) into its document; errors name the place
/// (code `config_error`).
pub fn parse_config_text(text: &str) -> Result<Value, EmbedError> {
    Ok(codemode_core::config::parse_json5(text)?)
}

/// Longest tool name. Prevents: a host registering names that flood the catalog and the `exec`
/// description.
pub const MAX_TOOL_NAME: usize = 64;

/// The catalog definition (source `plugin`) of what a host-language function declares as a tool —
/// the JSON a package passes in: `{ name, description?, label?, inputSchema?, outputSchema?,
/// readOnly?, owner? }`. `default_owner` is the owner when the spec names none (`python`, `node`).
/// The name must be an identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 64 characters) so that the
/// guest can call it as `tools.<name>(input)`; schemas must be JSON objects.
pub fn tool_definition(spec: &Value, default_owner: &str) -> Result<ToolDefinition, EmbedError> {
    let obj = spec.as_object().ok_or_else(|| EmbedError::invalid("a tool spec must be an object"))?;
    const KEYS: [&str; 7] = ["name", "description", "inputSchema", "outputSchema", "readOnly", "owner", "label"];
    if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(EmbedError::invalid(format!("unknown key `{k}` in a tool spec (known: {})", KEYS.join(", "))));
    }
    let text = |key: &str| -> Result<Option<String>, EmbedError> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(EmbedError::invalid(format!("tool spec `{key}` must be a string"))),
        }
    };
    let name = text("name")?.ok_or_else(|| EmbedError::invalid("a tool spec needs a `name`"))?;
    check_identifier(&name, "tool name")?;
    let owner = text("owner")?.unwrap_or_else(|| default_owner.to_string());
    check_identifier(&owner, "tool owner")?;
    let mut def = ToolDefinition::new(ToolSource::Plugin, owner, name.clone());
    if let Some(d) = text("description")? {
        def = def.with_description(d);
    }
    if let Some(l) = text("label")? {
        def = def.with_label(l);
    }
    match obj.get("inputSchema") {
        None | Some(Value::Null) => {}
        Some(s @ Value::Object(_)) => def = def.with_parameters(s.clone()),
        Some(_) => {
            return Err(EmbedError::invalid(format!("tool `{name}`: `inputSchema` must be a JSON Schema object")));
        }
    }
    match obj.get("outputSchema") {
        None | Some(Value::Null) => {}
        Some(s @ Value::Object(_)) => def = def.with_output_schema(s.clone()),
        Some(_) => {
            return Err(EmbedError::invalid(format!("tool `{name}`: `outputSchema` must be a JSON Schema object")));
        }
    }
    match obj.get("readOnly") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => def = def.read_only(),
        Some(_) => return Err(EmbedError::invalid(format!("tool `{name}`: `readOnly` must be a boolean"))),
    }
    Ok(def)
}

fn check_identifier(s: &str, what: &str) -> Result<(), EmbedError> {
    let mut chars = s.chars();
    let ok = s.len() <= MAX_TOOL_NAME
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(EmbedError::invalid(format!(
            "{what} `{}` must be an identifier ([A-Za-z_][A-Za-z0-9_]*, at most {MAX_TOOL_NAME} characters)",
            s.chars().take(80).collect::<String>()
        )))
    }
}

/// Who runs a cell: the session (the run's scope: a `wait` must name the same) and the agent,
/// provider and model the run is for — each falling back to the runtime's default target. The
/// agent is part of the run's scope; all three are stored with a suspended run, and a `wait` under
/// another target is refused (`invalid_input`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// The session.
    pub session: String,
    /// The agent (`agents.list[].id` of the config).
    pub agent: Option<String>,
    /// The model provider (`tools.byProvider`).
    pub provider: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// How far this call resumes a `waiting` run itself before handing it back (the runtime's
    /// budget — none — when `None`; see [`AutoWait`]). The framework adapters set one.
    pub auto_wait: Option<AutoWait>,
}

impl Caller {
    /// A caller of `session` with the runtime's default target.
    pub fn session(session: impl Into<String>) -> Self {
        Caller { session: session.into(), ..Caller::default() }
    }

    /// The run context of this caller's runs.
    pub fn context(&self) -> RunContext {
        let mut ctx = RunContext::session(self.session.clone());
        ctx.scope.agent_id = self.agent.clone();
        ctx.provider = self.provider.clone();
        ctx.model = self.model.clone();
        ctx
    }
}

/// Who calls a host function, as the function may see it (`{ runId, requestId, toolId, session,
/// idempotencyKey }`; the key is [`codemode::idempotency_key`]: the same for a call issued again or
/// replayed, so a downstream service can make its side effect happen once).
pub fn call_info(call: &NestedToolCall) -> Value {
    json!({
        "runId": call.run_id.as_str(),
        "requestId": call.request_id,
        "toolId": call.tool_id,
        "session": call.context.scope.session_id,
        "idempotencyKey": codemode::idempotency_key(call),
    })
}

/// Answers a malformed call at once: a `failed` result with the input error.
fn refused(e: CodeModeError, done: impl FnOnce(Value)) -> CallHandle {
    done(codemode::CodeModeResult::failed(e, Vec::new(), Default::default()).to_json());
    CallHandle::default()
}

/// How long a guest worker waits itself for a host function's result (see
/// `CodeModeBuilder::inline_wait`): long enough for a quick function's round trip to the host
/// language's thread on a busy 2-core machine, short enough that a fan-out of slow calls starts
/// them at most this far apart.
pub const INLINE_WAIT: std::time::Duration = std::time::Duration::from_micros(300);

/// Everything an [`Embedded`] runtime is built from.
#[derive(Default)]
pub struct EmbedOptions {
    /// The configuration document (the JSON of a `codemode.json5` file); `None`: the defaults with
    /// code mode enabled.
    pub config: Option<Value>,
    /// The host-language tools.
    pub tools: Vec<(ToolDefinition, Arc<dyn HostFunction>)>,
    /// A before-call hook.
    pub hook: Option<Arc<dyn HostHook>>,
    /// An approver of gated calls.
    pub approver: Option<Arc<dyn HostApprover>>,
}

/// A code-mode runtime owned by a host-language package (see the crate docs).
pub struct Embedded {
    cm: CodeMode,
    hub: Arc<codemode_mcp::McpHub>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded").field("runtime", &self.cm).finish()
    }
}

impl Embedded {
    /// Builds the runtime: parses the configuration (errors name the key, code `config_error`),
    /// opens the snapshot store it names, connects its `mcpServers` (a server that cannot start
    /// stays listed as down, as in `codemode serve`) and adds the host tools. Code mode is enabled
    /// unless the document sets `tools.codeMode.enabled: false`. Must run inside a tokio runtime.
    pub async fn start(options: EmbedOptions) -> Result<Self, EmbedError> {
        let EmbedOptions { config, tools, hook, approver } = options;
        let mut doc = match config {
            None | Some(Value::Null) => json!({}),
            Some(v @ Value::Object(_)) => v,
            Some(_) => return Err(EmbedError::config("(root): the configuration must be an object")),
        };
        // Code mode is what a package is for: on unless the document says otherwise.
        if doc.pointer("/tools/codeMode/enabled").is_none() {
            let tools = doc.as_object_mut().map(|o| o.entry("tools").or_insert_with(|| json!({})));
            if let Some(Value::Object(t)) = tools {
                let cm = t.entry("codeMode").or_insert_with(|| json!({}));
                if let Value::Object(c) = cm {
                    c.insert("enabled".into(), Value::Bool(true));
                }
            }
        }
        let file = ConfigFile::parse(&doc.to_string())?;
        // The first run's instance is built while the store opens and the servers start (the
        // first cell then finds it ready; see `codemode::Engines::prepare_ahead`).
        if file.code_mode.enabled
            && let Err(e) = codemode::Engines::prepare_ahead(&file.code_mode)
        {
            tracing::debug!(error = %e, "preparing the engine ahead of the first cell failed");
        }
        let mut local = codemode::LocalTools::new();
        let mut seen = std::collections::HashSet::new();
        for (def, function) in tools {
            let id = def.id();
            if !seen.insert(id.clone()) {
                return Err(EmbedError::invalid(format!("two tools have the id `{id}`")));
            }
            local.add(Arc::new(HostTool { def, function }));
        }
        let opened = codemode_mcp::open_store(file.snapshot_store.clone(), &file.run_signing).await?;
        let (mut builder, hub) = codemode_mcp::runtime_builder(
            &file,
            &PolicyTarget::default(),
            local,
            codemode::Namespaces::new(),
            opened.store,
            None,
        )
        .await?;
        // The host's functions answer from another thread in microseconds: the guest worker waits
        // for them itself rather than through the async runtime (one thread switch fewer a call).
        builder = builder.inline_wait(INLINE_WAIT);
        if let Some(h) = hook {
            builder = builder.hook(Arc::new(HookAdapter(h)));
        }
        if let Some(a) = approver {
            builder = builder.approver(Arc::new(ApproverAdapter(a)));
        }
        let cm = builder.build();
        cm.prepare_engine().await?;
        Ok(Self { cm, hub })
    }

    /// The runtime.
    pub fn code_mode(&self) -> &CodeMode {
        &self.cm
    }

    /// Runs a cell (`language`: `javascript` (default) or `typescript`) in `session` and returns at
    /// once (see [`CodeMode::exec_then`]); `done` receives the result's JSON (`status`, `value`,
    /// `output`, `runId`, `pendingToolCalls`, `error`, `code`, `telemetry`) on the thread that
    /// finished the run. Call inside the runtime's context (`Handle::enter`).
    pub fn exec_then(
        &self,
        code: &str,
        language: Option<&str>,
        caller: &Caller,
        done: impl FnOnce(Value) + Send + 'static,
    ) -> CallHandle {
        let mut input = CodeModeExecInput::code(code);
        input.language = language.map(str::to_string);
        self.exec_input_then(Ok(input), caller, done)
    }

    /// Resumes a `waiting` run of `caller`, like [`Self::exec_then`].
    pub fn wait_then(&self, run_id: &str, caller: &Caller, done: impl FnOnce(Value) + Send + 'static) -> CallHandle {
        self.wait_input_then(Ok(CodeModeWaitInput::new(run_id)), caller, done)
    }

    /// [`Self::exec_then`] from the model's raw tool arguments (`{ code, language?, restartSafe? }`,
    /// hostile JSON), as an agent framework's `exec` tool receives them: a malformed call is
    /// answered at once (a `failed` result coded `invalid_input`).
    pub fn exec_json_then(
        &self,
        args: &Value,
        caller: &Caller,
        done: impl FnOnce(Value) + Send + 'static,
    ) -> CallHandle {
        self.exec_input_then(CodeModeExecInput::from_json(args), caller, done)
    }

    /// [`Self::wait_then`] from the model's raw tool arguments (`{ runId }`), like
    /// [`Self::exec_json_then`].
    pub fn wait_json_then(
        &self,
        args: &Value,
        caller: &Caller,
        done: impl FnOnce(Value) + Send + 'static,
    ) -> CallHandle {
        self.wait_input_then(CodeModeWaitInput::from_json(args), caller, done)
    }

    fn exec_input_then(
        &self,
        input: Result<CodeModeExecInput, CodeModeError>,
        caller: &Caller,
        done: impl FnOnce(Value) + Send + 'static,
    ) -> CallHandle {
        match input {
            Ok(input) => self.runtime_for(caller).exec_then(&caller.context(), &input, move |r| done(r.to_json())),
            Err(e) => refused(e, done),
        }
    }

    fn wait_input_then(
        &self,
        input: Result<CodeModeWaitInput, CodeModeError>,
        caller: &Caller,
        done: impl FnOnce(Value) + Send + 'static,
    ) -> CallHandle {
        match input {
            Ok(input) => self.runtime_for(caller).wait_then(&caller.context(), &input, move |r| done(r.to_json())),
            Err(e) => refused(e, done),
        }
    }

    /// The runtime with `caller`'s auto-wait budget (the same runtime when it names none).
    fn runtime_for(&self, caller: &Caller) -> std::borrow::Cow<'_, CodeMode> {
        match caller.auto_wait {
            Some(budget) => std::borrow::Cow::Owned(self.cm.with_auto_wait(budget)),
            None => std::borrow::Cow::Borrowed(&self.cm),
        }
    }

    /// Records a decision on a parked call: approve, or deny with the reason.
    pub async fn approve(&self, run_id: &str, request_id: u64, deny: Option<String>) -> Result<(), EmbedError> {
        let id = RunId::parse(run_id)?;
        let decision = match deny {
            Some(reason) => ApprovalDecision::deny(reason),
            None => ApprovalDecision::Approve,
        };
        Ok(self.cm.decide(&id, request_id, decision).await?)
    }

    /// Aborts a run; whether there was one.
    pub async fn abort(&self, run_id: &str) -> bool {
        match RunId::parse(run_id) {
            Ok(id) => self.cm.abort(&id).await,
            Err(_) => false,
        }
    }

    /// Takes a `waiting` run of `caller` out as bytes (see [`CodeMode::export_run`]).
    pub async fn export_run(&self, run_id: &str, caller: &Caller) -> Result<Vec<u8>, EmbedError> {
        let id = RunId::parse(run_id)?;
        Ok(self.cm.export_run(&caller.context(), &id).await?)
    }

    /// Puts exported bytes into this runtime's store; the run's id.
    pub async fn import_run(&self, bytes: Vec<u8>) -> Result<String, EmbedError> {
        Ok(self.cm.import_run(bytes).await?.to_string())
    }

    /// The two model-visible tools, as `codemode serve` lists them: `[{ name, description,
    /// inputSchema }]` for `exec` (its description generated from the catalog) and `wait`.
    pub fn model_tools(&self) -> Value {
        let tools = [self.cm.exec_tool(&self.hub.server_names()), codemode::surface::wait_tool()];
        Value::Array(
            tools
                .into_iter()
                .map(|t| json!({ "name": t.name, "description": t.description, "inputSchema": t.input_schema }))
                .collect(),
        )
    }

    /// The catalog ids the guest can call.
    pub fn tool_ids(&self) -> Vec<String> {
        self.cm.catalog().all_tools().into_iter().map(|e| e.id).collect()
    }

    /// The engine's name.
    pub fn engine(&self) -> &str {
        self.cm.engine_name()
    }

    /// Stops the upstream MCP servers' connections.
    pub async fn close(&self) {
        self.hub.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: Value) -> Result<ToolDefinition, EmbedError> {
        tool_definition(&v, "python")
    }

    /// The runtime's first cell runs on the instance built while the runtime started (limits no
    /// other test uses, so no other run can take it), and sees a fresh sandbox.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_cell_runs_on_the_instance_built_while_the_runtime_starts() -> Result<(), EmbedError> {
        let before = codemode_engine_quickjs::vms_taken_ahead();
        let config =
            json!({ "tools": { "codeMode": { "runtime": "quickjs", "memoryLimitBytes": (40 << 20) + 12_288 } } });
        let embedded =
            Embedded::start(EmbedOptions { config: Some(config), tools: Vec::new(), hook: None, approver: None })
                .await?;
        let result = embedded
            .code_mode()
            .exec(
                &Caller::session("ahead").context(),
                &codemode::CodeModeExecInput::code("return typeof globalThis.leaked"),
            )
            .await;
        assert_eq!(result.to_json()["value"], json!("undefined"), "{}", result.to_json());
        assert_eq!(codemode_engine_quickjs::vms_taken_ahead(), before + 1, "the first cell took the VM built ahead");
        embedded.close().await;
        Ok(())
    }

    #[test]
    fn tool_specs_become_plugin_definitions() -> Result<(), EmbedError> {
        let s = spec(json!({
            "name": "get_weather", "description": "Weather.", "readOnly": true,
            "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
            "outputSchema": {"type": "number"},
        }))?;
        assert_eq!(s.id(), "plugin:python:get_weather");
        assert!(s.read_only);
        assert_eq!(s.description, "Weather.");
        assert_eq!(s.output_schema, Some(json!({"type": "number"})));
        assert_eq!(spec(json!({"name": "t", "owner": "billing"}))?.id(), "plugin:billing:t");
        Ok(())
    }

    #[test]
    fn bad_tool_specs_are_invalid_input_naming_the_problem() {
        let refused = |v: Value, needle: &str| match spec(v) {
            Err(e) => {
                assert_eq!(e.code, "invalid_input");
                assert!(e.message.contains(needle), "{} should mention {needle}", e.message);
            }
            Ok(s) => panic!("accepted {s:?}"),
        };
        refused(json!("get_weather"), "object");
        refused(json!({}), "needs a `name`");
        refused(json!({"name": "has space"}), "identifier");
        refused(json!({"name": "1st"}), "identifier");
        refused(json!({"name": "x".repeat(65)}), "at most 64");
        refused(json!({"name": "then-x"}), "identifier");
        refused(json!({"name": "t", "owner": "a:b"}), "owner");
        refused(json!({"name": "t", "inputSchema": "string"}), "inputSchema");
        refused(json!({"name": "t", "outputSchema": []}), "outputSchema");
        refused(json!({"name": "t", "readOnly": "yes"}), "readOnly");
        refused(json!({"name": "t", "handler": 1}), "unknown key `handler`");
    }

    #[test]
    fn hook_verdicts_and_decisions_from_json() -> Result<(), HostFailure> {
        assert_eq!(HookVerdict::from_json(Value::Null)?, HookVerdict::Allow);
        assert_eq!(HookVerdict::from_json(json!(true))?, HookVerdict::Allow);
        assert!(matches!(HookVerdict::from_json(json!(false))?, HookVerdict::Refuse(_)));
        assert_eq!(HookVerdict::from_json(json!("no"))?, HookVerdict::Refuse("no".into()));
        assert_eq!(HookVerdict::from_json(json!({"input": {"a": 1}}))?, HookVerdict::Rewrite(json!({"a": 1})));
        assert_eq!(HookVerdict::from_json(json!({"refuse": "why"}))?, HookVerdict::Refuse("why".into()));
        let bad = HookVerdict::from_json(json!(42)).err().map(|f| f.kind);
        assert_eq!(bad.as_deref(), Some("TypeError"));
        assert_eq!(decision_from_json(Value::Null)?, None);
        assert_eq!(decision_from_json(json!(true))?, Some(ApprovalDecision::Approve));
        assert_eq!(decision_from_json(json!("nope"))?, Some(ApprovalDecision::deny("nope")));
        assert!(matches!(decision_from_json(json!(false))?, Some(ApprovalDecision::Deny { .. })));
        assert!(decision_from_json(json!([1])).is_err());
        // A huge returned value is cut in the message.
        let long = decision_from_json(json!({"x": "y".repeat(10_000)})).err().map(|f| f.message.len());
        assert!(long.is_some_and(|n| n < 300));
        Ok(())
    }

    #[test]
    fn config_text_is_json5_and_errors_are_config_errors() {
        assert_eq!(
            parse_config_text("{ tools: { codeMode: { timeoutMs: 5, }, }, }").ok(),
            Some(json!({"tools": {"codeMode": {"timeoutMs": 5}}}))
        );
        assert_eq!(parse_config_text("{ tools: ").err().map(|e| e.code), Some(ErrorCode::ConfigError));
    }
}
