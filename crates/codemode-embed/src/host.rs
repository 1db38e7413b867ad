//! The host language's callbacks behind the runtime's extension points: a function as a tool
//! ([`HostFunction`]), a before-call hook ([`HostHook`]) and an approver ([`HostApprover`]), each
//! with the adapter that plugs it into the facade's trait.

use crate::call_info;
use codemode::{
    ApprovalDecision, ApprovalRequest, Approver, NestedToolCall, Tool, ToolDefinition, ToolError, ToolErrorKind,
    ToolHook, ToolResult,
};
use serde_json::Value;
use std::sync::Arc;

/// A host-language function behind a tool. Implemented by the language packages.
#[async_trait::async_trait]
pub trait HostFunction: Send + Sync {
    /// Runs the function on `input` (JSON); `info` is [`call_info`]. An `Err` is the function's
    /// exception: the guest sees a `ToolError` (coded `nested_tool_failed`) with its message.
    async fn call(&self, input: Value, info: Value) -> Result<Value, HostFailure>;
}

/// A host function's failure: the exception's type name (`ValueError`, `TypeError`) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFailure {
    /// The exception's type (`Error` when the language has none to tell).
    pub kind: String,
    /// Its message.
    pub message: String,
}

impl HostFailure {
    /// A failure of `kind` with `message`.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self { kind: kind.into(), message: message.into() }
    }
}

/// A [`HostFunction`] as a catalog tool.
pub(crate) struct HostTool {
    pub(crate) def: ToolDefinition,
    pub(crate) function: Arc<dyn HostFunction>,
}

#[async_trait::async_trait]
impl Tool for HostTool {
    fn definition(&self) -> &ToolDefinition {
        &self.def
    }

    async fn call(&self, input: Value, call: &NestedToolCall) -> Result<ToolResult, ToolError> {
        match self.function.call(input, call_info(call)).await {
            Ok(v) => Ok(ToolResult::value(v)),
            Err(f) => Err(ToolError::failed(format!("{}: {}", f.kind, f.message))),
        }
    }
}

/// What a before-call hook decides.
#[derive(Debug, Clone, PartialEq)]
pub enum HookVerdict {
    /// The call goes ahead as it is.
    Allow,
    /// The call goes ahead with this input instead.
    Rewrite(Value),
    /// The call is refused with this reason (the guest sees a catchable error; the tool never runs).
    Refuse(String),
}

impl HookVerdict {
    /// The verdict a host-language hook returned, as JSON: `null` / `true` (allow), `false` (refuse),
    /// a string (refuse with that reason), `{ "input": … }` (rewrite), `{ "refuse": reason }`.
    pub fn from_json(v: Value) -> Result<Self, HostFailure> {
        Ok(match v {
            Value::Null | Value::Bool(true) => HookVerdict::Allow,
            Value::Bool(false) => HookVerdict::Refuse("refused by the before-call hook".into()),
            Value::String(reason) => HookVerdict::Refuse(reason),
            Value::Object(mut o) if o.contains_key("input") => {
                HookVerdict::Rewrite(o.remove("input").unwrap_or_default())
            }
            Value::Object(o) if o.contains_key("refuse") => HookVerdict::Refuse(
                o.get("refuse").and_then(Value::as_str).unwrap_or("refused by the before-call hook").to_string(),
            ),
            other => {
                return Err(HostFailure::new(
                    "TypeError",
                    format!(
                        "the before-call hook returned {}; expected nothing, true, false, a reason, {{input: …}} or {{refuse: reason}}",
                        preview(&other)
                    ),
                ));
            }
        })
    }
}

/// A decision a host-language approver returned, as JSON: `true` (approve), `false` or a string
/// (deny, with the string as the reason), `null` (no answer now: park the call).
pub fn decision_from_json(v: Value) -> Result<Option<ApprovalDecision>, HostFailure> {
    Ok(match v {
        Value::Null => None,
        Value::Bool(true) => Some(ApprovalDecision::Approve),
        Value::Bool(false) => Some(ApprovalDecision::deny("denied by the approver")),
        Value::String(reason) => Some(ApprovalDecision::deny(reason)),
        other => {
            return Err(HostFailure::new(
                "TypeError",
                format!("the approver returned {}; expected true, false, a denial reason or nothing", preview(&other)),
            ));
        }
    })
}

/// A short rendering of a value for an error message.
fn preview(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 80 { format!("{}…", text.chars().take(80).collect::<String>()) } else { text }
}

/// A host-language hook run before every nested call (after the policy, before approvals and the
/// tool). It sees `{ runId, requestId, toolId, session, input }`.
#[async_trait::async_trait]
pub trait HostHook: Send + Sync {
    /// The verdict; an `Err` (the hook raised) refuses the call with the error's message.
    async fn before_call(&self, call: Value) -> Result<HookVerdict, HostFailure>;
}

pub(crate) struct HookAdapter(pub(crate) Arc<dyn HostHook>);

#[async_trait::async_trait]
impl ToolHook for HookAdapter {
    async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
        let mut event = call_info(call);
        event["input"] = call.input.clone();
        match self.0.before_call(event).await {
            Ok(HookVerdict::Allow) => Ok(()),
            Ok(HookVerdict::Rewrite(input)) => {
                call.input = input;
                Ok(())
            }
            Ok(HookVerdict::Refuse(reason)) => Err(ToolError::new(ToolErrorKind::Denied, reason)),
            Err(f) => Err(ToolError::new(
                ToolErrorKind::Denied,
                format!("the before-call hook failed: {}: {}", f.kind, f.message),
            )),
        }
    }
}

/// A host-language approver of gated calls. It sees the approval request (`{ runId, requestId,
/// toolId, inputPreview, reason, cellLine?, context }`) and answers with a decision, or `None` to
/// park the call until [`Embedded::approve`].
#[async_trait::async_trait]
pub trait HostApprover: Send + Sync {
    /// The decision; an `Err` (the approver raised) denies the call with the error's message.
    async fn decide(&self, request: Value) -> Result<Option<ApprovalDecision>, HostFailure>;
}

pub(crate) struct ApproverAdapter(pub(crate) Arc<dyn HostApprover>);

#[async_trait::async_trait]
impl Approver for ApproverAdapter {
    async fn decide(&self, request: &ApprovalRequest) -> Option<ApprovalDecision> {
        let value = serde_json::to_value(request).unwrap_or(Value::Null);
        match self.0.decide(value).await {
            Ok(d) => d,
            Err(f) => Some(ApprovalDecision::deny(format!("the approver failed: {}: {}", f.kind, f.message))),
        }
    }
}
