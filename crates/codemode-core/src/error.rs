//! Error codes (contract §16) and the error value the runtime turns into a `failed` result.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Every error code of contract §16 (Variant B's full list).
///
/// Serialised in `snake_case`, exactly as on the wire (`"runtime_unavailable"`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CodeModeErrorCode {
    /// Code mode is enabled but the configured engine is not compiled in or cannot load (contract C4).
    RuntimeUnavailable,
    /// The configuration is malformed.
    InvalidConfig,
    /// The tool input is malformed, or a `runId` lookup failed (contract §6 "Lookup failures").
    InvalidInput,
    /// The cell's language is not in `languages`.
    UnsupportedLanguage,
    /// The TypeScript transform reported a diagnostic (contract §14).
    TypescriptTransformFailed,
    /// The cell used `import`, `require`, dynamic `import()` or another module-loader pattern (contract X6).
    ModuleAccessDenied,
    /// The guest was still busy when the `timeoutMs` deadline passed.
    Timeout,
    /// The guest ran out of its memory budget and did not recover.
    MemoryLimitExceeded,
    /// Output (text, JSON, the final value) exceeded `maxOutputBytes`.
    OutputLimitExceeded,
    /// A snapshot exceeded `maxSnapshotBytes`.
    SnapshotLimitExceeded,
    /// The snapshot outlived `snapshotTtlSeconds`.
    SnapshotExpired,
    /// A snapshot could not be restored (corrupt, truncated, from another engine build).
    SnapshotRestoreFailed,
    /// More nested calls were in flight at once than `maxPendingToolCalls` allows.
    TooManyPendingToolCalls,
    /// A nested tool call failed and the guest did not catch the error.
    NestedToolFailed,
    /// The run was aborted by its parent run or session.
    Aborted,
    /// A bug or an unexpected host failure.
    InternalError,
}

impl CodeModeErrorCode {
    /// All codes, in the order of contract §16.
    pub const ALL: [CodeModeErrorCode; 16] = [
        Self::RuntimeUnavailable,
        Self::InvalidConfig,
        Self::InvalidInput,
        Self::UnsupportedLanguage,
        Self::TypescriptTransformFailed,
        Self::ModuleAccessDenied,
        Self::Timeout,
        Self::MemoryLimitExceeded,
        Self::OutputLimitExceeded,
        Self::SnapshotLimitExceeded,
        Self::SnapshotExpired,
        Self::SnapshotRestoreFailed,
        Self::TooManyPendingToolCalls,
        Self::NestedToolFailed,
        Self::Aborted,
        Self::InternalError,
    ];

    /// The wire spelling, e.g. `"runtime_unavailable"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RuntimeUnavailable => "runtime_unavailable",
            Self::InvalidConfig => "invalid_config",
            Self::InvalidInput => "invalid_input",
            Self::UnsupportedLanguage => "unsupported_language",
            Self::TypescriptTransformFailed => "typescript_transform_failed",
            Self::ModuleAccessDenied => "module_access_denied",
            Self::Timeout => "timeout",
            Self::MemoryLimitExceeded => "memory_limit_exceeded",
            Self::OutputLimitExceeded => "output_limit_exceeded",
            Self::SnapshotLimitExceeded => "snapshot_limit_exceeded",
            Self::SnapshotExpired => "snapshot_expired",
            Self::SnapshotRestoreFailed => "snapshot_restore_failed",
            Self::TooManyPendingToolCalls => "too_many_pending_tool_calls",
            Self::NestedToolFailed => "nested_tool_failed",
            Self::Aborted => "aborted",
            Self::InternalError => "internal_error",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for CodeModeErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error that ends an `exec` or `wait` call as a `failed` result.
///
/// `code` is optional on the wire: an uncaught exception thrown by guest code has no code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CodeModeError {
    /// The contract §16 code, if one applies.
    pub code: Option<CodeModeErrorCode>,
    /// A message for the model.
    pub message: String,
}

impl CodeModeError {
    /// An error with a code.
    pub fn new(code: CodeModeErrorCode, message: impl Into<String>) -> Self {
        Self { code: Some(code), message: message.into() }
    }

    /// An error without a code (an uncaught guest exception).
    pub fn uncoded(message: impl Into<String>) -> Self {
        Self { code: None, message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for code in CodeModeErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            assert_eq!(CodeModeErrorCode::parse(code.as_str()), Some(code));
            let back: CodeModeErrorCode = serde_json::from_str(&json).unwrap();
            assert_eq!(back, code);
        }
        assert_eq!(CodeModeErrorCode::parse("nope"), None);
    }
}
