//! # codemode-conformance
//!
//! The engine-generic conformance suite (DESIGN §7). Any [`GuestEngine`] — in this repository or
//! outside it — proves itself with one macro call in an integration test:
//!
//! ```text
//! codemode_conformance::conformance_suite!(std::sync::Arc::new(my_engine::MyEngine::new()));
//! ```
//!
//! That expands to one `#[test]` per corpus case (`cases/*.js`, expected results in `snapshots/` as
//! insta snapshots shared by every engine, so passing engines agree with each other — a differential
//! check) and one `#[test]` per behaviour test in [`behaviour`] (lookup failures, limits, cleanup,
//! hooks, concurrency).
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
//!   `stackLimit`), and says so on stderr when skipped.
//!
//! Layering: a test-support crate on top of the `codemode` facade (built without engines).
#![forbid(unsafe_code)]

pub mod behaviour;
mod tools;

pub use tools::conformance_tools;

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

/// A runtime over `engine` with the demo and conformance tools and a fresh memory store.
pub fn harness(engine: Arc<dyn GuestEngine>, config: CodeModeConfig) -> CodeMode {
    CodeMode::builder(config)
        .engine(engine)
        .local_tools(codemode::demo::demo_tools())
        .local_tools(conformance_tools())
        .build()
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

/// Runs one corpus case on `engine` and checks it against its snapshot.
pub fn run_case(name: &str, engine: Arc<dyn GuestEngine>) {
    let Some((_, source)) = CASES.iter().find(|(n, _)| *n == name) else {
        panic!("no conformance case `{name}`");
    };
    let spec = parse_case(source);
    let caps = engine.capabilities();
    for cap in &spec.requires {
        match caps.has(cap) {
            Some(true) => {}
            Some(false) => {
                // The engine does not claim this limit: the case does not apply (reported, not hidden).
                eprintln!("conformance case `{name}` skipped: engine `{}` does not claim `{cap}`", engine.name());
                return;
            }
            None => panic!("case `{name}` requires unknown capability `{cap}`"),
        }
    }
    let mut input = json!({ "code": source });
    if let (Some(o), Some(extra)) = (input.as_object_mut(), spec.exec.as_object()) {
        for (k, v) in extra {
            o.insert(k.clone(), v.clone());
        }
    }
    let input = match CodeModeExecInput::from_json(&input) {
        Ok(i) => i,
        Err(e) => panic!("bad @exec in case `{name}`: {e}"),
    };
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
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_input_file(format!("{}/cases/{name}.js", env!("CARGO_MANIFEST_DIR")));
    settings.set_description(format!("conformance case cases/{name}.js"));
    settings.bind(|| insta::assert_json_snapshot!(name, value));
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

/// Generates the whole suite for an engine: one `#[test]` per corpus case and per behaviour test.
///
/// `$engine` is an expression of type `Arc<dyn GuestEngine>` (or an `Arc` of a concrete engine); it
/// is evaluated once per test.
#[macro_export]
macro_rules! conformance_suite {
    ($engine:expr) => {
        mod conformance_corpus {
            #[allow(unused_imports)]
            use super::*;
            $crate::__for_each_case!(__conformance_case, $engine);
        }
        mod conformance_behaviour {
            #[allow(unused_imports)]
            use super::*;
            $crate::__behaviour_tests!($engine);
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_case {
    ($name:ident, $engine:expr) => {
        #[test]
        fn $name() {
            $crate::run_case(stringify!($name), $engine);
        }
    };
}
