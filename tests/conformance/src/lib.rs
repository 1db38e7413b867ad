//! # codemode-conformance
//!
//! The engine-generic conformance suite (docs/src/engines.md). Any [`GuestEngine`] — in this repository or
//! outside it — proves itself with one macro call in an integration test:
//!
//! ```text
//! codemode_conformance::conformance_suite!(std::sync::Arc::new(my_engine::MyEngine::new()));
//! ```
//!
//! in a test target with `harness = false` (`[[test]] name = "conformance" harness = false` in the
//! engine's `Cargo.toml`). That expands to a `main` running one trial per corpus case (`cases/*.js`,
//! expected results in `snapshots/`, shared by every engine, so passing engines agree with each
//! other — a differential check) and one per behaviour test in [`behaviour`] (lookup failures,
//! limits, cleanup, hooks, concurrency, resuming a run in a fresh engine instance); see [`suite`].
//!
//! **For engines outside this repository.** Depend on the suite as a dev-dependency. The cases and
//! their expected results are compiled into it: nothing is read from or written to the suite's
//! directory at test time, and a mismatch is reported as a readable diff. Failures are compared by
//! error name and code, not by an engine's wording. Tests of a limit run only when the engine's
//! [`GuestEngine::capabilities`] claim it — the others are reported as ignored, with what they need;
//! TypeScript cases need the `typescript` feature (on by default; it builds deno_ast). An engine that does not pass everything yet lists the cases
//! in a strict baseline: `conformance_suite!(engine, expected_failures = ["case"])`.
//!
//! **For the suite's maintainers.** `CODEMODE_CONFORMANCE_BLESS=1 cargo test -p <engine crate>`
//! rewrites `snapshots/` from the engine under test (review the diff).
//!
//! A case file may start with directives:
//! - `// @config {json}`: `tools.codeMode` fields for the run (merged over `{enabled: true}`);
//! - `// @exec {json}`: extra `exec` input fields (e.g. `{"restartSafe": true}`);
//! - `// @steps`: snapshot every result of the run (`exec` and each `wait`), not only the last;
//! - `// @timing`: the run suspends on wall-clock time, so the number of `wait`s is not fixed:
//!   `waitCount` and snapshot events are redacted;
//! - `// @redact-error`: the failure message legitimately differs between engines (e.g. whether
//!   QuickJS could still allocate the out-of-memory error object); only status and code are compared;
//! - `// @requires memoryLimit, interrupt`: the case tests a limit; it runs only on engines whose
//!   `GuestEngine::capabilities` claim it (`serializedSnapshots`, `memoryLimit`, `interrupt`,
//!   `stackLimit`); on other engines it is reported as ignored.
//!
//! Layering: a test-support crate on top of the `codemode` facade (built without engines).
#![forbid(unsafe_code)]

pub mod behaviour;
pub mod suite;

#[doc(hidden)]
pub use codemode::GuestEngine as __GuestEngine;
mod tools;

pub use tools::{conformance_namespaces, conformance_tools};

use codemode::{
    CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, GuestEngine, RunContext,
};
use serde_json::{Value, json};
use std::sync::Arc;

include!(concat!(env!("OUT_DIR"), "/cases.rs"));

/// Most `wait` calls a test makes before giving up on a run.
pub const MAX_STEPS: usize = 60;

/// The session every conformance run belongs to.
pub const SESSION: &str = "conformance-session";

/// A multi-threaded tokio runtime for one test.
pub fn tokio_runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => panic!("cannot start a tokio runtime: {e}"),
    }
}

/// A config with code mode enabled plus `overrides` (a `tools.codeMode` object).
pub fn config(overrides: Value) -> CodeModeConfig {
    let mut obj = json!({ "enabled": true });
    if let (Some(o), Some(extra)) = (obj.as_object_mut(), overrides.as_object()) {
        for (k, v) in extra {
            o.insert(k.clone(), v.clone());
        }
    }
    match CodeModeConfig::from_value(Some(&obj), "tools.codeMode") {
        Ok(c) => c,
        Err(e) => panic!("bad test config: {e}"),
    }
}

