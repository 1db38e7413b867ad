//! Signed runs in the stores that keep runs outside process memory (`docs/src/security.md`,
//! "Signed runs"): a run file or Redis hash altered by someone without the key is refused before it
//! is checked out; a forged approval decision never approves; rotated keys still verify; runs
//! written before runs were signed pass only inside the upgrade window. Redis is a real
//! `redis-server` on a free loopback port, stopped whatever the outcome.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode_core::approval::ApprovalDecision;
use codemode_core::scope::{RunId, RunScope};
use codemode_core::store::{SnapshotStore, StoreError};
use codemode_snapshot::conformance::{RedisServer, T0, suspended};
use codemode_snapshot::{DirectorySnapshotStore, ManualClock, RedisSnapshotStore, RedisStoreConfig, RunKeys};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const K1: &[u8] = b"first key, 32 bytes at the least!";
const K2: &[u8] = b"second key, also 32 bytes or more";
const FAR: u64 = T0 + 3_600_000;

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("codemode-signed-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn dir_store(dir: &Path, keys: Option<RunKeys>) -> DirectorySnapshotStore {
    DirectorySnapshotStore::open(dir, keys, Arc::new(ManualClock::at(T0))).unwrap()
}

fn keys(k: &[u8]) -> RunKeys {
    RunKeys::configured(k).unwrap()
}

