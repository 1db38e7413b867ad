//! The trajectory of code-mode runs (contract §12 P9, §19 U9, §20 V23/V24, §21 E16): every model-visible
//! `exec` / `wait` call and every nested tool call it drove, as transcript records that name their
//! parent, with inputs and results under a [`Redaction`] policy.
//!
//! The runtime emits [`TraceRecord`]s as [`RunEvent::Trace`](crate::executor::RunEvent::Trace) to a
//! call's observer and to the runtime-wide trajectory sink; `codemode run --trace` and
//! `codemode serve --audit` write them as JSON lines. [`Transcript`] reads such lines back and groups
//! the nested entries under their control calls, in order (replay).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What happened to a nested call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The call was issued to the tool (past the gates it meets before the hooks).
    Issued,
    /// The call waits for a human's approval.
    Parked,
    /// A human approved the parked call; it is issued now.
    Approved,
    /// A human, the sandbox policy or a hook refused it.
    Denied,
    /// It returned a value.
    Completed,
    /// It failed.
    Failed,
    /// It was stopped (abort, cancelled caller).
    Cancelled,
    /// It was issued again by a process resuming the run after the one running it was lost.
    Reissued,
}

/// One nested call event, a transcript entry of a real tool call under its parent control call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptEntry {
    /// The model-visible `exec` / `wait` call that drove it (`RunContext::tool_call_id`), if the
    /// caller gave one.
    pub parent_tool_call_id: Option<String>,
    /// `exec` or `wait`: which control call drove it.
    pub parent_tool: String,
    /// The code-mode run.
    pub run_id: String,
    /// The call's request id within the run (stable across `exec` / `wait`).
    pub request_id: u64,
    /// The exact catalog id of the nested tool.
    pub tool_id: String,
    /// What happened.
    pub outcome: CallOutcome,
    /// Unix milliseconds of this event.
    pub at_ms: u64,
    /// Milliseconds since the call was issued (0 on `issued`, `approved` and `reissued`: the call
    /// is issued at that moment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The input (redacted), on `issued` / `parked` / `reissued`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The result (redacted), on `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error message (redacted), on `failed` / `denied` / `cancelled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The line of the model's cell that made the call, when the guest reported it (calls to
    /// gated tools, and every call when the host asked for call lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// One model-visible control call (`exec` / `wait`), at its start and at its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControlRecord {
    /// The call id the caller gave (`RunContext::tool_call_id`).
    pub tool_call_id: Option<String>,
    /// `exec` or `wait`.
    pub tool: String,
    /// The run (for `exec`, known once it has started; for `wait`, the run it names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// `started`, or the result's status (`completed`, `waiting`, `failed`).
    pub status: String,
    /// The failure's code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Unix milliseconds of this event.
    pub at_ms: u64,
    /// At the end: how long the call took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// A suspended run's lifecycle event that no `exec` / `wait` call reports: it expired, or it was
/// aborted while no call drove it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleRecord {
    /// The run.
    pub run_id: String,
    /// What happened (`expired`, `aborted`).
    pub event: crate::telemetry::SnapshotEventKind,
    /// Unix milliseconds.
    pub at_ms: u64,
}

/// A human's decision on a parked call, as the host that took it records it (who decided, and
/// how). The runtime's own `approved` / `denied` entries follow when the run applies it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    /// The run.
    pub run_id: String,
    /// The parked call.
    pub request_id: u64,
    /// `approve` or `deny`.
    pub decision: String,
    /// The reason given with a denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who decided (an operator's name, or where the decision came from).
    pub by: String,
    /// Unix milliseconds.
    pub at_ms: u64,
}

/// A trajectory record: a control call, a nested call event, or a run's lifecycle event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TraceRecord {
    /// An `exec` / `wait` call started or ended.
    Control(ControlRecord),
    /// A nested call event.
    Nested(TranscriptEntry),
    /// A suspended run expired or was aborted out of band.
    Lifecycle(LifecycleRecord),
    /// A human decided a parked call (recorded by the host that took the decision).
    Decision(DecisionRecord),
}

