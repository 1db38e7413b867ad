//! TypeScript cells (SPEC §14). Source transformation only, loaded lazily for TypeScript cells.

use codemode_core::error::{CodeModeError, CodeModeErrorCode};

/// Transpiles a TypeScript cell to JavaScript.
///
/// This build has no TypeScript transformer, so TypeScript cells fail with `unsupported_language`
/// (never silently run as JavaScript).
pub fn transpile(_source: &str) -> Result<String, CodeModeError> {
    Err(CodeModeError::new(
        CodeModeErrorCode::UnsupportedLanguage,
        "TypeScript cells are not supported by this build; send the cell as JavaScript (language: \"javascript\")",
    ))
}
