//! Serialized snapshots of the quickjs-wasi engine: a suspended run restored in a fresh instance ends
//! exactly like an uninterrupted run; damaged or foreign snapshots are refused with
//! `snapshot_restore_failed` and leave the host working.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeErrorCode, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, DirectorySnapshotStore,
    RunContext,
};
use codemode_conformance::{config, tokio_runtime};
use codemode_core::engine::{DriveInput, DriveOutcome, GuestEngine, GuestLimits, GuestProgram, Snapshot, SnapshotBody};
use codemode_engine_wasi::QuickJsWasiEngine;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A cell that builds state, suspends three times (yields), and uses that state after each resume.
const CELL: &str = r#"
const rows = Array.from({ length: 500 }, (_, i) => ({ i, name: "row" + i, sq: i * i }));
const seen = new Map();
let acc = 0;
for (const step of ["a", "b", "c"]) {
  const echoed = await tools.demo_echo({ step, n: rows.length });
  seen.set(step, echoed.n);
  acc += rows.filter((r) => r.i % 7 === 0).length;
  text("step " + step + " acc=" + acc);
  await yield_control(step);
}
json({ seen: Object.fromEntries(seen) });
return { acc, last: rows[rows.length - 1], random: typeof Math.random() };
"#;

fn engine() -> Arc<QuickJsWasiEngine> {
    Arc::new(QuickJsWasiEngine::new())
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("codemode-wasi-snap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn runtime_with_dir(dir: &PathBuf) -> CodeMode {
    CodeMode::builder(config(json!({})))
        .engine(engine())
        .local_tools(codemode_demo::demo_tools())
        .store(Arc::new(DirectorySnapshotStore::new(dir).unwrap()))
        .build()
}

/// Runs `CELL` to the end; `fresh_runtime_per_wait` rebuilds the whole runtime (as another process
/// would) before each `wait`, so every resume restores from the bytes on disk.
fn run_cell(fresh_runtime_per_wait: bool, dir: &PathBuf) -> (Vec<Value>, Vec<CodeModeResult>) {
    tokio_runtime().block_on(async {
        let ctx = RunContext::session("snap");
        let mut cm = runtime_with_dir(dir);
        let mut steps = vec![cm.exec(&ctx, &CodeModeExecInput::code(CELL)).await];
        while let Some(id) = steps.last().and_then(|r| r.run_id()).map(str::to_string) {
            if fresh_runtime_per_wait {
                cm = runtime_with_dir(dir);
            }
            steps.push(cm.wait(&ctx, &CodeModeWaitInput::new(id)).await);
            assert!(steps.len() < 10);
        }
        let outputs = steps.iter().flat_map(|r| r.output().iter().map(|o| serde_json::to_value(o).unwrap())).collect();
        (outputs, steps)
    })
}

#[test]
fn restore_in_a_fresh_runtime_matches_the_uninterrupted_run() {
    let dir_a = tempdir("same");
    let dir_b = tempdir("fresh");
    let (out_a, steps_a) = run_cell(false, &dir_a);
    let (out_b, steps_b) = run_cell(true, &dir_b);
    assert_eq!(steps_a.len(), 4);
    let last_a = steps_a.last().unwrap();
    let last_b = steps_b.last().unwrap();
    let CodeModeResult::Completed { value, .. } = last_a else { panic!("{}", last_a.to_json()) };
    assert_eq!(value, &json!({ "acc": 216, "last": { "i": 499, "name": "row499", "sq": 249001 }, "random": "number" }));
    assert_eq!(last_a.to_json()["value"], last_b.to_json()["value"]);
    assert_eq!(out_a, out_b);
    assert_eq!(out_a.len(), 4);
    // Every suspension stored a small diff snapshot, and nothing is left behind.
    for r in &steps_b[..3] {
        let created = r
            .telemetry()
            .snapshot_events
            .iter()
            .rev()
            .find(|e| e.event == codemode_core::telemetry::SnapshotEventKind::Created);
        let bytes = created.and_then(|e| e.bytes).unwrap();
        assert!(bytes < 256 * 1024, "snapshot of {bytes} bytes");
    }
    // Nothing but the store's admission lock file and signing key is left behind.
    let left: Vec<_> = std::fs::read_dir(&dir_b)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != ".admission" && n != ".signing-key")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let _ = std::fs::remove_dir_all(&dir_a);
    let _ = std::fs::remove_dir_all(&dir_b);
}