impl TraceRecord {
    /// One JSON line (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // U+2028, U+2029 and the C1 controls escaped: a reader that splits on Unicode
        // line breaks must not lose the record (a cell could otherwise hide its own call).
        crate::text::json_line_safe(serde_json::to_string(self).unwrap_or_else(|_| "{}".to_string()))
    }
}

/// A control call with the nested entries it drove, as replayed from records.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayedCall {
    /// The control call's start record.
    pub start: ControlRecord,
    /// Its end record, if the transcript has one.
    pub end: Option<ControlRecord>,
    /// The nested entries made while it ran, in order.
    pub entries: Vec<TranscriptEntry>,
}

/// Records read back in order (E16: replay keeps the control calls and their nested entries).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transcript {
    /// The records, in the order they were written.
    pub records: Vec<TraceRecord>,
}

/// Why a transcript could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("transcript line {line}: {message}")]
pub struct TranscriptError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl Transcript {
    /// Parses JSON lines (blank lines are skipped).
    pub fn from_json_lines(text: &str) -> Result<Self, TranscriptError> {
        let mut records = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let r = serde_json::from_str(line).map_err(|e| TranscriptError { line: i + 1, message: e.to_string() })?;
            records.push(r);
        }
        Ok(Self { records })
    }

    /// The control calls in order, each with the nested entries that name it as parent (by call id
    /// and tool) and were written while it was open. Entries whose parent is not open are dropped
    /// from the grouping (see [`Self::orphans`]).
    pub fn calls(&self) -> Vec<ReplayedCall> {
        let mut out: Vec<ReplayedCall> = Vec::new();
        for r in &self.records {
            match r {
                TraceRecord::Control(c) if c.status == "started" => {
                    out.push(ReplayedCall { start: c.clone(), end: None, entries: Vec::new() })
                }
                TraceRecord::Control(c) => {
                    if let Some(call) = out.iter_mut().rev().find(|call| {
                        call.end.is_none() && call.start.tool_call_id == c.tool_call_id && call.start.tool == c.tool
                    }) {
                        call.end = Some(c.clone());
                    }
                }
                TraceRecord::Lifecycle(_) | TraceRecord::Decision(_) => {}
                TraceRecord::Nested(e) => {
                    if let Some(call) = out.iter_mut().rev().find(|call| {
                        call.end.is_none()
                            && call.start.tool_call_id == e.parent_tool_call_id
                            && call.start.tool == e.parent_tool
                    }) {
                        call.entries.push(e.clone());
                    }
                }
            }
        }
        out
    }

    /// Nested entries whose parent control call is not open where they appear.
    pub fn orphans(&self) -> usize {
        let grouped: usize = self.calls().iter().map(|c| c.entries.len()).sum();
        let nested = self.records.iter().filter(|r| matches!(r, TraceRecord::Nested(_))).count();
        nested - grouped
    }
}

/// Default largest JSON size of one input, result or message in a transcript entry.
pub const DEFAULT_MAX_VALUE_BYTES: usize = 2_048;

/// Object keys whose values are masked by default (compared case-insensitively, as substrings,
/// ignoring `_` and `-`): `password` also masks `db_password`, `apiKey` also `x-api-key`.
pub const DEFAULT_MASKED_KEYS: [&str; 11] = [
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "authorization",
    "cookie",
    "credential",
    "privatekey",
    "sessionkey",
    "signature",
];

/// Environment variables whose values are not treated as secrets (so that, e.g., every path under
/// `$HOME` is not masked).
const PUBLIC_ENV: [&str; 14] = [
    "PATH", "HOME", "PWD", "OLDPWD", "SHELL", "LANG", "LANGUAGE", "TERM", "USER", "LOGNAME", "TMPDIR", "HOSTNAME",
    "LC_ALL", "SHLVL",
];

