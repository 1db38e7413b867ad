//! The result union shared by `exec` and `wait` (contract §5.2) and the output items (contract §7).

use crate::error::{CodeModeError, CodeModeErrorCode};
use crate::telemetry::CodeModeTelemetry;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One item of a cell's output, in guest call order (contract O1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
#[non_exhaustive]
pub enum CodeModeOutput {
    /// Human-readable text from `text(value)` (or `console.log`).
    Text {
        /// The text.
        text: String,
    },
    /// A structured item from `json(value)`, after JSON-safe conversion.
    Json {
        /// The value.
        value: Value,
    },
}

impl CodeModeOutput {
    /// Bytes this item counts against `maxOutputBytes`: the UTF-8 length of the text, or of the
    /// value's compact JSON.
    pub fn cost(&self) -> usize {
        match self {
            CodeModeOutput::Text { text } => text.len(),
            CodeModeOutput::Json { value } => json_len(value),
        }
    }
}

/// Length in bytes of the compact JSON text of `value`.
pub fn json_len(value: &Value) -> usize {
    serialized_len(value)
}

/// Length in bytes of `value` serialized as compact JSON, counted without building the text (0 when
/// it cannot be serialized).
pub fn serialized_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    // The writer cannot fail; a value that cannot be serialized counts what was written.
    let _ = serde_json::to_writer(&mut c, value);
    c.0
}

/// Why a run is `waiting` (contract §5.2, inferred meanings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaitReason {
    /// Nested host work was still pending when the call's time ran out.
    PendingTools,
    /// The guest called `yield_control()`.
    Yield,
}

/// What a pending nested call is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PendingCallKind {
    /// A catalog tool call that is running.
    Call,
    /// An MCP tool call that is running.
    Mcp,
    /// A gated call parked until a human decides (see [`crate::approval`]); it has not run.
    Approval,
}

impl PendingCallKind {
    /// The kind of a running call made by a request of `kind`.
    pub fn running(kind: crate::engine::RequestKind) -> Self {
        if kind == crate::engine::RequestKind::Mcp { PendingCallKind::Mcp } else { PendingCallKind::Call }
    }
}

/// A nested call still in flight when a run suspended (contract §5.2 leaves the shape open).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeModePendingToolCall {
    /// The bridge request id (unique within the run; what an approval decision names).
    pub request_id: u64,
    /// `call` for a running catalog tool, `mcp` for a running MCP tool, `approval` for a call
    /// parked until a human decides.
    pub kind: PendingCallKind,
    /// The exact catalog id of the nested tool.
    pub tool_id: String,
    /// Milliseconds since the call was issued, when the result was produced.
    pub elapsed_ms: u64,
    /// For a call parked on a question its tool asked (`kind: "approval"`): the question. Accepting
    /// it (approve) or declining it (deny) is the answer the tool gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
}

/// The result of `exec` and `wait` (contract §5.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase", rename_all_fields = "camelCase")]
#[non_exhaustive]
pub enum CodeModeResult {
    /// No guest work is pending and the final value is JSON-compatible.
    Completed {
        /// The cell's return value (`null` for `undefined`).
        value: Value,
        /// Output items, in guest call order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        output: Vec<CodeModeOutput>,
        /// Counters for the run so far.
        telemetry: CodeModeTelemetry,
    },
    /// The run is suspended and resumable with `wait`.
    Waiting {
        /// The id to pass to `wait`.
        run_id: String,
        /// Why the run suspended.
        reason: WaitReason,
        /// Nested calls still in flight.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pending_tool_calls: Vec<CodeModePendingToolCall>,
        /// Output produced since the previous result of this run.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        output: Vec<CodeModeOutput>,
        /// The cell was `restartSafe` (contract R2): it makes only read-only calls, so running it again
        /// from the start repeats no side effect — a host that lost the run (or its store) may re-run
        /// it instead. Sent only when true.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        rerunnable: bool,
        /// Counters for the run so far.
        telemetry: CodeModeTelemetry,
    },
    /// The run failed; its snapshot (if any) is gone.
    Failed {
        /// A message for the model.
        error: String,
        /// The contract §16 code, when one applies.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<CodeModeErrorCode>,
        /// Output produced before the failure.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        output: Vec<CodeModeOutput>,
        /// Counters for the run so far.
        telemetry: CodeModeTelemetry,
    },
}

impl CodeModeResult {
    /// A failed result from an error.
    pub fn failed(err: CodeModeError, output: Vec<CodeModeOutput>, telemetry: CodeModeTelemetry) -> Self {
        CodeModeResult::Failed { error: err.message, code: err.code, output, telemetry }
    }

