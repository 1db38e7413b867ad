//! Runs never share guest state (contract B1–B10): `quickjs-wasi` starts every run from the
//! same pre-initialized image (with the catalog API already built in it) in a pooled instance slot
//! whose memory the allocator resets, and the catalog views are completed lazily per run. A hostile
//! run that plants globals, pollutes prototypes, fills its heap, completes the lazy `tools` / `MCP`
//! views and pulls catalog data must leave nothing the next run on the same runtime can see.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeResult, Engines, RunContext, RunId,
};
use codemode_demo::demo_tools;
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
    codemode_testing::runtime(engine, 10_000)
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

/// Hostile runs for the native engine's reused VMs, each ending a different way a run can end.
const HOSTILE_NATIVE: [&str; 5] = [
    // Completes with a finalizer registered, a registry symbol made, a job queued after its result.
    r#"globalThis.leaked = 1;
const reg = new FinalizationRegistry(() => { globalThis.finalized = 1; });
reg.register({}, 1);
globalThis.sym = Symbol.for("planted");
Promise.resolve().then(() => { globalThis.late = 1; });
return 1;"#,
    // Fails at the memory limit (its VM has carved too much to be reused: it is dropped).
    r#"globalThis.leaked = 2;
const a = [];
for (;;) a.push("x".repeat(1 << 16) + a.length);"#,
    // Stopped at the deadline, with a prototype polluted.
    r#"globalThis.leaked = 3;
Object.prototype.polluted = 1;
for (;;) {}"#,
    // Holds 3 MiB of an 8 MiB heap when it completes (that the accounting then starts again from
    // the image is checked on one VM by the engine's own tests).
    r#"globalThis.leaked = 4;
globalThis.big = "y".repeat(3 << 20) + Math.random();
return big.length;"#,
    // Suspended, then aborted (its VM is released from the suspended state).
    r#"globalThis.leaked = 5;
Array.prototype.extra = 1;
await yield_control();
globalThis.resumed = 1;
return 5;"#,
];

/// The native engine reuses a VM by copying the image of its heap taken after boot back over the
/// whole heap (QuickJS's runtime and context structures, atoms, the job queue, the collector's lists
/// and the allocator's state all live in it). Whatever way a run ended — completed with jobs and
/// finalizers pending, refused at the memory limit, stopped at the deadline, suspended and aborted —
/// the next run on a reused VM sees none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_vms_reused_from_their_image_keep_nothing_of_earlier_runs() {
    let config = CodeModeConfig { timeout_ms: 300, memory_limit_bytes: 8 << 20, ..CodeModeConfig::enabled() };
    let cm = CodeMode::builder(config).engine_name("quickjs").local_tools(demo_tools()).build();
    let ctx = RunContext::session("reuse");
    let reused_before = codemode_engine_quickjs::reused_vms();
    let check = r#"return {
  leaked: typeof globalThis.leaked, finalized: typeof globalThis.finalized, late: typeof globalThis.late,
  resumed: typeof globalThis.resumed, big: typeof globalThis.big, sym: typeof globalThis.sym,
  polluted: ({}).polluted === undefined, extra: [].extra === undefined,
  echo: (await tools.demo_echo({ n: 1 })).n,
};"#;
    let clean = json!({
        "leaked": "undefined", "finalized": "undefined", "late": "undefined", "resumed": "undefined",
        "big": "undefined", "sym": "undefined", "polluted": true, "extra": true, "echo": 1,
    });
    for round in 0..3 {
        for (i, code) in HOSTILE_NATIVE.iter().enumerate() {
            let r = cm.exec(&ctx, &CodeModeExecInput::code(*code)).await;
            match i {
                0 => assert_eq!(value(&r), json!(1), "round {round}"),
                1 => assert_eq!(r.error_code(), Some(CodeModeErrorCode::MemoryLimitExceeded), "{}", r.to_json()),
                2 => assert_eq!(r.error_code(), Some(CodeModeErrorCode::Timeout), "{}", r.to_json()),
                3 => assert!(value(&r).as_u64().unwrap() > 3 << 20, "round {round}"),
                _ => {
                    let id = RunId::parse(r.run_id().expect("a waiting run")).unwrap();
                    assert!(cm.abort(&id).await, "round {round}: the suspended run is aborted");
                }
            }
            // Several checkers in a row: the pool hands out VMs released by hostile and clean runs.
            for _ in 0..3 {
                let seen = value(&cm.exec(&ctx, &CodeModeExecInput::code(check)).await);
                assert_eq!(seen, clean, "round {round}, after hostile run {i}");
            }
        }
    }
    assert!(
        codemode_engine_quickjs::reused_vms() > reused_before + 10,
        "the runs above were served by VMs reused from their image"
    );
}

