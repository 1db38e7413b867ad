//! The engine-agnostic drive step (docs/src/engines.md `drive`): deliver settled requests, run jobs until
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
    /// Arms the engine's interrupt for `cancel` too (see [`DriveInput::cancel`]): once it is set, the
    /// guest stops as at the deadline. Engines without an interrupt keep the default (ignore it).
    fn set_cancel(&mut self, cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>) {
        let _ = cancel;
    }
    /// Compiles `wrapped` (see [`crate::wrap_code`]) and passes the function to the prelude's `run`.
    fn start_cell(&mut self, wrapped: &str) -> Result<(), VmFault>;
    /// Calls the prelude's `settle(id, ok, json)`.
    fn settle(&mut self, id: RequestId, ok: bool, json: &str) -> Result<(), VmFault>;
    /// Runs pending jobs until none is left.
    fn run_jobs(&mut self) -> Result<(), VmFault>;
    /// Calls the prelude's `poll()`: `None` while the cell runs, else its state string.
    fn poll(&mut self) -> Result<Option<String>, VmFault>;
    /// A cell's first step when nothing is delivered in it: [`start_cell`](Self::start_cell),
    /// [`run_jobs`](Self::run_jobs), [`poll`](Self::poll). An engine may do the three in one call
    /// into its guest (quickjs-wasi does: each call into a fresh wasm instance, and each export it
    /// looks up, has a cost of its own).
    fn start_and_poll(&mut self, wrapped: &str) -> Result<Option<String>, VmFault> {
        self.start_cell(wrapped)?;
        self.run_jobs()?;
        self.poll()
    }
    /// A step's end: [`settle`](Self::settle) of `last` (the step's last delivery, if any),
    /// [`run_jobs`](Self::run_jobs), [`poll`](Self::poll). An engine may do the three in one call
    /// into its guest (quickjs-wasi does: each call into a wasm instance costs the host a few
    /// hundred instructions of entry and exit, and a nested call's step made three).
    fn settle_and_poll(&mut self, last: Option<(RequestId, bool, &str)>) -> Result<Option<String>, VmFault> {
        if let Some((id, ok, json)) = last {
            self.settle(id, ok, json)?;
        }
        self.run_jobs()?;
        self.poll()
    }
    /// Whether the engine's host primitive can answer a request with its settled outcome
    /// ([`HostCallResult::Settled`](crate::HostCallResult::Settled)): only then does [`drive`]
    /// give the bridge the step's [`DriveInput::answerer`]. The default is no.
    fn answers_inline(&self) -> bool {
        false
    }
    /// Gives access to the bridge host.
    fn with_bridge<R>(&mut self, f: impl FnOnce(&mut BridgeHost) -> R) -> R;
    /// Whether the guest heap refused an allocation during this drive step. Used to tell QuickJS's
    /// last-resort out-of-memory signal (it throws `null` when it cannot even allocate the error
    /// object) from a plain `throw null`.
    fn memory_refused(&mut self) -> bool;
}

/// Message of a `memory_limit_exceeded` failure whose error object could not be allocated.
pub const OUT_OF_MEMORY_MESSAGE: &str = "InternalError: out of memory (the guest heap reached memoryLimitBytes)";

/// Runs one drive step. `unstarted` holds the wrapped cell source until the first step starts it.
pub fn drive<V: GuestVm>(
    vm: &mut V,
    unstarted: &mut Option<String>,
    mut input: DriveInput,
) -> Result<DriveReport, EngineError> {
    let answerer = if vm.answers_inline() { input.answerer.take() } else { None };
    vm.with_bridge(|b| {
        b.begin_drive(input.output_budget);
        b.set_boot_source(input.boot_source.clone());
        b.set_answerer(answerer);
    });
    vm.set_deadline(input.deadline);
    vm.set_cancel(input.cancel.clone());
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
        (None, Err(VmFault::Failure(f))) => DriveOutcome::Failed(refine_null_throw(vm, f)),
        (None, Ok(None)) => DriveOutcome::Pending,
        (None, Ok(Some(state))) => {
            let (budget, limits) =
                vm.with_bridge(|b| (input.output_budget.saturating_sub(b.output_used()), *b.limits()));
            match parse_state(&state, budget, limits.max_json_depth) {
                DriveOutcome::Failed(f) => DriveOutcome::Failed(refine_null_throw(vm, f)),
                other => other,
            }
        }
    };
    Ok(DriveReport { outcome, requests, output })
}

/// QuickJS throws `null` when it runs out of memory while creating the error object; after a refused
/// allocation, an uncaught `null` is an out-of-memory failure.
fn refine_null_throw<V: GuestVm>(vm: &mut V, f: GuestFailure) -> GuestFailure {
    if f.code.is_none() && f.message == NULL_THROWN && vm.memory_refused() {
        GuestFailure { code: Some(CodeModeErrorCode::MemoryLimitExceeded), message: OUT_OF_MEMORY_MESSAGE.to_string() }
    } else {
        f
    }
}