/// A runtime over `engine` with the demo and conformance tools, their namespaces, and a fresh memory
/// store.
pub fn harness(engine: Arc<dyn GuestEngine>, config: CodeModeConfig) -> CodeMode {
    CodeMode::builder(config)
        .engine(engine)
        .local_tools(codemode_demo::demo_tools())
        .local_tools(conformance_tools())
        .namespaces(Arc::new(conformance_namespaces()))
        .build()
}

/// [`harness`] plus `plugin:conformance:held`, a mock tool (`codemode_testing::mock`): each call
/// waits until the test answers it through the returned handle, so tests order events without
/// sleeping.
pub fn harness_with_held(
    engine: Arc<dyn GuestEngine>,
    config: CodeModeConfig,
) -> (CodeMode, codemode_testing::mock::Handle) {
    let (held, handle) = codemode_testing::mock::mock(codemode::ToolDefinition::new(
        codemode::ToolSource::Plugin,
        "conformance",
        "held",
    ));
    let mut tools = codemode::LocalTools::new();
    tools.add(held);
    let cm = CodeMode::builder(config)
        .engine(engine)
        .local_tools(codemode_demo::demo_tools())
        .local_tools(conformance_tools())
        .local_tools(tools)
        .namespaces(Arc::new(conformance_namespaces()))
        .build();
    (cm, handle)
}

/// The context of [`SESSION`].
pub fn ctx() -> RunContext {
    RunContext::session(SESSION)
}

/// Runs `input` with `exec`, then `wait` until the run is no longer `waiting`. Returns every result.
pub async fn run_to_end(cm: &CodeMode, input: &CodeModeExecInput) -> Vec<CodeModeResult> {
    let ctx = ctx();
    let mut steps = vec![cm.exec(&ctx, input).await];
    while steps.len() <= MAX_STEPS {
        let Some(run_id) = steps.last().and_then(|r| r.run_id()).map(str::to_string) else {
            break;
        };
        steps.push(cm.wait(&ctx, &CodeModeWaitInput::new(run_id)).await);
    }
    steps
}

/// Parsed directives of a case file.
#[derive(Debug, Clone, Default)]
pub struct CaseSpec {
    /// `@config`.
    pub config: Value,
    /// `@exec`.
    pub exec: Value,
    /// `@steps`.
    pub steps: bool,
    /// `@timing`.
    pub timing: bool,
    /// `@redact-error`.
    pub redact_error: bool,
    /// `@requires cap, cap`: engine capabilities the case needs (see `EngineCapabilities::has`).
    pub requires: Vec<String>,
}

/// Reads the directives at the top of a case.
pub fn parse_case(source: &str) -> CaseSpec {
    let mut spec = CaseSpec { config: json!({}), exec: json!({}), ..CaseSpec::default() };
    for line in source.lines().take_while(|l| l.starts_with("//")) {
        let line = line.trim_start_matches('/').trim();
        let parse = |rest: &str| match serde_json::from_str::<Value>(rest) {
            Ok(v) => v,
            Err(e) => panic!("bad directive `{line}`: {e}"),
        };
        if let Some(rest) = line.strip_prefix("@config") {
            spec.config = parse(rest);
        } else if let Some(rest) = line.strip_prefix("@exec") {
            spec.exec = parse(rest);
        } else if line == "@steps" {
            spec.steps = true;
        } else if line == "@timing" {
            spec.timing = true;
        } else if line == "@redact-error" {
            spec.redact_error = true;
        } else if let Some(rest) = line.strip_prefix("@requires") {
            spec.requires = rest.split(',').map(|c| c.trim().to_string()).filter(|c| !c.is_empty()).collect();
        }
    }
    spec
}

/// Runs one corpus case on `engine` and checks it against its expected result (panics on a
/// mismatch, with a diff).
pub fn run_case(name: &str, engine: Arc<dyn GuestEngine>) {
    run_case_with_baseline(name, engine, &[]);
}

/// [`run_case`] against an engine's expected-failures baseline: a case listed there must fail (a
/// listed case that passes fails the test as a stale entry); an unlisted case must pass.
pub fn run_case_with_baseline(name: &str, engine: Arc<dyn GuestEngine>, expected_failures: &[&str]) {
    let listed = expected_failures.contains(&name);
    match (check_case(name, engine), listed) {
        (Ok(()), false) => {}
        (Err(mismatch), false) => panic!("{mismatch}"),
        (Err(mismatch), true) => eprintln!("conformance case `{name}` fails as the baseline expects:\n{mismatch}"),
        (Ok(()), true) => panic!(
            "conformance case `{name}` passes but is listed in the engine's expected-failures baseline: remove the \
             stale entry"
        ),
    }
}