/// Reused native VMs under concurrency: sixteen sessions at once alternate planting and checking,
/// so VMs are recycled on one worker while others run on the rest; no checker ever sees a planter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_runs_on_reused_native_vms_never_see_each_other() {
    let cm = std::sync::Arc::new(runtime("quickjs"));
    let reused_before = codemode_engine_quickjs::reused_vms();
    let mut tasks = Vec::new();
    for session in 0..16 {
        let cm = cm.clone();
        tasks.push(tokio::spawn(async move {
            let ctx = RunContext::session(format!("concurrent-{session}"));
            for round in 0..10 {
                let planted = value(&cm.exec(&ctx, &CodeModeExecInput::code(PLANT)).await);
                assert_eq!(planted["seen"], json!(false), "session {session} round {round}");
                let checked = value(&cm.exec(&ctx, &CodeModeExecInput::code(CHECK)).await);
                assert_eq!(
                    (
                        &checked["leaked"],
                        &checked["polluted"],
                        &checked["arrayExtra"],
                        &checked["parse"],
                        &checked["blob"]
                    ),
                    (&json!("undefined"), &json!("clean"), &json!("undefined"), &json!("intact"), &json!("undefined")),
                    "session {session} round {round}: {checked}"
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(codemode_engine_quickjs::reused_vms() > reused_before + 100, "the runs were served by reused VMs");
}

/// An instance built ahead of a first run (`Engines::prepare_ahead`, which the CLI calls as it
/// starts; the build goes on in the background) is taken by the first run with its limits, and by
/// that run only; it is as pristine as one built for the run (no guest code ever ran in it). A run
/// with other limits leaves it for the run it was built for and builds its own, and a build that
/// fails leaves the run to build (and fail) on its own instead of waiting for it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_built_ahead_serves_the_first_run_with_its_limits_only() {
    let taken = |engine: &str| match engine {
        "quickjs" => codemode_engine_quickjs::vms_taken_ahead(),
        _ => codemode_engine_wasi::instances_taken_ahead(),
    };
    let ctx = RunContext::session("ahead");
    for (i, engine) in ENGINES.into_iter().enumerate() {
        // Limits no other test here uses, so no other run can take these instances.
        let bytes = |mib: u64| (mib << 20) + 4096 * (i as u64 + 1);
        let config = |memory_limit_bytes| CodeModeConfig {
            memory_limit_bytes,
            runtime: engine.to_string(),
            ..CodeModeConfig::enabled()
        };
        let runtime = |config: &CodeModeConfig| {
            CodeMode::builder(config.clone()).engine_name(engine).local_tools(demo_tools()).build()
        };
        let before = taken(engine);

        // This returns once the build is under way on a thread of the engine's own, so the run
        // below most likely waits for it.
        let first = config(bytes(40));
        Engines::prepare_ahead(&first).unwrap();
        let cm = runtime(&first);
        let planted = value(&cm.exec(&ctx, &CodeModeExecInput::code(PLANT)).await);
        assert_eq!(planted["seen"], json!(false), "{engine}: the instance built ahead is pristine");
        assert_eq!(taken(engine), before + 1, "{engine}: the first run took the instance built ahead");
        let checked = value(&cm.exec(&ctx, &CodeModeExecInput::code(CHECK)).await);
        assert_eq!((&checked["leaked"], &checked["polluted"]), (&json!("undefined"), &json!("clean")), "{engine}");
        assert_eq!(taken(engine), before + 1, "{engine}: taken by one run only");

        let second = config(bytes(44));
        Engines::prepare_ahead(&second).unwrap();
        let other = runtime(&config(bytes(46)));
        assert_eq!(value(&other.exec(&ctx, &CodeModeExecInput::code("return 6 * 7")).await), json!(42));
        assert_eq!(taken(engine), before + 1, "{engine}: a run with other limits leaves it alone");
        let planted = value(&runtime(&second).exec(&ctx, &CodeModeExecInput::code(PLANT)).await);
        assert_eq!(planted["seen"], json!(false), "{engine}");
        assert_eq!(taken(engine), before + 2, "{engine}: the run it was built for took it");

        // Raced: eight threads ask for an instance ahead while eight runs start. One instance is
        // built at a time (an asker that comes after a run took one builds another), each is
        // taken by one run, the other runs build their own, and every run completes, pristine,
        // with nothing left waiting. The run after every asker returned finds the last build
        // under way or done (and takes it), or none.
        let raced = config(bytes(48));
        let cm = std::sync::Arc::new(runtime(&raced));
        let askers: Vec<_> = (0..8)
            .map(|_| {
                let raced = raced.clone();
                std::thread::spawn(move || Engines::prepare_ahead(&raced))
            })
            .collect();
        let runs: Vec<_> = (0..8)
            .map(|n| {
                let cm = cm.clone();
                tokio::spawn(async move {
                    let ctx = RunContext::session(format!("ahead-race-{n}"));
                    value(&cm.exec(&ctx, &CodeModeExecInput::code(PLANT)).await)["seen"].clone()
                })
            })
            .collect();
        for run in runs {
            assert_eq!(run.await.unwrap(), json!(false), "{engine}");
        }
        for asker in askers {
            asker.join().unwrap().unwrap();
        }
        let extra = value(&cm.exec(&ctx, &CodeModeExecInput::code(CHECK)).await);
        assert_eq!(extra["leaked"], json!("undefined"), "{engine}");
        let now = taken(engine);
        // Natively an asker that finds a pooled VM for these limits (runs that built their own
        // return them to the pool) builds none, so there all eight may build nothing.
        let least = if engine == "quickjs" { before + 2 } else { before + 3 };
        assert!(
            (least..=before + 2 + 8).contains(&now),
            "{engine}: at most eight instances built ahead, each taken once ({now} - {before})"
        );
        if engine == "quickjs" {
            // A heap too small to boot in: the build ahead fails, and the run is not left waiting
            // for it: it builds its own and fails as a run alone does. (quickjs-wasi applies the heap
            // limit inside the instance, whose build does not fail on it.)
            let tiny = config(64 << 10);
            Engines::prepare_ahead(&tiny).unwrap();
            let run = runtime(&tiny);
            let r = tokio::time::timeout(
                std::time::Duration::from_secs(60),
                run.exec(&ctx, &CodeModeExecInput::code("return 1")),
            )
            .await
            .expect("the run does not wait for a failed build");
            assert!(r.error_code().is_some(), "{engine}: {}", r.to_json());
            let alone = runtime(&tiny).exec(&ctx, &CodeModeExecInput::code("return 1")).await;
            assert_eq!(r.error_code(), alone.error_code(), "{engine}: the same failure as a run alone");
            assert_eq!(taken(engine), now, "{engine}: nothing was built to take");
        }
    }
}
