//! TypeScript cells (SPEC §14): source transformation only — no type checking, no module resolution.
//!
//! The cell is parsed as the body of an async function (so top-level `await` and `return` work) and
//! transpiled with deno_ast; the function body is then handed to the engine like any JavaScript cell.
//! Parse errors and diagnostics fail the cell with `typescript_transform_failed` and the cell's own
//! line numbers (the wrapper adds no line). Line numbers of run-time errors refer to the transpiled
//! code.
//!
//! The transformer is loaded lazily: nothing of it runs for JavaScript cells or when code mode is
//! disabled ([`is_loaded`] tells whether it ran in this process, SPEC V16).

use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use std::sync::atomic::{AtomicBool, Ordering};

static LOADED: AtomicBool = AtomicBool::new(false);

/// Whether the TypeScript transformer has been used in this process.
pub fn is_loaded() -> bool {
    LOADED.load(Ordering::Relaxed)
}

/// The name of the wrapper function the cell is parsed in.
#[cfg(feature = "typescript")]
const WRAPPER: &str = "__codemode_cell__";

fn failed(message: String) -> CodeModeError {
    CodeModeError::new(CodeModeErrorCode::TypescriptTransformFailed, message)
}

/// Transpiles a TypeScript cell (the body of an async function) to a JavaScript function body.
#[cfg(feature = "typescript")]
pub fn transpile(source: &str) -> Result<String, CodeModeError> {
    use deno_ast::diagnostics::Diagnostic as _;
    use deno_ast::{
        EmitOptions, MediaType, ModuleSpecifier, ParseParams, SourceMapOption, TranspileModuleOptions,
        TranspileOptions, parse_program,
    };
    LOADED.store(true, Ordering::Relaxed);
    let prefix = format!("async function {WRAPPER}() {{");
    let text = format!("{prefix}{source}\n}}\n");
    let specifier = ModuleSpecifier::parse("file:///cell.ts").map_err(|e| failed(e.to_string()))?;
    let parsed = parse_program(ParseParams {
        specifier,
        text: text.into(),
        media_type: MediaType::TypeScript,
        capture_tokens: false,
        scope_analysis: false,
        maybe_syntax: None,
    })
    .map_err(|d| {
        let p = d.display_position();
        failed(format!("TypeScript syntax error at line {}: {}", p.line_number, d.message()))
    })?;
    if let Some(d) = parsed.diagnostics().first() {
        let p = d.display_position();
        return Err(failed(format!("TypeScript syntax error at line {}: {}", p.line_number, d.message())));
    }
    let emitted = parsed
        .transpile(
            &TranspileOptions::default(),
            &TranspileModuleOptions { module_kind: None },
            &EmitOptions {
                source_map: SourceMapOption::None,
                inline_sources: false,
                remove_comments: false,
                ..Default::default()
            },
        )
        .map_err(|e| failed(format!("TypeScript transform failed: {e}")))?
        .into_source()
        .text;
    // The output is `async function __codemode_cell__() { <body> }` (plus maybe a trailing newline).
    let start = emitted
        .find(WRAPPER)
        .and_then(|at| emitted[at..].find('{').map(|b| at + b + 1))
        .ok_or_else(|| failed("unexpected transpiler output".into()))?;
    let end =
        emitted.rfind('}').filter(|&e| e >= start).ok_or_else(|| failed("unexpected transpiler output".into()))?;
    Ok(emitted[start..end].to_string())
}

/// Without the `typescript` feature, TypeScript cells fail with `unsupported_language` (never run as
/// JavaScript).
#[cfg(not(feature = "typescript"))]
pub fn transpile(_source: &str) -> Result<String, CodeModeError> {
    let _ = failed;
    Err(CodeModeError::new(
        CodeModeErrorCode::UnsupportedLanguage,
        "TypeScript cells are not supported by this build; send the cell as JavaScript (language: \"javascript\")",
    ))
}

#[cfg(all(test, feature = "typescript"))]
mod tests {
    use super::*;

    #[test]
    fn transpiles_bodies_and_reports_errors_with_cell_lines() {
        let js = transpile("const x: number = 1;\ninterface A { a: string }\nreturn x as number;").unwrap();
        assert!(js.contains("const x = 1") && js.contains("return x") && !js.contains("interface"), "{js}");
        let e = transpile("const a = 1;\nconst b: = 2;").unwrap_err();
        assert_eq!(e.code, Some(CodeModeErrorCode::TypescriptTransformFailed));
        assert!(e.message.contains("line 2"), "{}", e.message);
        assert!(is_loaded());
    }
}