/// The mask put in place of a secret.
pub const MASK: &str = "[redacted]";

/// How inputs, results and messages are cut down before they enter a transcript entry (contract §17
/// last paragraph: never secrets, raw environment values or unredacted inputs): values under
/// masked keys become [`MASK`]; any occurrence of an environment variable's value (8 characters or
/// more, other than a few public ones like `PATH`) becomes [`MASK`]; what is still larger than
/// `max_value_bytes` of JSON is replaced by `{"truncated": true, "bytes": N, "preview": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redaction {
    /// Largest JSON size kept whole. Prevents: transcripts and audit logs that copy every large tool
    /// result (and whatever secrets hide in it) verbatim.
    pub max_value_bytes: usize,
    /// Masked keys (normalized: lower case, without `_` / `-`).
    pub masked_keys: Vec<String>,
    /// Environment values to mask, captured when the policy is made.
    env_values: Vec<String>,
}

impl Default for Redaction {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_VALUE_BYTES, DEFAULT_MASKED_KEYS.iter().map(|s| s.to_string()))
    }
}

fn normalize_key(k: &str) -> String {
    k.chars().filter(|c| *c != '_' && *c != '-').flat_map(char::to_lowercase).collect()
}

impl Redaction {
    /// A policy with these limits, masking these keys and this process's environment values.
    pub fn new(max_value_bytes: usize, masked_keys: impl IntoIterator<Item = String>) -> Self {
        let mut env_values: Vec<String> = std::env::vars()
            .filter(|(k, v)| v.chars().count() >= 8 && !PUBLIC_ENV.contains(&k.as_str()))
            .map(|(_, v)| v)
            .collect();
        // Longest first, so a value containing another is masked whole.
        env_values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        env_values.dedup();
        Self {
            max_value_bytes: max_value_bytes.max(64),
            masked_keys: masked_keys.into_iter().map(|k| normalize_key(&k)).filter(|k| !k.is_empty()).collect(),
            env_values,
        }
    }

    fn masked(&self, key: &str) -> bool {
        let k = normalize_key(key);
        self.masked_keys.iter().any(|m| k.contains(m.as_str()))
    }

