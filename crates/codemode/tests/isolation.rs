//! Runs never share guest state (issue 14, SPEC B-series): `quickjs-wasi` starts every run from the
//! same pre-initialized image (with the catalog API already built in it) in a pooled instance slot
//! whose memory the allocator resets, and the catalog views are completed lazily per run. A hostile
//! run that plants globals, pollutes prototypes, fills its heap, completes the lazy `tools` / `MCP`
//! views and pulls catalog data must leave nothing the next run on the same runtime can see.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, RunContext};
use codemode_testing::demo::demo_tools;
use serde_json::{Value, json};

const ENGINES: [&str; 2] = ["quickjs-wasi", "quickjs"];

/// Plants state everywhere a run can reach, and reports what it saw of a previous planter.
const PLANT: &str = r#"
const seen = typeof globalThis.leaked !== "undefined" || ({}).polluted !== undefined;
globalThis.leaked = "secret-" + Math.random();
Object.prototype.polluted = "yes";
Array.prototype.extra = function () { return "hijacked"; };
JSON.parse = () => "hijacked";
globalThis.blob = "MARK".repeat(200000);
const keys = Object.keys(tools).length;
const frozen = Object.isFrozen(tools) && Object.isFrozen(MCP);
const all = ALL_TOOLS.length;
await tools.demo_echo({ planted: true });
return { seen, keys, frozen, all, first: Math.random() };
"#;

/// What a later run sees: nothing of the planter.
const CHECK: &str = r#"
return {
  leaked: typeof globalThis.leaked,
  polluted: ({}).polluted === undefined ? "clean" : "POLLUTED",
  arrayExtra: typeof [].extra,
  parse: JSON.parse("[1]").length === 1 ? "intact" : "HIJACKED",
  blob: typeof globalThis.blob,
  echo: (await tools.demo_echo({ check: 1 })).check,
  first: Math.random(),
};
"#;

fn runtime(engine: &str) -> CodeMode {
    let config = CodeModeConfig { timeout_ms: 10_000, ..CodeModeConfig::enabled() };
    CodeMode::builder(config).engine_name(engine).local_tools(demo_tools()).build()
}

fn value(r: &CodeModeResult) -> Value {
    assert!(matches!(r, CodeModeResult::Completed { .. }), "{}", r.to_json());
    r.to_json()["value"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_never_sees_a_previous_runs_globals_prototypes_or_heap() {
    for engine in ENGINES {
        let cm = runtime(engine);
        let ctx = RunContext::session("isolation");
        let mut randoms = Vec::new();
        // Interleaved many times, so pooled instance slots are reused by planters and checkers alike.
        for round in 0..12 {
            let planted = value(&cm.exec(&ctx, &CodeModeExecInput::code(PLANT)).await);
            assert_eq!(planted["seen"], json!(false), "{engine} round {round}: a planter saw an earlier one");
            assert_eq!(planted["frozen"], json!(true), "{engine}");
            assert!(planted["keys"].as_u64().unwrap() > 4 && planted["all"].as_u64().unwrap() > 0, "{engine}");
            let checked = value(&cm.exec(&ctx, &CodeModeExecInput::code(CHECK)).await);
            assert_eq!(
                checked,
                json!({
                    "leaked": "undefined",
                    "polluted": "clean",
                    "arrayExtra": "undefined",
                    "parse": "intact",
                    "blob": "undefined",
                    "echo": 1,
                    "first": checked["first"].clone(),
                }),
                "{engine} round {round}"
            );
            randoms.push(planted["first"].as_f64().unwrap());
            randoms.push(checked["first"].as_f64().unwrap());
        }
        // Math.random is reseeded per run: a baked image must not replay one sequence.
        randoms.sort_by(f64::total_cmp);
        randoms.dedup();
        assert_eq!(randoms.len(), 24, "{engine}: runs repeated a Math.random sequence");
    }
}
