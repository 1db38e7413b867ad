//! The store conformance suite (`codemode_snapshot::conformance`) against every store: memory,
//! directory and Redis (a real `redis-server` each test starts on a free loopback port, in its own
//! temporary directory, and stops whatever the outcome).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode_core::store::SnapshotStore;
use codemode_snapshot::conformance::{RedisServer, StoreUnderTest, T0, run_all};
use codemode_snapshot::{
    DirectorySnapshotStore, ManualClock, MemorySnapshotStore, RedisSnapshotStore, RedisStoreConfig,
};
use std::sync::{Arc, Mutex};

fn no_pause(_: &Arc<dyn SnapshotStore>) {}

#[tokio::test]
async fn memory_store_conforms() {
    let clock = Arc::new(ManualClock::at(T0));
    let store: Arc<dyn SnapshotStore> = Arc::new(MemorySnapshotStore::with_clock(clock.clone()));
    let t = StoreUnderTest {
        clock,
        instance: Box::new(move || {
            let s = store.clone();
            Box::pin(async move { s })
        }),
    };
    run_all(&t, &no_pause).await.unwrap();
}

#[tokio::test]
async fn directory_store_conforms() {
    let dir = std::env::temp_dir().join(format!("codemode-conformance-dir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = Arc::new(ManualClock::at(T0));
    let (d, c) = (dir.clone(), clock.clone());
    let t = StoreUnderTest {
        clock,
        instance: Box::new(move || {
            let s: Arc<dyn SnapshotStore> = Arc::new(DirectorySnapshotStore::with_clock(&d, c.clone()).unwrap());
            Box::pin(async move { s })
        }),
    };
    let outcome = run_all(&t, &no_pause).await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome.unwrap();
}

/// Redis: every instance is another replica (its own connection, replica id and heartbeat).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_conforms() {
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let clock = Arc::new(ManualClock::at(T0));
    let made: Arc<Mutex<Vec<Arc<RedisSnapshotStore>>>> = Arc::default();
    let (url, c, m) = (server.url(), clock.clone(), made.clone());
    let t = StoreUnderTest {
        clock,
        instance: Box::new(move || {
            let (url, c, m) = (url.clone(), c.clone(), m.clone());
            Box::pin(async move {
                let config = RedisStoreConfig { lease_ms: 1_000, ..RedisStoreConfig::new(url) };
                let s = Arc::new(RedisSnapshotStore::connect_with_clock(config, c).await.unwrap());
                m.lock().unwrap().push(s.clone());
                s as Arc<dyn SnapshotStore>
            })
        }),
    };
    let pause = move |s: &Arc<dyn SnapshotStore>| {
        let target = Arc::as_ptr(s) as *const ();
        for r in made.lock().unwrap().iter() {
            if Arc::as_ptr(r) as *const () == target {
                r.stop_heartbeat();
            }
        }
    };
    run_all(&t, &pause).await.unwrap();
}

/// Redis down at start: a clear error, not a hang.
#[tokio::test]
async fn redis_store_unreachable_at_start() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let started = std::time::Instant::now();
    let err =
        RedisSnapshotStore::connect(RedisStoreConfig::new(format!("redis://127.0.0.1:{port}"))).await.unwrap_err();
    assert!(matches!(err, codemode_core::store::StoreError::Unreachable(_)), "{err}");
    assert!(err.to_string().contains(&port.to_string()), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

/// Redis restarted with AOF: a suspended run survives; Redis lost meanwhile: operations fail with
/// `Unreachable` (no hang, no panic) and work again once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_keeps_runs_and_outage_is_reported() {
    use codemode_core::scope::{RunId, RunScope};
    use codemode_core::store::StoreError;
    let mut server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let store = RedisSnapshotStore::connect(RedisStoreConfig::new(server.url())).await.unwrap();
    let now = codemode_snapshot::Clock::now_ms(&codemode_snapshot::SystemClock);
    let run = codemode_snapshot::conformance::suspended("cm_aof", "s1", now + 600_000, vec![9, 9], &[(1, false)]);
    store.put(run).await.unwrap();
    server.stop();
    let id = RunId::parse("cm_aof").unwrap();
    let down = store.checkout(&id, &RunScope::session("s1")).await;
    assert!(matches!(down, Err(StoreError::Unreachable(_))), "{down:?}");
    assert!(server.restart());
    let back = checkout_once_back(&store, &id, "s1").await.expect("the connection comes back by itself");
    assert!(
        matches!(&back.snapshot.body, codemode_core::engine::SnapshotBody::Serialized(b) if b == &vec![9, 9]),
        "the run survived"
    );
    assert!(store.settle(&id).await.unwrap());
}

/// A Redis reloading its data after a restart answers `LOADING` for a while after it accepts
/// connections: that is an unreachable store (retry later), never a corrupt run, on the blocking
/// connections of guest workers and on the shared one of tasks alike; the run is served once
/// Redis has loaded it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_reloading_is_unreachable_not_corrupt() {
    use codemode_core::scope::{RunId, RunScope};
    use codemode_core::store::StoreError;
    let mut server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let store = Arc::new(RedisSnapshotStore::connect(RedisStoreConfig::new(server.url())).await.unwrap());
    let now = codemode_snapshot::Clock::now_ms(&codemode_snapshot::SystemClock);
    let run = codemode_snapshot::conformance::suspended("cm_load", "s1", now + 600_000, vec![7], &[(1, false)]);
    store.put(run).await.unwrap();
    // Every key takes 100 ms to load: seconds of `LOADING`.
    assert!(server.restart_loading_slowly(std::time::Duration::from_millis(100)));
    let id = RunId::parse("cm_load").unwrap();
    // A guest worker's blocking connection (this body is not a task).
    let blocked = store.checkout(&id, &RunScope::session("s1")).await;
    assert!(matches!(&blocked, Err(StoreError::Unreachable(m)) if m.contains("loading")), "{blocked:?}");
    // A task, through the shared connection.
    let (s, i) = (store.clone(), id.clone());
    let tasked = tokio::spawn(async move { s.checkout(&i, &RunScope::session("s1")).await }).await.unwrap();
    assert!(matches!(&tasked, Err(StoreError::Unreachable(_))), "{tasked:?}");
    let back = checkout_once_back(&store, &id, "s1").await.expect("served once loaded");
    assert!(matches!(&back.snapshot.body, codemode_core::engine::SnapshotBody::Serialized(b) if b == &vec![7]));
    assert!(store.settle(&id).await.unwrap());
}