/// How an uncaught `null` is reported (see [`failure_from_parts`]).
const NULL_THROWN: &str = "Uncaught: null";

fn step<V: GuestVm>(vm: &mut V, unstarted: &mut Option<String>, input: &DriveInput) -> Result<Option<String>, VmFault> {
    if let Some(code) = unstarted.take() {
        if input.deliveries.is_empty() {
            return vm.start_and_poll(&code);
        }
        vm.start_cell(&code)?;
    }
    // Delivered in order; the last goes with the jobs and the poll (see `settle_and_poll`).
    let (last, earlier) = match input.deliveries.split_last() {
        Some((last, earlier)) => (Some(last), earlier),
        None => (None, &[][..]),
    };
    for d in earlier {
        if let Some((ok, json)) = vm.with_bridge(|b| b.prepare_delivery(d)) {
            vm.settle(d.id, ok, &json)?;
        }
    }
    let last = last.and_then(|d| vm.with_bridge(|b| b.prepare_delivery(d)).map(|(ok, json)| (d.id, ok, json)));
    vm.settle_and_poll(last.as_ref().map(|(id, ok, json)| (*id, *ok, json.as_str())))
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
            Err(e) => DriveOutcome::Failed(GuestFailure {
                code: None,
                message: format!("the return value cannot cross the bridge: {e}"),
            }),
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
    // JSON.stringify escapes a lone surrogate (`\ud800`), which serde_json refuses: as U+FFFD.
    let json = crate::adapter::replace_lone_surrogates(json);
    let data: FailureData = serde_json::from_str(&json).unwrap_or_default();
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
    for frame in guest_frames(stack) {
        text.push('\n');
        text.push_str(&frame);
    }
    if text.chars().count() > MAX_FAILURE_CHARS {
        text = text.chars().take(MAX_FAILURE_CHARS).collect::<String>() + "…";
    }
    GuestFailure { code, message: text }
}

/// The stack frames worth showing the model: the cell's own (prelude frames are hidden), at most
/// [`MAX_STACK_LINES`], with runs of identical frames (deep recursion) collapsed into one line.
fn guest_frames(stack: &str) -> Vec<String> {
    let mut out: Vec<(String, usize)> = Vec::new();
    for line in stack.lines().map(str::trim).filter(|l| !l.is_empty() && !l.contains(crate::PRELUDE_FILENAME)) {
        let full = out.len() == MAX_STACK_LINES;
        match out.last_mut() {
            Some((last, n)) if last == line => *n += 1,
            _ if full => break,
            _ => out.push((line.to_string(), 1)),
        }
    }
    out.into_iter().map(|(l, n)| if n > 1 { format!("{l} (repeated {n} times)") } else { l }).collect()
}

/// Whether an error is QuickJS's out-of-memory error.
pub fn is_out_of_memory(name: &str, message: &str) -> bool {
    (name == "InternalError" || name == "Error") && message == "out of memory"
}

/// Whether an error comes from a module guard (static/dynamic import, `require`).
/// QuickJS's own message when `import()` finds no module loader (there is none in code mode).
pub fn is_module_denial(message: &str) -> bool {
    message.starts_with(crate::MODULE_DENIED_PREFIX) || message.starts_with("could not load module")
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
        let f = classify_failure(
            r#"{"name":"Error","message":"module access denied: require(fs) is not available in code mode"}"#,
        );
        assert_eq!(f.code, Some(CodeModeErrorCode::ModuleAccessDenied));
        let f = classify_failure(
            r#"{"name":"ToolError","message":"boom","code":"nested_tool_failed","stack":"at a\n at b\n"}"#,
        );
        assert_eq!(f.code, Some(CodeModeErrorCode::NestedToolFailed));
        assert_eq!(f.message, "ToolError: boom\nat a\nat b");
        let f = failure_from_parts(
            "RangeError",
            "deep",
            "at f (<cell>:1)\nat f (<cell>:1)\nat f (<cell>:1)\nat g (<cell>:2)\nat run (<codemode-prelude>:9)",
            None,
        );
        assert_eq!(f.message, "RangeError: deep\nat f (<cell>:1) (repeated 3 times)\nat g (<cell>:2)");
        let f = classify_failure(r#"{"name":"ReferenceError","message":"could not load module 'fs'"}"#);
        assert_eq!(f.code, Some(CodeModeErrorCode::ModuleAccessDenied));
        let f = classify_failure(r#"{"name":"TypeError","message":"x is not a function","code":"made_up"}"#);
        assert_eq!(f.code, None);
        let long = "y".repeat(5000);
        let f = failure_from_parts("Error", &long, "", None);
        assert!(f.message.chars().count() <= MAX_FAILURE_CHARS + 1);
    }
}