/// Snapshots leave out the stack under the stack pointer (dead between drive steps). A cell that
/// suspends 150 async frames deep, each holding locals, after a synchronous recursion to the stack
/// limit (caught) that wrote the deepest stack pages, and resumes in a fresh runtime each time (from the bytes on disk) must find
/// every frame's state: async frames live in the heap, not on the stack that was left out.
#[test]
fn runs_suspended_deep_in_async_frames_resume_from_disk_with_all_their_state() {
    let dir = tempdir("deep");
    let cell = r#"
function burn(n) { const pad = [n, n * 2, n * 3]; return n === 0 ? 0 : pad[1] - pad[0] - n + burn(n - 1); }
async function down(n) {
  const mine = { n, label: "frame" + n, squares: [n * n, (n + 1) * (n + 1)] };
  if (n === 0) {
    try { burn(1e6); } catch (e) { if (!(e instanceof RangeError)) throw e; }
    await yield_control("bottom");
    try { burn(1e6); } catch (e) { if (!(e instanceof RangeError)) throw e; }
    await yield_control("again");
    return 0;
  }
  const below = await down(n - 1);
  return below + mine.n + mine.squares[1] - mine.squares[0] + mine.label.length;
}
return await down(150);
"#;
    let result = tokio_runtime().block_on(async {
        let ctx = RunContext::session("deep");
        let mut r = runtime_with_dir(&dir).exec(&ctx, &CodeModeExecInput::code(cell)).await;
        let mut waits = 0;
        while let Some(id) = r.run_id().map(str::to_string) {
            waits += 1;
            assert!(waits <= 2, "{}", r.to_json());
            r = runtime_with_dir(&dir).wait(&ctx, &CodeModeWaitInput::new(id)).await;
        }
        assert_eq!(waits, 2, "{}", r.to_json());
        r
    });
    // Each level n adds n + (2n + 1) + len("frame" + n).
    let want: i64 = (1..=150i64).map(|n| n + 2 * n + 1 + 5 + n.to_string().len() as i64).sum();
    assert_eq!(result.to_json()["value"], json!(want), "{}", result.to_json());
    let _ = std::fs::remove_dir_all(&dir);
}

fn suspended_run_file(dir: &PathBuf) -> (CodeMode, String, PathBuf) {
    let cm = runtime_with_dir(dir);
    let r = tokio_runtime().block_on(cm.exec(
        &RunContext::session("snap"),
        &CodeModeExecInput::code("const x = 41; await yield_control(); return x + 1"),
    ));
    let id = r.run_id().unwrap().to_string();
    let file = dir.join(format!("{id}.run"));
    assert!(file.exists());
    (cm, id, file)
}

fn wait(cm: &CodeMode, id: &str) -> CodeModeResult {
    tokio_runtime().block_on(cm.wait(&RunContext::session("snap"), &CodeModeWaitInput::new(id)))
}