fn refused(r: Result<impl std::fmt::Debug, StoreError>) -> String {
    match r {
        Err(StoreError::Unauthenticated(m)) => m,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Replaces the first occurrence of `from` by `to` (same length) in a file, as someone who can write
/// the directory but holds no key would.
fn patch_file(path: &Path, from: &str, to: &str) {
    assert_eq!(from.len(), to.len());
    let mut bytes = std::fs::read(path).unwrap();
    let at = bytes.windows(from.len()).position(|w| w == from.as_bytes()).expect("the text to patch");
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
    std::fs::write(path, bytes).unwrap();
}

#[tokio::test]
async fn a_tampered_run_file_is_refused_before_checkout_and_stays() {
    let dir = tempdir("tamper");
    let store = dir_store(&dir, Some(keys(K1)));
    let id = RunId::parse("cm_tamper").unwrap();
    store.put(suspended("cm_tamper", "s1", FAR, vec![1, 2, 3], &[(1, true)])).await.unwrap();
    let file = dir.join("cm_tamper.run");
    let original = std::fs::read(&file).unwrap();
    // Change the input of the parked call (a human would approve n = 1, the call would run n = 9).
    patch_file(&file, "{\"n\":1}", "{\"n\":9}");
    let m = refused(store.checkout(&id, &RunScope::session("s1")).await);
    assert!(m.contains("altered or forged"), "{m}");
    assert!(file.exists() && !dir.join("cm_tamper.lock").exists(), "a refused run is not taken");
    // The snapshot bytes are covered too.
    std::fs::write(&file, &original).unwrap();
    let mut snap = original.clone();
    let at = snap.len() - 33;
    snap[at] ^= 0xff;
    std::fs::write(&file, &snap).unwrap();
    refused(store.checkout(&id, &RunScope::session("s1")).await);
    // A run file moved under another run's name is refused as well (the id is in the tag and the
    // metadata names its run).
    std::fs::write(&file, &original).unwrap();
    std::fs::copy(&file, dir.join("cm_other.run")).unwrap();
    assert!(store.checkout(&RunId::parse("cm_other").unwrap(), &RunScope::session("s1")).await.is_err());
    // Intact again: it resumes.
    let run = store.checkout(&id, &RunScope::session("s1")).await.unwrap();
    assert!(run.pending[0].awaiting_approval);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_forged_decision_file_never_approves() {
    let dir = tempdir("decision");
    let store = dir_store(&dir, Some(keys(K1)));
    let id = RunId::parse("cm_dec").unwrap();
    store.put(suspended("cm_dec", "s1", FAR, vec![1], &[(1, true), (2, true)])).await.unwrap();
    // Plain JSON, as written before decisions were signed: ignored.
    std::fs::write(dir.join("cm_dec.decision-1"), br#"{"approved":true}"#).unwrap();
    // A decision signed by a store with another key: ignored.
    let forger = dir_store(&tempdir("decision-forger"), Some(keys(K2)));
    forger.put(suspended("cm_dec", "s1", FAR, vec![1], &[(2, true)])).await.unwrap();
    forger.record_decision(&id, 2, &ApprovalDecision::Approve).await.unwrap();
    std::fs::copy(forger.dir().join("cm_dec.decision-2"), dir.join("cm_dec.decision-2")).unwrap();
    assert_eq!(store.take_decisions(&id).await.unwrap(), vec![], "neither forged decision is taken");
    // A decision filed under another request id (renamed) is refused too.
    store.record_decision(&id, 1, &ApprovalDecision::deny("no")).await.unwrap();
    std::fs::rename(dir.join("cm_dec.decision-1"), dir.join("cm_dec.decision-2")).unwrap();
    assert_eq!(store.take_decisions(&id).await.unwrap(), vec![]);
    // The store's own decision is taken.
    store.record_decision(&id, 2, &ApprovalDecision::Approve).await.unwrap();
    assert_eq!(store.take_decisions(&id).await.unwrap(), vec![(2, ApprovalDecision::Approve)]);
    // Recorded results: the same rule.
    let delivery = codemode_core::engine::Delivery { id: 1, outcome: Ok(serde_json::json!({"paid": true})) };
    std::fs::write(dir.join("cm_dec.result-1"), serde_json::to_vec(&delivery).unwrap()).unwrap();
    assert_eq!(store.take_results(&id).await.unwrap(), vec![]);
    assert!(store.record_result(&id, &delivery).await.unwrap());
    assert_eq!(store.take_results(&id).await.unwrap(), vec![delivery]);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(forger.dir());
}

#[tokio::test]
async fn rotated_keys_verify_and_dropped_keys_do_not() {
    let dir = tempdir("rotate");
    let old = dir_store(&dir, Some(keys(K1)));
    old.put(suspended("cm_rot", "s1", FAR, vec![5], &[])).await.unwrap();
    let id = RunId::parse("cm_rot").unwrap();
    let dropped = dir_store(&dir, Some(keys(K2)));
    let m = refused(dropped.checkout(&id, &RunScope::session("s1")).await);
    assert!(m.contains("does not hold"), "{m}");
    let rotated = dir_store(&dir, Some(keys(K2).with_previous(&[K1]).unwrap()));
    let run = rotated.checkout(&id, &RunScope::session("s1")).await.unwrap();
    // Stored again, it is signed with the new key: the old key alone no longer verifies it.
    rotated.put(run).await.unwrap();
    refused(old.checkout(&id, &RunScope::session("s1")).await);
    assert!(dropped.checkout(&id, &RunScope::session("s1")).await.is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn unsigned_run_files_pass_only_inside_the_upgrade_window() {
    let dir = tempdir("window");
    let store = dir_store(&dir, Some(keys(K1)));
    store.put(suspended("cm_old", "s1", FAR, vec![7, 7], &[])).await.unwrap();
    // Rewrite it as version 1 (no tag), as a codemode before signed runs wrote it.
    let file = dir.join("cm_old.run");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.truncate(bytes.len() - 32);
    bytes[5] = 1;
    std::fs::write(&file, &bytes).unwrap();
    let id = RunId::parse("cm_old").unwrap();
    let m = refused(store.checkout(&id, &RunScope::session("s1")).await);
    assert!(m.contains("no signature"), "{m}");
    let window = dir_store(&dir, Some(keys(K1).accept_unsigned_until(Some(T0 + 1))));
    let run = window.checkout(&id, &RunScope::session("s1")).await.unwrap();
    assert!(matches!(&run.snapshot.body, codemode_core::engine::SnapshotBody::Serialized(b) if b == &vec![7, 7]));
    // Past the window: refused again.
    let closed = DirectorySnapshotStore::open(
        &dir,
        Some(keys(K1).accept_unsigned_until(Some(T0 + 1))),
        Arc::new(ManualClock::at(T0 + 1)),
    )
    .unwrap();
    std::fs::rename(dir.join("cm_old.lock"), &file).unwrap();
    refused(closed.checkout(&id, &RunScope::session("s1")).await);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn without_a_configured_key_processes_share_the_key_kept_in_the_directory() {
    let dir = tempdir("kept");
    let a = dir_store(&dir, None);
    let b = dir_store(&dir, None);
    assert_eq!(a.keys().origin(), codemode_snapshot::KeyOrigin::KeptInStore);
    a.put(suspended("cm_kept", "s1", FAR, vec![1], &[])).await.unwrap();
    b.checkout(&RunId::parse("cm_kept").unwrap(), &RunScope::session("s1")).await.unwrap();
    // A process with a configured key does not accept the directory's own key.
    a.put(suspended("cm_kept2", "s1", FAR, vec![1], &[])).await.unwrap();
    refused(
        dir_store(&dir, Some(keys(K1))).checkout(&RunId::parse("cm_kept2").unwrap(), &RunScope::session("s1")).await,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

async fn redis_store(server: &RedisServer, keys: Option<RunKeys>) -> RedisSnapshotStore {
    let config = RedisStoreConfig { lease_ms: 1_000, keys, ..RedisStoreConfig::new(server.url()) };
    RedisSnapshotStore::connect_with_clock(config, Arc::new(ManualClock::at(T0))).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_redis_run_or_decision_is_refused() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let store = redis_store(&server, Some(keys(K1))).await;
    let id = RunId::parse("cm_red").unwrap();
    store.put(suspended("cm_red", "s1", FAR, vec![1, 2], &[(1, true)])).await.unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("{}run:cm_red", store.key_prefix());
    let meta: String = redis::cmd("HGET").arg(&key).arg("meta").query_async(&mut conn).await.unwrap();
    // Someone with access to Redis but not the key unparks the call.
    let forged = meta.replace("\"awaitingApproval\":true", "\"awaitingApproval\":false");
    assert_ne!(forged, meta);
    let () = redis::cmd("HSET").arg(&key).arg("meta").arg(&forged).query_async(&mut conn).await.unwrap();
    let m = refused(store.checkout(&id, &RunScope::session("s1")).await);
    assert!(m.contains("altered or forged"), "{m}");
    // The refused checkout gave its lease back: restored, the run is taken at once (not busy).
    let () = redis::cmd("HSET").arg(&key).arg("meta").arg(&meta).query_async(&mut conn).await.unwrap();
    let run = store.checkout(&id, &RunScope::session("s1")).await.unwrap();
    assert!(run.pending[0].awaiting_approval);
    store.put(run).await.unwrap();
    // A run whose tag was removed (as if written before runs were signed): refused.
    let () = redis::cmd("HDEL").arg(&key).arg("tag").query_async(&mut conn).await.unwrap();
    assert!(refused(store.checkout(&id, &RunScope::session("s1")).await).contains("no signature"));
    // Nor can a fresh put replace the refused run: it is still there, and not this replica's.
    assert_eq!(store.put(suspended("cm_red", "s1", FAR, vec![1, 2], &[(1, true)])).await, Err(StoreError::TakenOver));
    // A forged decision written straight into Redis never approves; a recorded one does.
    let other = RunId::parse("cm_red2").unwrap();
    store.put(suspended("cm_red2", "s1", FAR, vec![3], &[(1, true)])).await.unwrap();
    let decisions = format!("{}decisions:cm_red2", store.key_prefix());
    let () =
        redis::cmd("HSET").arg(&decisions).arg("1").arg(r#"{"approved":true}"#).query_async(&mut conn).await.unwrap();
    assert_eq!(store.take_decisions(&other).await.unwrap(), vec![]);
    store.record_decision(&other, 1, &ApprovalDecision::Approve).await.unwrap();
    assert_eq!(store.take_decisions(&other).await.unwrap(), vec![(1, ApprovalDecision::Approve)]);
    // A replica with another key refuses the fleet's runs; one keeping the old key as previous
    // resumes them.
    let wrong = redis_store(&server, Some(keys(K2))).await;
    refused(wrong.checkout(&other, &RunScope::session("s1")).await);
    let rotated = redis_store(&server, Some(keys(K2).with_previous(&[K1]).unwrap())).await;
    rotated.checkout(&other, &RunScope::session("s1")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_without_a_configured_key_share_one_derived_from_the_fleet_secret() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let a = redis_store(&server, None).await;
    let b = redis_store(&server, None).await;
    assert_eq!(a.keys().origin(), codemode_snapshot::KeyOrigin::KeptInStore);
    a.put(suspended("cm_fleet", "s1", FAR, vec![1], &[])).await.unwrap();
    b.checkout(&RunId::parse("cm_fleet").unwrap(), &RunScope::session("s1")).await.unwrap();
    // The derived key is not the MRTR secret itself.
    let secret = a.fleet_secret().await.unwrap();
    let as_secret = RunKeys::kept_in_store(&secret).unwrap();
    a.put(suspended("cm_fleet2", "s1", FAR, vec![1], &[])).await.unwrap();
    let c = redis_store(&server, Some(as_secret)).await;
    refused(c.checkout(&RunId::parse("cm_fleet2").unwrap(), &RunScope::session("s1")).await);
}

/// The scope fields a Redis run keeps for its one-round-trip checkout (`CHECKOUT` in the store's
/// scripts) are not signed: whoever rewrites them in Redis still cannot take another scope's run
/// (the signed meta's scope is checked again, and the lease given back), and a run stored without
/// them (written by an older replica) is checked from its meta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_scope_fields_are_a_shortcut_never_the_authority() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let store = redis_store(&server, Some(keys(K1))).await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let id = RunId::parse("cm_owner").unwrap();
    let key = format!("{}run:cm_owner", store.key_prefix());
    store.put(suspended("cm_owner", "s1", FAR, vec![1], &[])).await.unwrap();
    // The scope's fields as the store's scripts name them.
    const OWNER: [&str; 4] = ["oagent", "osession", "okey", "orun"];
    let fields: Vec<Option<String>> =
        redis::cmd("HMGET").arg(&key).arg(&OWNER[..]).query_async(&mut conn).await.unwrap();
    assert_eq!(fields, vec![Some("-".into()), Some("=s1".into()), Some("-".into()), Some("-".into())]);
    // Someone with access to Redis hands the run to the intruder's session: the script lets the
    // intruder through, the signed meta does not, and the lease goes back at once.
    let () = redis::cmd("HSET").arg(&key).arg("osession").arg("=intruder").query_async(&mut conn).await.unwrap();
    assert!(matches!(
        store.checkout(&id, &RunScope::session("intruder")).await,
        Err(StoreError::WrongScope(codemode_core::scope::ScopeMismatch::Session))
    ));
    let holder: String = redis::cmd("HGET").arg(&key).arg("holder").query_async(&mut conn).await.unwrap();
    assert_eq!(holder, "", "the intruder's lease was given back");
    // The owner is refused by the rewritten fields (never let in by them) until they are restored.
    assert!(matches!(store.checkout(&id, &RunScope::session("s1")).await, Err(StoreError::WrongScope(_))));
    let () = redis::cmd("HSET").arg(&key).arg("osession").arg("=s1").query_async(&mut conn).await.unwrap();
    let run = store.checkout(&id, &RunScope::session("s1")).await.unwrap();
    store.put(run).await.unwrap();
    // Written by an older replica: no scope fields. Checked from the meta, in a second round trip.
    let () = redis::cmd("HDEL").arg(&key).arg(&OWNER[..]).query_async(&mut conn).await.unwrap();
    assert!(matches!(store.checkout(&id, &RunScope::session("intruder")).await, Err(StoreError::WrongScope(_))));
    let holder: String = redis::cmd("HGET").arg(&key).arg("holder").query_async(&mut conn).await.unwrap();
    assert_eq!(holder, "", "a refused caller never took the lease");
    let run = store.checkout(&id, &RunScope::session("s1")).await.unwrap();
    assert_eq!(run.run_id, id);
    // The checkout is idempotent by its nonce (what makes resending it after a broken connection
    // safe): the same nonce again gets the same fence, another nonce finds the run busy.
    store.put(run).await.unwrap();
    let checkout = redis::Script::new(codemode_snapshot::redis::CHECKOUT);
    let mut take = async |replica: &str, nonce: &str| -> (String, i64) {
        let (status, fence, _, _, _): (String, i64, String, Vec<u8>, Vec<u8>) = checkout
            .key(&key)
            .arg(T0)
            .arg(replica)
            .arg(1_000)
            .arg("0")
            .arg("-")
            .arg("=s1")
            .arg("-")
            .arg("-")
            .arg(nonce)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        (status, fence)
    };
    let (first, fence) = take("r-test", "n1").await;
    assert_eq!(first, "OK");
    assert_eq!(take("r-test", "n1").await, ("OK".to_string(), fence), "resent: the same checkout");
    assert_eq!(take("r-test", "n2").await.0, "BUSY", "another checkout of the same replica");
    assert_eq!(take("r-other", "n1").await.0, "BUSY", "another replica with the same nonce");
}
