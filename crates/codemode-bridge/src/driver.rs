//! The engine-agnostic drive step (DESIGN §4 `drive`): deliver settled requests, run jobs until
//! quiescent, read the cell's state. Engines implement the handful of primitive operations of
//! [`GuestVm`]; the order of operations and the mapping of faults to outcomes live here, once.

use crate::adapter::parse_guest_json;
use crate::host::BridgeHost;
use codemode_core::engine::{DriveInput, DriveOutcome, DriveReport, EngineError, GuestFailure, RequestId};
use codemode_core::error::CodeModeErrorCode;
use serde::Deserialize;
use std::time::Instant;

/// Most characters of a failure message (name, message and stack) kept for the model.
pub const MAX_FAILURE_CHARS: usize = 2000;
/// Most stack lines kept in a failure message.
pub const MAX_STACK_LINES: usize = 6;

/// Message of a `timeout` failure.
pub const TIMEOUT_MESSAGE: &str =
    "code mode cell timed out: the guest was still running when the call's time limit (timeoutMs) was reached";

/// Why a primitive VM operation did not complete normally.
#[derive(Debug)]
pub enum VmFault {
    /// The engine's interrupt fired: the deadline passed, or the bridge recorded a fatal limit.
    Interrupted,
    /// The guest failed in a way the prelude could not catch (a compile error, an exception escaping a
    /// job, running out of memory inside the prelude).
    Failure(GuestFailure),
    /// The engine itself broke.
    Engine(EngineError),
}

impl From<EngineError> for VmFault {
    fn from(e: EngineError) -> Self {
        VmFault::Engine(e)
    }
}

/// The primitive operations an engine provides to [`drive`].
pub trait GuestVm {
    /// Arms the engine's interrupt for `deadline` (and for fatal bridge limits).
    fn set_deadline(&mut self, deadline: Instant);
    /// Compiles `wrapped` (see [`crate::wrap_code`]) and passes the function to the prelude's `run`.
    fn start_cell(&mut self, wrapped: &str) -> Result<(), VmFault>;
    /// Calls the prelude's `settle(id, ok, json)`.
    fn settle(&mut self, id: RequestId, ok: bool, json: &str) -> Result<(), VmFault>;
    /// Runs pending jobs until none is left.
    fn run_jobs(&mut self) -> Result<(), VmFault>;
    /// Calls the prelude's `poll()`: `None` while the cell runs, else its state string.
    fn poll(&mut self) -> Result<Option<String>, VmFault>;
    /// Gives access to the bridge host.
    fn with_bridge<R>(&mut self, f: impl FnOnce(&mut BridgeHost) -> R) -> R;
}

/// Runs one drive step. `unstarted` holds the wrapped cell source until the first step starts it.
pub fn drive<V: GuestVm>(
    vm: &mut V,
    unstarted: &mut Option<String>,
    input: DriveInput,
) -> Result<DriveReport, EngineError> {
    vm.with_bridge(|b| b.begin_drive(input.output_budget));
    vm.set_deadline(input.deadline);
    let stepped = step(vm, unstarted, &input);
    let fatal = vm.with_bridge(|b| b.fatal().cloned());
    let (requests, output) = vm.with_bridge(|b| b.finish_drive());
    let outcome = match (fatal, stepped) {
        (Some(f), _) => DriveOutcome::Failed(f),
        (None, Err(VmFault::Engine(e))) => return Err(e),
        (None, Err(VmFault::Interrupted)) => DriveOutcome::Failed(GuestFailure {
            code: Some(CodeModeErrorCode::Timeout),
            message: TIMEOUT_MESSAGE.to_string(),
        }),
        (None, Err(VmFault::Failure(f))) => DriveOutcome::Failed(f),
        (None, Ok(None)) => DriveOutcome::Pending,
        (None, Ok(Some(state))) => {
            let (budget, limits) = vm.with_bridge(|b| (input.output_budget.saturating_sub(b.output_used()), *b.limits()));
            parse_state(&state, budget, limits.max_json_depth)
        }
    };
    Ok(DriveReport { outcome, requests, output })
}

fn step<V: GuestVm>(vm: &mut V, unstarted: &mut Option<String>, input: &DriveInput) -> Result<Option<String>, VmFault> {
    if let Some(code) = unstarted.take() {
        vm.start_cell(&code)?;
    }
    for d in &input.deliveries {
        if let Some((ok, json)) = vm.with_bridge(|b| b.prepare_delivery(d)) {
            vm.settle(d.id, ok, &json)?;
        }
    }
    vm.run_jobs()?;
    vm.poll()
}