/// Checks that every baseline entry names a real case (a typo must not hide a failure).
pub fn check_baseline(expected_failures: &[&str]) {
    for name in expected_failures {
        assert!(CASES.iter().any(|(n, _)| n == name), "baseline entry `{name}` names no conformance case");
    }
}

/// Whether expected results are being (re)written instead of checked: `CODEMODE_CONFORMANCE_BLESS=1`,
/// for the suite's own maintainers (it writes into the suite's `snapshots/`).
fn blessing() -> bool {
    std::env::var("CODEMODE_CONFORMANCE_BLESS").is_ok_and(|v| v == "1")
}

/// How a conformance case failed: a missing case or snapshot, an unknown capability, or a result
/// that differs from the expected one (with the diff).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CaseMismatch(pub String);

impl From<String> for CaseMismatch {
    fn from(s: String) -> Self {
        CaseMismatch(s)
    }
}

/// Runs one case and compares its result with the expected one; `Err` describes the mismatch.
pub fn check_case(name: &str, engine: Arc<dyn GuestEngine>) -> Result<(), CaseMismatch> {
    // A missing case or an unknown capability is a mismatch; a need the engine does not claim is
    // not (the suite lists such a case as ignored, and runs it here only when asked to).
    suite::case_unmet(name, &engine.capabilities())?;
    let Some((_, source)) = CASES.iter().find(|(n, _)| *n == name) else {
        return Err(format!("no conformance case `{name}`").into());
    };
    let spec = parse_case(source);
    let mut input = json!({ "code": source });
    if let (Some(o), Some(extra)) = (input.as_object_mut(), spec.exec.as_object()) {
        for (k, v) in extra {
            o.insert(k.clone(), v.clone());
        }
    }
    let input = CodeModeExecInput::from_json(&input).map_err(|e| format!("bad @exec in case `{name}`: {e}"))?;
    let cm = harness(engine, config(spec.config.clone()));
    let steps = tokio_runtime().block_on(run_to_end(&cm, &input));
    let value: Value = if spec.steps {
        Value::Array(steps.iter().map(CodeModeResult::to_json).collect())
    } else {
        steps.last().map(CodeModeResult::to_json).unwrap_or(Value::Null)
    };
    let mut value = redact(value, spec.timing);
    if spec.redact_error
        && let Some(e) = value.get_mut("error")
    {
        *e = json!("[engine-specific message]");
    }
    if blessing() {
        return write_expected(name, &value).map_err(CaseMismatch);
    }
    let Some((_, text)) = EXPECTED.iter().find(|(n, _)| *n == name) else {
        return Err(format!("conformance case `{name}` has no expected result (snapshots/{name}.snap)").into());
    };
    let expected = expected_value(text).map_err(|e| format!("snapshots/{name}.snap is unreadable: {e}"))?;
    let (want, got) = (normalize(expected), normalize(value));
    if want == got {
        return Ok(());
    }
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let (want, got) = (pretty(&want), pretty(&got));
    let diff = similar::TextDiff::from_lines(&want, &got);
    Err(format!(
        "conformance case `{name}` (cases/{name}.js) differs from its expected result (snapshots/{name}.snap); \
         `-` expected, `+` this engine (error messages are compared by error name and code only):\n{}",
        diff.unified_diff().context_radius(4).header("expected", "actual")
    )
    .into())
}

/// The JSON of a snapshot file: what follows its second `---` line.
fn expected_value(text: &str) -> Result<Value, String> {
    let body = text
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---\n"))
        .map(|(_, body)| body)
        .ok_or("no `---` header")?;
    serde_json::from_str(body).map_err(|e| e.to_string())
}

fn write_expected(name: &str, value: &Value) -> Result<(), String> {
    let path = format!("{}/snapshots/{name}.snap", env!("CARGO_MANIFEST_DIR"));
    let json = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
    let text = format!(
        "---\nsource: tests/conformance/src/lib.rs\ndescription: conformance case cases/{name}.js\nexpression: value\n\
         input_file: tests/conformance/cases/{name}.js\n---\n{json}\n"
    );
    std::fs::write(&path, text).map_err(|e| format!("cannot write {path}: {e}"))
}