/// The engine's own checks of the bytes it restores: the run files are rewritten in the store's
/// unsigned format (version 1) and read by a store that accepts it (its upgrade window open), so
/// the damage reaches the engine instead of being refused by the store's signature (which
/// `crates/codemode-snapshot/tests/signed_runs.rs` covers).
#[test]
fn damaged_snapshots_fail_with_snapshot_restore_failed() {
    let dir = tempdir("damaged");
    // Flip a byte in the engine snapshot (past the store's metadata), truncate one, and empty one.
    type Damage = fn(&mut Vec<u8>);
    let damage: [(&str, Damage); 3] = [
        ("flip", |b| {
            let n = b.len();
            b[n - 100] ^= 0x5a;
        }),
        ("truncate", |b| {
            let n = b.len();
            b.truncate(n - 10);
        }),
        ("engine-bytes-gone", |b| {
            let meta_len = u32::from_le_bytes([b[6], b[7], b[8], b[9]]) as usize;
            b.truncate(10 + meta_len);
        }),
    ];
    for (what, f) in damage {
        let (_, id, file) = suspended_run_file(&dir);
        let mut bytes = std::fs::read(&file).unwrap();
        // Unsigned: no tag at the end, format version 1.
        bytes.truncate(bytes.len() - 32);
        bytes[5] = 1;
        f(&mut bytes);
        std::fs::write(&file, bytes).unwrap();
        let store = DirectorySnapshotStore::new(&dir).unwrap().accept_unsigned_until(Some(u64::MAX));
        let cm = CodeMode::builder(config(json!({})))
            .engine(engine())
            .local_tools(codemode_demo::demo_tools())
            .store(Arc::new(store))
            .build();
        let r = wait(&cm, &id);
        assert_eq!(r.error_code(), Some(CodeModeErrorCode::SnapshotRestoreFailed), "{what}: {}", r.to_json());
        assert!(
            !dir.join(format!("{id}.run")).exists() && !dir.join(format!("{id}.lock")).exists(),
            "{what}: state removed"
        );
        // The host is intact: a new run works.
        let ok =
            tokio_runtime().block_on(cm.exec(&RunContext::session("snap"), &CodeModeExecInput::code("return 6 * 7")));
        assert_eq!(ok.to_json()["value"], json!(42), "{what}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn snapshots_of_another_engine_or_build_are_refused() {
    let engine = QuickJsWasiEngine::new();
    let limits = GuestLimits::default();
    let boot: Arc<str> = Arc::from(r#"{"maxDepth":64}"#);
    let mut instance =
        engine.start(&GuestProgram { code: "await yield_control(); return 1".into(), boot }, &limits).unwrap();
    let report = instance.drive(DriveInput::new(vec![], Instant::now() + Duration::from_secs(5), 1 << 16)).unwrap();
    assert_eq!(report.outcome, DriveOutcome::Pending);
    let snap = instance.snapshot().unwrap();
    let SnapshotBody::Serialized(bytes) = snap.body else { panic!("expected serialized bytes") };
    // Claimed by another engine.
    let foreign = Snapshot { engine: "quickjs".into(), body: SnapshotBody::Serialized(bytes.clone()) };
    assert!(matches!(engine.restore(foreign, &limits), Err(codemode_core::engine::EngineError::Restore(_))));
    // Another build of this engine: rewrite the build id inside the (digest-protected) header.
    let build = engine.build_id();
    let at = bytes.windows(build.len()).position(|w| w == build.as_bytes()).expect("the header names the build");
    let mut forged = bytes.clone();
    forged[at..at + build.len()].copy_from_slice("0".repeat(build.len()).as_bytes());
    let e = engine.restore(Snapshot { engine: "quickjs-wasi".into(), body: SnapshotBody::Serialized(forged) }, &limits);
    assert!(matches!(e, Err(codemode_core::engine::EngineError::Restore(_))));
    // The genuine bytes still restore and finish.
    let mut again = engine
        .restore(Snapshot { engine: "quickjs-wasi".into(), body: SnapshotBody::Serialized(bytes) }, &limits)
        .unwrap();
    let yield_id = report.requests[0].id;
    let done = again
        .drive(DriveInput::new(
            vec![codemode_core::engine::Delivery { id: yield_id, outcome: Ok(Value::Null) }],
            Instant::now() + Duration::from_secs(5),
            1 << 16,
        ))
        .unwrap();
    assert_eq!(done.outcome, DriveOutcome::Completed(json!(1)));
}

#[test]
fn a_runaway_guest_ends_only_its_own_run() {
    // A guest that fills its heap or outlives its time limit ends as a failed run; the engine keeps
    // serving other runs.
    let cm = CodeMode::builder(config(json!({ "timeoutMs": 300 })))
        .engine(engine())
        .local_tools(codemode_demo::demo_tools())
        .build();
    let ctx = RunContext::session("trap");
    let rt = tokio_runtime();
    let r = rt.block_on(cm.exec(
        &ctx,
        &CodeModeExecInput::code("const a = []; for (let i = 0; i < 1e9; i++) a.push(i); return a.length"),
    ));
    assert_eq!(r.status(), "failed");
    let ok = rt.block_on(cm.exec(&ctx, &CodeModeExecInput::code("return 'alive'")));
    assert_eq!(ok.to_json()["value"], json!("alive"));
}