/// Turns the prelude's state string (`"1" + valueJson` or `"0" + failureJson`) into an outcome.
pub fn parse_state(state: &str, output_budget: u64, max_depth: u32) -> DriveOutcome {
    if let Some(value_json) = state.strip_prefix('1') {
        if value_json.len() as u64 > output_budget {
            return DriveOutcome::Failed(GuestFailure {
                code: Some(CodeModeErrorCode::OutputLimitExceeded),
                message: format!(
                    "output limit exceeded: the return value is {} bytes, {output_budget} bytes of maxOutputBytes are left",
                    value_json.len()
                ),
            });
        }
        return match parse_guest_json(value_json, output_budget, max_depth) {
            Ok(v) => DriveOutcome::Completed(v),
            Err(e) => DriveOutcome::Failed(GuestFailure { code: None, message: format!("the return value cannot cross the bridge: {e}") }),
        };
    }
    match state.strip_prefix('0') {
        Some(failure_json) => DriveOutcome::Failed(classify_failure(failure_json)),
        None => DriveOutcome::Failed(GuestFailure {
            code: Some(CodeModeErrorCode::InternalError),
            message: "the guest prelude reported an unreadable state".to_string(),
        }),
    }
}

#[derive(Deserialize, Default)]
struct FailureData {
    #[serde(default)]
    name: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    stack: String,
    #[serde(default)]
    code: Option<String>,
}

/// Classifies an uncaught guest error (`{name, message, stack, code}` from the prelude).
///
/// - a host error keeps the code the host gave it (`nested_tool_failed`, …);
/// - QuickJS's `InternalError: out of memory` is `memory_limit_exceeded`;
/// - errors of the module guards (`module access denied…`) are `module_access_denied`;
/// - anything else is a plain exception without a code.
pub fn classify_failure(json: &str) -> GuestFailure {
    let data: FailureData = serde_json::from_str(json).unwrap_or_default();
    failure_from_parts(&data.name, &data.message, &data.stack, data.code.as_deref())
}

/// Builds a failure from an error's parts (also used by engines for exceptions outside the prelude).
pub fn failure_from_parts(name: &str, message: &str, stack: &str, code: Option<&str>) -> GuestFailure {
    let code = code.and_then(CodeModeErrorCode::parse).or_else(|| {
        if is_out_of_memory(name, message) {
            Some(CodeModeErrorCode::MemoryLimitExceeded)
        } else if is_module_denial(message) {
            Some(CodeModeErrorCode::ModuleAccessDenied)
        } else {
            None
        }
    });
    let mut text = if message.is_empty() { name.to_string() } else { format!("{name}: {message}") };
    let frames: Vec<&str> = stack.lines().map(str::trim).filter(|l| !l.is_empty()).take(MAX_STACK_LINES).collect();
    if !frames.is_empty() {
        text.push('\n');
        text.push_str(&frames.join("\n"));
    }
    if text.chars().count() > MAX_FAILURE_CHARS {
        text = text.chars().take(MAX_FAILURE_CHARS).collect::<String>() + "…";
    }
    GuestFailure { code, message: text }
}

/// Whether an error is QuickJS's out-of-memory error.
pub fn is_out_of_memory(name: &str, message: &str) -> bool {
    (name == "InternalError" || name == "Error") && message == "out of memory"
}

/// Whether an error comes from a module guard (static/dynamic import, `require`).
pub fn is_module_denial(message: &str) -> bool {
    message.starts_with(crate::MODULE_DENIED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states_parse() {
        assert_eq!(parse_state("1{\"a\":1}", 100, 64), DriveOutcome::Completed(json!({"a": 1})));
        let DriveOutcome::Failed(f) = parse_state("1\"xxxxxxxxxx\"", 5, 64) else { panic!() };
        assert_eq!(f.code, Some(CodeModeErrorCode::OutputLimitExceeded));
        let DriveOutcome::Failed(f) = parse_state("?", 5, 64) else { panic!() };
        assert_eq!(f.code, Some(CodeModeErrorCode::InternalError));
    }

    #[test]
    fn failures_are_classified() {
        let f = classify_failure(r#"{"name":"InternalError","message":"out of memory","stack":""}"#);
        assert_eq!(f.code, Some(CodeModeErrorCode::MemoryLimitExceeded));
        let f = classify_failure(r#"{"name":"Error","message":"module access denied: require(fs) is not available in code mode"}"#);
        assert_eq!(f.code, Some(CodeModeErrorCode::ModuleAccessDenied));
        let f = classify_failure(r#"{"name":"ToolError","message":"boom","code":"nested_tool_failed","stack":"at a\n at b\n"}"#);
        assert_eq!(f.code, Some(CodeModeErrorCode::NestedToolFailed));
        assert_eq!(f.message, "ToolError: boom\nat a\nat b");
        let f = classify_failure(r#"{"name":"TypeError","message":"x is not a function","code":"made_up"}"#);
        assert_eq!(f.code, None);
        let long = "y".repeat(5000);
        let f = failure_from_parts("Error", &long, "", None);
        assert!(f.message.chars().count() <= MAX_FAILURE_CHARS + 1);
    }
}