/// Checks `id` out in session `session` once Redis serves again (restarted, or reloading its
/// data): polled every 50 ms for up to 10 s, since nothing of Redis's signals it; every failure
/// meanwhile must be `Unreachable` (anything else panics). `None` if Redis never came back.
async fn checkout_once_back(
    store: &RedisSnapshotStore,
    id: &codemode_core::scope::RunId,
    session: &str,
) -> Option<codemode_core::store::SuspendedRun> {
    use codemode_core::store::StoreError;
    for _ in 0..200 {
        match store.checkout(id, &codemode_core::scope::RunScope::session(session)).await {
            Ok(r) => return Some(r),
            Err(StoreError::Unreachable(_)) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            Err(e) => panic!("{e}"),
        }
    }
    None
}

/// Hostile or damaged data in Redis (someone else writing under the prefix): a garbled run or call
/// log entry is a `Corrupt` error for that run — never a panic, never another run's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_garbage_is_corrupt_not_a_crash() {
    use codemode_core::scope::{RunId, RunScope};
    use codemode_core::store::{CallIssue, StoreError};
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let store = RedisSnapshotStore::connect(RedisStoreConfig::new(server.url())).await.unwrap();
    let client = redis_cli(&server);
    client(&["HSET", "codemode:run:cm_bad", "meta", "{not json", "snap", "x", "fence", "0", "holder", ""]);
    let bad = store.checkout(&RunId::parse("cm_bad").unwrap(), &RunScope::session("s")).await;
    assert!(matches!(bad, Err(StoreError::Corrupt(_))), "{bad:?}");
    let now = codemode_snapshot::Clock::now_ms(&codemode_snapshot::SystemClock);
    let run = codemode_snapshot::conformance::suspended("cm_log", "s", now + 600_000, vec![1], &[(1, false)]);
    store.put(run).await.unwrap();
    let _held = store.checkout(&RunId::parse("cm_log").unwrap(), &RunScope::session("s")).await.unwrap();
    client(&["HSET", "codemode:calls:cm_log", "2", "][ garbage"]);
    let issue = CallIssue { request_id: 2, tool_id: "plugin:t:pay".into(), input_digest: "d".into(), read_only: false };
    let started = store.begin_call(&RunId::parse("cm_log").unwrap(), &issue).await;
    assert!(matches!(started, Err(StoreError::Corrupt(_))), "{started:?}");
    // A key of the wrong type under a run's name.
    client(&["SET", "codemode:run:cm_str", "just a string"]);
    let wrong = store.checkout(&RunId::parse("cm_str").unwrap(), &RunScope::session("s")).await;
    assert!(matches!(wrong, Err(StoreError::Corrupt(_))), "{wrong:?}");
    // The store still serves everything else.
    assert!(store.settle(&RunId::parse("cm_log").unwrap()).await.unwrap());
}