/// What the comparison looks at: a failure's error is compared by its name (the text before the
/// first `:` of its first line) and its code, not by an engine's wording or stack frames
/// (QuickJS's `unexpected token in expression` is not the contract).
pub fn normalize(mut v: Value) -> Value {
    fn result(r: &mut Value) {
        let failed = r.get("status").and_then(Value::as_str) == Some("failed");
        if let (true, Some(e)) = (failed, r.get_mut("error")) {
            let first = e.as_str().and_then(|t| t.lines().next()).unwrap_or("").to_string();
            let name = first.split_once(':').map(|(n, _)| n.trim().to_string()).unwrap_or(first);
            *e = Value::String(name);
            // The bytes returned count the failure's message, whose wording is the engine's.
            if let Some(b) = r.get_mut("telemetry").and_then(|t| t.get_mut("returnedBytes")) {
                *b = json!("[with the engine's message]");
            }
        }
    }
    match &mut v {
        Value::Array(steps) => steps.iter_mut().for_each(result),
        other => result(other),
    }
    v
}

/// Replaces values that legitimately differ between engines or runs.
pub fn redact(mut v: Value, timing: bool) -> Value {
    fn telemetry(t: &mut Value, timing: bool) {
        let Some(m) = t.as_object_mut() else { return };
        for (k, x) in m.iter_mut() {
            match k.as_str() {
                "durationMs" => *x = json!("[ms]"),
                "engine" => *x = json!("[engine]"),
                "waitCount" | "snapshotEvents" if timing => *x = json!("[timing]"),
                "snapshotEvents" => {
                    for e in x.as_array_mut().into_iter().flatten() {
                        if let Some(b) = e.get_mut("bytes") {
                            *b = json!("[bytes]");
                        }
                    }
                }
                _ => {}
            }
        }
    }
    fn result(r: &mut Value, timing: bool) {
        let Some(m) = r.as_object_mut() else { return };
        for (k, x) in m.iter_mut() {
            match k.as_str() {
                "runId" => *x = json!("[run id]"),
                "telemetry" => telemetry(x, timing),
                "pendingToolCalls" => {
                    for p in x.as_array_mut().into_iter().flatten() {
                        if let Some(e) = p.get_mut("elapsedMs") {
                            *e = json!("[ms]");
                        }
                    }
                }
                _ => {}
            }
        }
    }
    match &mut v {
        Value::Array(steps) => steps.iter_mut().for_each(|s| result(s, timing)),
        other => result(other, timing),
    }
    v
}