    fn scrub(&self, s: &str) -> String {
        let mut out = s.to_string();
        for v in &self.env_values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), MASK);
            }
        }
        out
    }

    fn mask(&self, v: &Value, depth: usize) -> Value {
        match v {
            Value::String(s) => Value::String(self.scrub(s)),
            Value::Array(items) if depth < 64 => Value::Array(items.iter().map(|x| self.mask(x, depth + 1)).collect()),
            Value::Object(map) if depth < 64 => Value::Object(
                map.iter()
                    .map(|(k, x)| {
                        let x = if self.masked(k) { Value::String(MASK.into()) } else { self.mask(x, depth + 1) };
                        (self.scrub(k), x)
                    })
                    .collect(),
            ),
            Value::Array(_) | Value::Object(_) => Value::String("[too deep]".into()),
            other => other.clone(),
        }
    }

    /// `v` with secrets masked and cut to the size limit.
    pub fn value(&self, v: &Value) -> Value {
        let masked = self.mask(v, 0);
        let text = serde_json::to_string(&masked).unwrap_or_default();
        if text.len() <= self.max_value_bytes {
            return masked;
        }
        let preview: String = text.chars().take(self.max_value_bytes / 2).collect();
        serde_json::json!({ "truncated": true, "bytes": text.len(), "preview": preview })
    }

    /// A message with environment values masked and cut to the size limit.
    pub fn message(&self, s: &str) -> String {
        let s = self.scrub(s);
        if s.len() <= self.max_value_bytes {
            return s;
        }
        let cut: String = s.chars().take(self.max_value_bytes / 2).collect();
        format!("{cut}… [{} bytes]", s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masks_keys_environment_values_and_size() {
        let r = Redaction { env_values: vec!["sk-live-0123456789".into()], ..Redaction::default() };
        let v = json!({
            "query": "weather", "apiKey": "abc", "nested": {"DB_PASSWORD": "x", "list": [{"x-api-key": 1}]},
            "note": "token is sk-live-0123456789 ok", "Authorization": "Bearer z"
        });
        assert_eq!(
            r.value(&v),
            json!({
                "query": "weather", "apiKey": MASK, "nested": {"DB_PASSWORD": MASK, "list": [{"x-api-key": MASK}]},
                "note": "token is [redacted] ok", "Authorization": MASK
            })
        );
        let big = json!({"blob": "y".repeat(5000)});
        let cut = r.value(&big);
        assert_eq!(cut["truncated"], json!(true));
        assert!(cut["bytes"].as_u64().unwrap() > 5000);
        assert!(cut["preview"].as_str().unwrap().len() <= DEFAULT_MAX_VALUE_BYTES / 2);
        assert_eq!(r.message("failed with sk-live-0123456789"), "failed with [redacted]");
        assert!(r.message(&"e".repeat(5000)).ends_with("[5000 bytes]"));
    }

    #[test]
    fn real_environment_values_are_masked() {
        // The test process's own environment: cargo sets CARGO_MANIFEST_DIR (a long path) for every
        // test run, so there is always a value to find.
        let r = Redaction::default();
        let v = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
        assert!(v.chars().count() >= 8, "CARGO_MANIFEST_DIR is set by cargo test");
        let out = r.value(&json!({ "echo": format!("value: {v}") }));
        assert_eq!(out, json!({ "echo": format!("value: {MASK}") }), "an environment value leaked");
    }

    #[test]
    fn transcripts_replay_in_order_under_their_parents() {
        let control = |id: &str, tool: &str, status: &str| {
            TraceRecord::Control(ControlRecord {
                tool_call_id: Some(id.into()),
                tool: tool.into(),
                run_id: Some("cm_1".into()),
                status: status.into(),
                code: None,
                at_ms: 0,
                duration_ms: None,
            })
        };
        let nested = |parent: &str, tool: &str, req: u64, outcome: CallOutcome| {
            TraceRecord::Nested(TranscriptEntry {
                parent_tool_call_id: Some(parent.into()),
                parent_tool: tool.into(),
                run_id: "cm_1".into(),
                request_id: req,
                tool_id: "plugin:demo:demo_sleep".into(),
                outcome,
                at_ms: 0,
                duration_ms: None,
                input: None,
                result: None,
                error: None,
                line: None,
            })
        };
        let records = vec![
            control("c1", "exec", "started"),
            nested("c1", "exec", 1, CallOutcome::Issued),
            control("c1", "exec", "waiting"),
            nested("zz", "exec", 9, CallOutcome::Issued), // no open parent
            control("c2", "wait", "started"),
            nested("c2", "wait", 1, CallOutcome::Completed),
            nested("c2", "wait", 2, CallOutcome::Issued),
            nested("c2", "wait", 2, CallOutcome::Completed),
            control("c2", "wait", "completed"),
        ];
        let text: String = records.iter().map(|r| r.to_json_line() + "\n").collect();
        let t = Transcript::from_json_lines(&text).unwrap();
        assert_eq!(t.records, records, "JSON lines round-trip");
        let calls = t.calls();
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].start.tool.as_str(), calls[0].end.as_ref().map(|e| e.status.as_str())),
            ("exec", Some("waiting"))
        );
        assert_eq!(
            calls[0].entries.iter().map(|e| (e.request_id, e.outcome)).collect::<Vec<_>>(),
            [(1, CallOutcome::Issued)]
        );
        assert_eq!(
            calls[1].entries.iter().map(|e| (e.request_id, e.outcome)).collect::<Vec<_>>(),
            [(1, CallOutcome::Completed), (2, CallOutcome::Issued), (2, CallOutcome::Completed)]
        );
        assert_eq!(t.orphans(), 1);
        assert!(Transcript::from_json_lines("{\"type\":\"nope\"}").is_err());
    }
}