/// Runs `redis-cli -p PORT ARGS…` against the test's server.
fn redis_cli(server: &RedisServer) -> impl Fn(&[&str]) {
    let port = server.port().to_string();
    move |args: &[&str]| {
        let out = std::process::Command::new("redis-cli").arg("-p").arg(&port).args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Who talks to Redis how (the store's `Link`): a thread blocking on a store operation (a guest
/// worker inside `Handle::block_on`) uses a blocking connection of the store's own, kept for the
/// next operation; a tokio task uses the shared multiplexed connection. A blocking connection
/// Redis dropped is replaced, and a checkout sent on it is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_threads_use_blocking_connections_and_tasks_the_shared_one() {
    use codemode_core::scope::{RunId, RunScope};
    let server = RedisServer::start().expect("redis-server (installed by scripts/setup.sh)");
    let client = redis::Client::open(server.url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("CLIENT").arg("SETNAME").arg("admin").query_async(&mut admin).await.unwrap();
    let clients = async |admin: &mut redis::aio::MultiplexedConnection| -> usize {
        let list: String = redis::cmd("CLIENT").arg("LIST").query_async(admin).await.unwrap();
        list.lines().filter(|l| !l.contains("name=admin")).count()
    };
    // Connected from a task (the test's body is not one: it runs in `block_on`).
    let url = server.url();
    let store = Arc::new(
        tokio::spawn(async move { RedisSnapshotStore::connect(RedisStoreConfig::new(url)).await.unwrap() })
            .await
            .unwrap(),
    );
    let shared_only = clients(&mut admin).await;
    assert_eq!(shared_only, 1, "the multiplexed connection alone");
    let now = codemode_snapshot::Clock::now_ms(&codemode_snapshot::SystemClock);
    // Tasks: no connection of their own.
    for i in 0..5 {
        let s = store.clone();
        let run = codemode_snapshot::conformance::suspended(&format!("cm_task{i}"), "s1", now + 600_000, vec![1], &[]);
        tokio::spawn(async move { s.put(run).await.unwrap() }).await.unwrap();
    }
    assert_eq!(clients(&mut admin).await, shared_only, "tasks share the multiplexed connection");
    // A blocked thread: one blocking connection, reused from one operation to the next.
    let blocked = |ids: Vec<String>| {
        let (s, rt) = (store.clone(), tokio::runtime::Handle::current());
        std::thread::spawn(move || {
            for id in ids {
                let id = RunId::parse(&id).unwrap();
                let run = rt.block_on(s.checkout(&id, &RunScope::session("s1"))).unwrap();
                rt.block_on(s.put(run)).unwrap();
            }
        })
    };
    let ids: Vec<String> = (0..5).map(|i| format!("cm_task{i}")).collect();
    tokio::task::spawn_blocking({
        let t = blocked(ids.clone());
        move || t.join().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(clients(&mut admin).await, shared_only + 1, "one blocking connection, kept");
    // Two threads at once: two blocking connections, both kept idle afterwards.
    let (a, b) = (blocked(ids[..2].to_vec()), blocked(ids[2..].to_vec()));
    tokio::task::spawn_blocking(move || {
        a.join().unwrap();
        b.join().unwrap();
    })
    .await
    .unwrap();
    let idle = clients(&mut admin).await;
    assert!(idle == shared_only + 1 || idle == shared_only + 2, "{idle} connections");
    // Redis drops every connection but the admin's: the shared one reconnects by itself, the
    // blocking ones are replaced — the checkout that met a dead one is sent again and succeeds
    // (on a new connection: the other idle ones were dropped with the broken one).
    let list: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut admin).await.unwrap();
    for line in list.lines().filter(|l| !l.contains("name=admin")) {
        let id = line.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
        let _: i64 = redis::cmd("CLIENT").arg("KILL").arg("ID").arg(id).query_async(&mut admin).await.unwrap();
    }
    tokio::task::spawn_blocking({
        let t = blocked(ids);
        move || t.join().unwrap()
    })
    .await
    .unwrap();
}
