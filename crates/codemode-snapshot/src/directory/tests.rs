//! Unit tests of `directory` (kept beside it so the module itself reads as one concern).

use super::*;
use crate::clock::ManualClock;
use codemode_core::engine::{Snapshot, SnapshotBody};
use codemode_core::result::WaitReason;
use codemode_core::scope::ScopeMismatch;
use codemode_core::telemetry::CodeModeTelemetry;

fn run(id: &str, session: &str, expires_at_ms: u64, body: Vec<u8>) -> SuspendedRun {
    SuspendedRun {
        run_id: RunId::parse(id).unwrap(),
        scope: RunScope::session(session),
        snapshot: Snapshot { engine: "quickjs-wasi".into(), body: SnapshotBody::Serialized(body) },
        reason: WaitReason::PendingTools,
        pending: vec![],
        ready: vec![Delivery { id: 3, outcome: Ok(serde_json::json!({"x": 1})) }],
        restart_safe: true,
        telemetry: CodeModeTelemetry { exec_count: 1, ..Default::default() },
        created_at_ms: 1,
        expires_at_ms,
        positions: Default::default(),
        policy: Some(codemode_core::store::RunPolicy::default()),
    }
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("codemode-dirstore-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Only regular files of a bounded size are read; a symbolic link (which could point
/// at a device or another user's file) or a FIFO is refused without blocking, and purged.
#[cfg(unix)]
#[tokio::test]
async fn links_and_fifos_named_like_runs_are_refused_and_purged() {
    let dir = tempdir("links");
    let store = DirectorySnapshotStore::new(&dir).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("rlink.run")).unwrap();
    let made = std::process::Command::new("mkfifo").arg(dir.join("rfifo.run")).status().unwrap();
    assert!(made.success());
    for id in ["rlink", "rfifo"] {
        let e = store.checkout(&RunId::parse(id).unwrap(), &RunScope::session("s")).await.unwrap_err();
        assert!(matches!(e, StoreError::Corrupt(_)), "{id}: {e:?}");
    }
    let mut gone = store.purge_expired().await;
    gone.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(gone, [RunId::parse("rfifo").unwrap(), RunId::parse("rlink").unwrap()]);
    assert_eq!(store.count().await, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn round_trip_lock_and_scope() {
    let dir = tempdir("rt");
    let clock = ManualClock::at(1000);
    let store = DirectorySnapshotStore::with_clock(&dir, Arc::new(clock.clone())).unwrap();
    store.put(run("r1", "s", 5000, vec![1, 2, 3])).await.unwrap();
    let id = RunId::parse("r1").unwrap();
    assert_eq!(
        store.checkout(&id, &RunScope::session("t")).await.unwrap_err(),
        StoreError::WrongScope(ScopeMismatch::Session)
    );
    let got = store.checkout(&id, &RunScope::session("s")).await.unwrap();
    assert_eq!(got.ready.len(), 1);
    assert!(got.restart_safe);
    assert!(matches!(&got.snapshot.body, SnapshotBody::Serialized(b) if b == &vec![1, 2, 3]));
    // Held: a second wait is busy, another session is refused, the slot still counts.
    assert_eq!(store.checkout(&id, &RunScope::session("s")).await.unwrap_err(), StoreError::Busy);
    assert_eq!(
        store.checkout(&id, &RunScope::session("t")).await.unwrap_err(),
        StoreError::WrongScope(ScopeMismatch::Session)
    );
    assert_eq!(store.count().await, 1);
    // Re-suspension replaces the lock.
    store.put(got).await.unwrap();
    assert!(dir.join("r1.run").exists() && !dir.join("r1.lock").exists());
    clock.advance_ms(4000);
    assert_eq!(store.checkout(&id, &RunScope::session("s")).await.unwrap_err(), StoreError::Unavailable);
    assert_eq!(store.count().await, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn refuses_live_snapshots_corrupt_files_and_the_65th_run() {
    let dir = tempdir("limits");
    let store = DirectorySnapshotStore::new(&dir).unwrap();
    let far = u64::MAX / 2;
    for i in 0..64 {
        store.put(run(&format!("r{i}"), "s", far, vec![0])).await.unwrap();
    }
    assert_eq!(store.put(run("r64", "s", far, vec![0])).await.unwrap_err(), StoreError::TooMany);
    assert!(store.remove(&RunId::parse("r0").unwrap()).await);
    std::fs::write(dir.join("r1.run"), b"garbage").unwrap();
    let e = store.checkout(&RunId::parse("r1").unwrap(), &RunScope::session("s")).await.unwrap_err();
    assert!(matches!(e, StoreError::Corrupt(_)), "{e:?}");
    assert_eq!(store.purge_expired().await, vec![RunId::parse("r1").unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The 64-run cap holds when many stores (processes) admit runs at once.
#[test]
fn admission_is_atomic_across_store_instances() {
    let dir = tempdir("race");
    std::fs::create_dir_all(&dir).unwrap();
    let far = u64::MAX / 2;
    let results: Vec<Result<(), StoreError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|t| {
                let dir = dir.clone();
                scope.spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
                    // One store instance per thread: a separate open of the lock file, like a process.
                    let store = DirectorySnapshotStore::new(&dir).unwrap();
                    (0..6)
                        .map(|i| rt.block_on(store.put(run(&format!("t{t}r{i}"), "s", far, vec![0]))))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, MAX_SUSPENDED_RUNS, "96 puts, exactly 64 admitted");
    assert!(results.iter().filter(|r| r.is_err()).all(|r| r == &Err(StoreError::TooMany)));
    let files = std::fs::read_dir(&dir).unwrap().flatten().filter(|e| e.path().extension().is_some_and(|x| x == "run"));
    assert_eq!(files.count(), MAX_SUSPENDED_RUNS);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn recorded_results_and_claims() {
    let dir = tempdir("results");
    let store = DirectorySnapshotStore::new(&dir).unwrap();
    let id = RunId::parse("r1").unwrap();
    let d = Delivery { id: 7, outcome: Ok(serde_json::json!({"ok": true})) };
    assert!(!store.record_result(&id, &d).await.unwrap(), "no such run: nothing recorded");
    store.put(run("r1", "s", u64::MAX / 2, vec![0])).await.unwrap();
    assert!(store.record_result(&id, &d).await.unwrap());
    assert_eq!(store.take_results(&id).await.unwrap(), vec![d.clone()]);
    assert!(store.take_results(&id).await.unwrap().is_empty(), "taken once");
    // This process's own claims do not count; another process's claim counts while it is
    // locked (simulated here by a claim file with a foreign pid that this test locks).
    assert!(!store.calls_claimed(&id).await);
    let claim = store.claim_calls(&id).await.unwrap().unwrap();
    assert!(!store.calls_claimed(&id).await, "own claim");
    drop(claim);
    assert!(std::fs::read_dir(&dir).unwrap().flatten().all(|e| !e.file_name().to_string_lossy().contains(".calls-")));
    let foreign = dir.join("r1.calls-4000000001-0");
    let held = std::fs::File::create(&foreign).unwrap();
    held.lock().unwrap();
    assert!(store.calls_claimed(&id).await);
    drop(held);
    assert!(!store.calls_claimed(&id).await, "released: the process ended");
    assert!(!foreign.exists(), "a stale claim file is cleaned up");
    // A claim file nobody holds (its process died) does not count and is cleaned up.
    std::fs::write(dir.join("r1.calls-999999-0"), b"").unwrap();
    assert!(!store.calls_claimed(&id).await);
    assert!(!dir.join("r1.calls-999999-0").exists());
    // Removing the run removes its results.
    assert!(store.record_result(&id, &d).await.unwrap());
    assert!(store.remove(&id).await);
    assert!(!dir.join("r1.result-7").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