    /// `"completed"`, `"waiting"` or `"failed"`.
    pub fn status(&self) -> &'static str {
        match self {
            CodeModeResult::Completed { .. } => "completed",
            CodeModeResult::Waiting { .. } => "waiting",
            CodeModeResult::Failed { .. } => "failed",
        }
    }

    /// The telemetry block.
    pub fn telemetry(&self) -> &CodeModeTelemetry {
        match self {
            CodeModeResult::Completed { telemetry, .. }
            | CodeModeResult::Waiting { telemetry, .. }
            | CodeModeResult::Failed { telemetry, .. } => telemetry,
        }
    }

    /// The output items.
    pub fn output(&self) -> &[CodeModeOutput] {
        match self {
            CodeModeResult::Completed { output, .. }
            | CodeModeResult::Waiting { output, .. }
            | CodeModeResult::Failed { output, .. } => output,
        }
    }

    /// The output items, to change (a host that resumes a run itself carries the output of the
    /// results it did not hand back into the one it does).
    pub fn output_mut(&mut self) -> &mut Vec<CodeModeOutput> {
        match self {
            CodeModeResult::Completed { output, .. }
            | CodeModeResult::Waiting { output, .. }
            | CodeModeResult::Failed { output, .. } => output,
        }
    }

    /// The `runId` of a waiting result.
    pub fn run_id(&self) -> Option<&str> {
        match self {
            CodeModeResult::Waiting { run_id, .. } => Some(run_id),
            _ => None,
        }
    }

    /// The pending nested calls of a waiting result (empty otherwise).
    pub fn pending_tool_calls(&self) -> &[CodeModePendingToolCall] {
        match self {
            CodeModeResult::Waiting { pending_tool_calls, .. } => pending_tool_calls,
            _ => &[],
        }
    }

    /// The error code of a failed result.
    pub fn error_code(&self) -> Option<CodeModeErrorCode> {
        match self {
            CodeModeResult::Failed { code, .. } => *code,
            _ => None,
        }
    }

    /// The result as a JSON value (the wire shape).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_shapes_are_camel_case() {
        let t = CodeModeTelemetry::default();
        let waiting = CodeModeResult::Waiting {
            run_id: "run_1".into(),
            reason: WaitReason::PendingTools,
            pending_tool_calls: vec![CodeModePendingToolCall {
                request_id: 3,
                kind: PendingCallKind::Call,
                tool_id: "plugin:demo:demo_sleep".into(),
                elapsed_ms: 12,
                question: None,
            }],
            output: vec![CodeModeOutput::Text { text: "hi".into() }],
            rerunnable: false,
            telemetry: t.clone(),
        };
        let v = waiting.to_json();
        assert!(v.get("rerunnable").is_none(), "sent only when true");
        assert_eq!(v["status"], "waiting");
        assert_eq!(v["runId"], "run_1");
        assert_eq!(v["reason"], "pending_tools");
        assert_eq!(v["pendingToolCalls"][0]["toolId"], "plugin:demo:demo_sleep");
        assert_eq!(v["pendingToolCalls"][0]["requestId"], 3);
        assert_eq!(v["output"][0], json!({"type": "text", "text": "hi"}));
        let back: CodeModeResult = serde_json::from_value(v).unwrap();
        assert_eq!(back, waiting);

        let failed =
            CodeModeResult::failed(CodeModeError::new(CodeModeErrorCode::Timeout, "too slow"), vec![], t.clone());
        let v = failed.to_json();
        assert_eq!(v["status"], "failed");
        assert_eq!(v["code"], "timeout");
        assert_eq!(v["error"], "too slow");
        assert!(v.get("output").is_none());

        let done = CodeModeResult::Completed {
            value: Value::Null,
            output: vec![CodeModeOutput::Json { value: json!([1]) }],
            telemetry: t,
        };
        let v = done.to_json();
        assert_eq!(v["status"], "completed");
        assert_eq!(v["value"], Value::Null);
        assert_eq!(v["output"][0], json!({"type": "json", "value": [1]}));
    }

    #[test]
    fn output_cost_counts_bytes() {
        assert_eq!(CodeModeOutput::Text { text: "héllo".into() }.cost(), 6);
        assert_eq!(CodeModeOutput::Json { value: json!({"a": [1, 2]}) }.cost(), r#"{"a":[1,2]}"#.len());
    }
}
