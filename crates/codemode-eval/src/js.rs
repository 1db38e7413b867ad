//! The suite's own JavaScript (fixture generators, the oracle's answer and computed-call
//! functions) runs in codemode's sandbox with no tools: a task file is data a user may have been
//! sent, and its code gets no more power than a cell's.

use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, RunContext};
use serde_json::Value;
use std::sync::Arc;

/// Longest a suite function may run. Prevents: a task file's loop hanging the evaluation.
pub const JS_TIMEOUT_MS: u64 = 10_000;

/// Largest value a suite function may return (bytes of JSON). Prevents: a generator filling the
/// disk or memory; 8 MiB is far more than any fixture needs.
pub const JS_MAX_RESULT_BYTES: u64 = 8 << 20;

/// A sandbox for the suite's functions.
#[derive(Clone)]
pub struct Sandbox {
    cm: Arc<CodeMode>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sandbox")
    }
}

impl Sandbox {
    /// A sandbox on the default engine.
    pub fn new() -> Sandbox {
        let config = CodeModeConfig {
            timeout_ms: JS_TIMEOUT_MS,
            max_output_bytes: JS_MAX_RESULT_BYTES,
            ..CodeModeConfig::enabled()
        };
        Sandbox { cm: Arc::new(CodeMode::builder(config).build()) }
    }

    /// The process's sandbox for suite functions, made on first use (one runtime for every
    /// episode's fixtures and the oracle's functions, instead of one each).
    pub fn shared() -> Sandbox {
        static SHARED: std::sync::OnceLock<Sandbox> = std::sync::OnceLock::new();
        SHARED.get_or_init(Sandbox::new).clone()
    }

    /// Calls the function whose source is `function` (`(x) => …`, or a function body when
    /// `body`) with `input`, and returns its value.
    pub async fn call(&self, function: &str, input: &Value, body: bool) -> Result<Value, String> {
        let input = serde_json::to_string(input).map_err(|e| e.to_string())?;
        let code = if body {
            format!("const input = {input};\nreturn await (async () => {{\n{function}\n}})();")
        } else {
            format!("const input = {input};\nreturn await ({function})(input);")
        };
        let ctx = RunContext::session("eval-suite");
        match self.cm.exec(&ctx, &CodeModeExecInput::code(code)).await {
            CodeModeResult::Completed { value, .. } => Ok(value),
            CodeModeResult::Failed { error, .. } => Err(error),
            other => Err(format!("the function did not complete: {}", other.status())),
        }
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::new()
    }
}
