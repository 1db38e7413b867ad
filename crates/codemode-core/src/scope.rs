//! Run identity and scope (contract §6, docs/src/layout.md).
//!
//! A suspended run may only be resumed from the scope that created it: the same agent, session and
//! (when both sides name one) the same agent run. Tool-call ids differ between `exec` and `wait` by
//! nature and are not part of the check.

use crate::error::{CodeModeError, CodeModeErrorCode};
use crate::input::MAX_RUN_ID_BYTES;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// Lookup failure message for unknown, expired, aborted or busy runs (contract §6).
pub const MSG_UNAVAILABLE: &str = "code mode run is unavailable or expired.";
/// Lookup failure message for a run of another session (contract §6).
pub const MSG_OTHER_SESSION: &str = "code mode run belongs to a different session.";
/// Lookup failure message for a run of another agent run (contract WF4).
pub const MSG_OTHER_RUN: &str = "code mode run belongs to a different agent run.";
/// Lookup failure message while another `wait` holds the run (contract WF5).
pub const MSG_BUSY: &str = "code mode run is already being resumed by another wait.";
/// Rejection message for the 65th suspended run (contract §6).
pub const MSG_TOO_MANY: &str = "too many suspended code mode runs.";

/// The id of one code-mode run (one `exec` cell), handed to the model in `waiting` results.
///
/// Only `[A-Za-z0-9_-]`, at most 128 bytes: safe as a map key and as a file name.
///
/// Shared text: a clone (one for every nested call the run makes, one for each record of it) is a
/// reference count, not a copy. Serialized as the plain string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(Arc<str>);

impl RunId {
    /// Validates a run id received from outside (a hostile `wait` input).
    pub fn parse(s: &str) -> Result<Self, CodeModeError> {
        let ok = !s.is_empty()
            && s.len() <= MAX_RUN_ID_BYTES
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok { Ok(RunId(s.into())) } else { Err(CodeModeError::new(CodeModeErrorCode::InvalidInput, MSG_UNAVAILABLE)) }
    }

    /// Wraps a freshly generated id. The caller guarantees the character set.
    pub fn from_generated(s: String) -> Self {
        debug_assert!(RunId::parse(&s).is_ok());
        RunId(s.into())
    }

    /// The id text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who a run belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunScope {
    /// The active agent (contract P1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The session id (contract P2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The session key (contract P2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The parent agent run the cell belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_run_id: Option<String>,
}

/// Why a scope check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeMismatch {
    /// Another agent or session.
    Session,
    /// Same session, another agent run.
    AgentRun,
}

impl ScopeMismatch {
    /// The contract §6 message.
    pub fn message(self) -> &'static str {
        match self {
            ScopeMismatch::Session => MSG_OTHER_SESSION,
            ScopeMismatch::AgentRun => MSG_OTHER_RUN,
        }
    }
}

impl RunScope {
    /// A scope with just a session id.
    pub fn session(id: impl Into<String>) -> Self {
        Self { session_id: Some(id.into()), ..Self::default() }
    }

    /// Checks that `caller` may resume a run created in `self`.
    ///
    /// Agent, session id and session key must match exactly (absent matches only absent). The agent
    /// run id is compared when both sides carry one.
    pub fn check(&self, caller: &RunScope) -> Result<(), ScopeMismatch> {
        if self.agent_id != caller.agent_id
            || self.session_id != caller.session_id
            || self.session_key != caller.session_key
        {
            return Err(ScopeMismatch::Session);
        }
        match (&self.agent_run_id, &caller.agent_run_id) {
            (Some(a), Some(b)) if a != b => Err(ScopeMismatch::AgentRun),
            _ => Ok(()),
        }
    }
}

/// Everything the host knows about the caller of one `exec` / `wait` (contract §12 P1–P4).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunContext {
    /// The scope the run belongs to.
    #[serde(default)]
    pub scope: RunScope,
    /// The id of the model's `exec` / `wait` tool call (for transcript projection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Sender of the triggering message (contract P3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<String>,
    /// Channel of the triggering message (contract P3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// Model provider, e.g. `openai` (for `tools.byProvider`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Model id, e.g. `gpt-5.2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The caller runs sandboxed (contract P4): every nested call carries this, so the host's executor
    /// applies its sandbox tool policy to calls made from inside the code exactly as to direct calls.
    /// (codemode itself does not interpret it; see the README's tool policy section.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sandboxed: bool,
    /// The caller's W3C trace context (`traceparent`, e.g. from an MCP request's `_meta`): the
    /// `exec` span becomes its child, and a `wait` span links to it (the run's own trace is the
    /// one its `exec` started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_parent: Option<String>,
}

impl RunContext {
    /// A context for one session.
    pub fn session(id: impl Into<String>) -> Self {
        Self { scope: RunScope::session(id), ..Self::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serialized as the plain string (stored runs keep their form); a clone shares the text.
    #[test]
    fn a_run_id_serializes_as_its_string_and_clones_share_it() {
        let id = RunId::parse("cm_0123abcd-EF").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""cm_0123abcd-EF""#);
        assert_eq!(serde_json::from_str::<RunId>(r#""cm_0123abcd-EF""#).unwrap(), id);
        assert!(std::ptr::eq(id.clone().as_str(), id.as_str()));
    }

    #[test]
    fn run_ids_are_validated() {
        assert!(RunId::parse("cm_0123abcd-EF").is_ok());
        for bad in ["", "../etc/passwd", "a b", "x".repeat(129).as_str(), "run\0id", "ü"] {
            let e = RunId::parse(bad).unwrap_err();
            assert_eq!(e.code, Some(CodeModeErrorCode::InvalidInput));
            assert_eq!(e.message, MSG_UNAVAILABLE);
        }
    }

    #[test]
    fn scope_checks() {
        let a = RunScope { session_id: Some("s1".into()), agent_run_id: Some("r1".into()), ..Default::default() };
        assert_eq!(a.check(&a.clone()), Ok(()));
        let other_session = RunScope { session_id: Some("s2".into()), ..a.clone() };
        assert_eq!(a.check(&other_session), Err(ScopeMismatch::Session));
        let no_session = RunScope { session_id: None, ..a.clone() };
        assert_eq!(a.check(&no_session), Err(ScopeMismatch::Session));
        let other_run = RunScope { agent_run_id: Some("r2".into()), ..a.clone() };
        assert_eq!(a.check(&other_run), Err(ScopeMismatch::AgentRun));
        let unknown_run = RunScope { agent_run_id: None, ..a.clone() };
        assert_eq!(a.check(&unknown_run), Ok(()));
        let other_agent = RunScope { agent_id: Some("x".into()), ..a.clone() };
        assert_eq!(a.check(&other_agent).unwrap_err().message(), MSG_OTHER_SESSION);
    }
}