/// Generates the `main` of an engine's conformance test target (`harness = false`): one trial per
/// corpus case and per behaviour test ([`suite::trials`]).
///
/// `$engine` is an expression of type `Arc<dyn GuestEngine>` (or an `Arc` of a concrete engine); it
/// is evaluated once per trial (twice where a test moves a run to a fresh instance).
///
/// An engine that does not yet pass every case lists them: `conformance_suite!(engine,
/// expected_failures = ["case_a", "case_b"])`. A listed case that fails passes (with its mismatch
/// on stderr); a listed case that passes fails (stale entry); an unlisted failure fails.
#[macro_export]
macro_rules! conformance_suite {
    ($engine:expr) => {
        $crate::conformance_suite!($engine, expected_failures = []);
    };
    ($engine:expr, expected_failures = [$($fail:literal),* $(,)?]) => {
        fn main() -> std::process::ExitCode {
            let make = || -> std::sync::Arc<dyn $crate::__GuestEngine> { $engine };
            $crate::suite::main(std::sync::Arc::new(make), &[$($fail),*])
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorded expected results agree with the hand-written contract
    /// (`contract.json`, written from the contract and the case sources, not from an engine): a bug every
    /// engine shares, recorded into `snapshots/`, fails here.
    #[test]
    fn snapshots_keep_the_hand_written_contract() {
        let contract: serde_json::Value = serde_json::from_str(include_str!("../contract.json")).unwrap();
        let entries = contract.as_object().unwrap();
        let mut checked = 0;
        for (name, want) in entries.iter().filter(|(k, _)| !k.starts_with('_')) {
            assert!(CASES.iter().any(|(n, _)| n == name), "contract.json names no case `{name}`");
            let (_, text) =
                EXPECTED.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("`{name}` has no snapshot"));
            let mut got = expected_value(text).unwrap();
            // A `@steps` case records every result: the contract is about the last.
            if let serde_json::Value::Array(steps) = got {
                got = steps.last().cloned().unwrap_or_default();
            }
            assert_eq!(got["status"], want["status"], "`{name}`: status");
            if let Some(code) = want.get("code") {
                assert_eq!(got.get("code").cloned().unwrap_or(serde_json::Value::Null), *code, "`{name}`: code");
            }
            if let Some(value) = want.get("value") {
                assert_eq!(got["value"], *value, "`{name}`: value");
            }
            checked += 1;
        }
        assert!(checked >= 30, "the contract covers {checked} cases");
    }
    use codemode_core::engine::{EngineError, GuestInstance, GuestLimits, GuestProgram, Snapshot};

    /// An engine that cannot run anything: every case fails against it.
    struct Broken;

    impl GuestEngine for Broken {
        fn name(&self) -> &str {
            "broken"
        }
        fn serializes_snapshots(&self) -> bool {
            false
        }
        fn start(&self, _: &GuestProgram, _: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
            Err(EngineError::Unavailable("broken on purpose".into()))
        }
        fn restore(&self, _: Snapshot, _: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
            Err(EngineError::Restore("broken on purpose".into()))
        }
    }

    #[test]
    fn errors_compare_by_name_and_code() {
        let a = json!({"status": "failed", "error": "SyntaxError: unexpected token in expression: ')'\nat <cell>:1:3", "code": null});
        let b = json!({"status": "failed", "error": "SyntaxError: expected expression, got ')'", "code": null});
        assert_eq!(normalize(a.clone()), normalize(b));
        let c = json!({"status": "failed", "error": "TypeError: x", "code": null});
        assert_ne!(normalize(a), normalize(c));
        let ok = json!({"status": "completed", "value": "Error: kept as is"});
        assert_eq!(normalize(ok.clone()), ok);
        assert_eq!(expected_value("---\nsource: x\n---\n{\"a\": 1}\n"), Ok(json!({"a": 1})));
        assert!(expected_value("{}").is_err());
    }

    #[test]
    fn the_baseline_is_strict() {
        // The cases a broken engine fails: unlisted, the test fails with a diff; listed, it passes.
        let failure = std::panic::catch_unwind(|| run_case_with_baseline("return_value", Arc::new(Broken), &[]));
        assert!(failure.is_err(), "an unlisted failure must fail");
        run_case_with_baseline("return_value", Arc::new(Broken), &["return_value"]);
        let mismatch = check_case("return_value", Arc::new(Broken)).unwrap_err().0;
        assert!(
            mismatch.contains("-  \"status\": \"completed\"") && mismatch.contains("runtime_unavailable"),
            "{mismatch}"
        );
        // A limit the engine does not claim makes the case not apply: reported as ignored, with
        // what it needs, rather than run or passed.
        let none = Broken.capabilities();
        assert_eq!(suite::case_unmet("infinite_loop", &none), Ok(Some("needs interrupt".into())));
        assert_eq!(suite::case_unmet("return_value", &none), Ok(None));
        assert!(suite::case_unmet("no_such_case", &none).is_err());
        let trials = suite::trials(Arc::new(|| -> Arc<dyn GuestEngine> { Arc::new(Broken) }), &[]);
        let ignored: Vec<&str> = trials.iter().filter(|t| t.has_ignored_flag()).map(|t| t.name()).collect();
        for name in ["corpus::infinite_loop", "behaviour::timeout_cleans_up", "behaviour::resume_in_a_fresh_engine"] {
            assert!(ignored.contains(&name), "{name} is reported as ignored on an engine claiming nothing");
        }
        assert!(!ignored.contains(&"corpus::return_value") && !ignored.contains(&"behaviour::wait_is_exclusive"));
        assert_eq!(trials.len(), 1 + CASES.len() + suite::BEHAVIOURS.len());
        check_baseline(&["return_value"]);
        assert!(std::panic::catch_unwind(|| check_baseline(&["no_such_case"])).is_err());
    }
}
