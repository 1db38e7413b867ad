//! A replica's side of the fleet: how it reaches Redis ([`RedisStoreConfig`]), the state its store
//! shares between clones (`Shared`: the connection, the loaded scripts, this replica's id, the
//! fence tokens of the runs it holds, the signing keys), its heartbeat (liveness and leases), and
//! how Redis failures become store errors.

use super::scripts::Scripts;
use super::*;

/// How to reach Redis and name the keys.
#[derive(Debug, Clone)]
pub struct RedisStoreConfig {
    /// `redis://[user:password@]host:port[/db]` (or `rediss://` with TLS when the client supports
    /// it).
    pub url: String,
    /// Prefix of every key (several fleets can share one Redis).
    pub key_prefix: String,
    /// Lease of a checkout and of a replica's liveness (ms, at least [`MIN_LEASE_MS`]): how long
    /// after a replica stops renewing (dies, is paused) another may take its runs over.
    pub lease_ms: u64,
    /// The keys that sign the fleet's runs and decisions. `None`: `CODEMODE_RUN_SIGNING_KEY`, or
    /// else a key derived from the fleet's secret kept in Redis (which detects corruption only:
    /// whoever can write the store can read that key).
    pub keys: Option<RunKeys>,
    /// Until when (Unix ms) runs and decisions without a signature are accepted when `keys` is
    /// `None` (an upgrade window; configured keys carry their own).
    pub accept_unsigned_until_ms: Option<u64>,
}

impl RedisStoreConfig {
    /// A config for `url` with the default prefix and lease.
    pub fn new(url: impl Into<String>) -> Self {
        RedisStoreConfig {
            url: url.into(),
            key_prefix: DEFAULT_KEY_PREFIX.into(),
            lease_ms: DEFAULT_LEASE_MS,
            keys: None,
            accept_unsigned_until_ms: None,
        }
    }
}

/// The fleet's secret under `prefix` (created by the first replica that asks).
pub(super) async fn fleet_secret_at(conn: &ConnectionManager, prefix: &str) -> Result<[u8; 32], StoreError> {
    let key = format!("{prefix}secret");
    let mut conn = conn.clone();
    // Only the first replica's value is kept.
    let fresh = crate::signing::random_key();
    let _: Option<String> =
        redis::cmd("SET").arg(&key).arg(&fresh[..]).arg("NX").query_async(&mut conn).await.map_err(unreachable)?;
    let stored: Vec<u8> = redis::cmd("GET").arg(&key).query_async(&mut conn).await.map_err(unreachable)?;
    <[u8; 32]>::try_from(stored.as_slice()).map_err(|_| StoreError::Corrupt(format!("{key} is not 32 bytes")))
}

/// The most idle blocking connections a store keeps ([`Link`]): one per guest worker that talks to
/// Redis at the same moment; more are opened when needed and closed when given back.
const MAX_IDLE_BLOCKING: usize = 8;

/// A store's way to Redis for one operation: through the shared multiplexed connection
/// (`ConnectionManager`) when polled by a tokio task, and over a blocking connection of the
/// store's own when polled by a thread that blocks on the operation anyway (a guest worker inside
/// `Handle::block_on`, not a task). Each round trip through the manager hands the command to its
/// driver task on a tokio worker and the reply back — on an idle machine a wake-up of two threads
/// each way, measured at ~140 µs against ~55 µs for a blocking connection on this machine (a
/// resume makes two round trips). A blocking connection is used only where nothing else is polled
/// on that thread meanwhile; its reads and writes time out like the manager's (`RESPONSE_TIMEOUT`).
pub(super) struct Link<'a> {
    shared: &'a Shared,
    manager: ConnectionManager,
}

impl Shared {
    /// The connection for one operation (see [`Link`]).
    pub(super) fn link(&self) -> Link<'_> {
        Link { shared: self, manager: self.conn.clone() }
    }

    /// An idle blocking connection, or a new one (an error when Redis cannot be reached: reported
    /// like the manager's, after at most the connection timeout).
    fn blocking(&self) -> redis::RedisResult<redis::Connection> {
        if let Some(conn) = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok(conn);
        }
        let conn = self.client.get_connection_with_timeout(RESPONSE_TIMEOUT)?;
        conn.set_read_timeout(Some(RESPONSE_TIMEOUT))?;
        conn.set_write_timeout(Some(RESPONSE_TIMEOUT))?;
        Ok(conn)
    }

    /// Keeps a blocking connection for the next operation (closed if enough are idle).
    fn give_back(&self, conn: redis::Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < MAX_IDLE_BLOCKING {
            idle.push(conn);
        }
    }
}

impl redis::aio::ConnectionLike for Link<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        // Not a task: the thread polling this blocks on it (see `Link`).
        if tokio::task::try_id().is_none() {
            let reply = self.shared.blocking().and_then(|mut conn| {
                let reply = redis::ConnectionLike::req_command(&mut conn, cmd);
                match &reply {
                    // One Redis answered, even with an error, is kept.
                    Ok(_) => self.shared.give_back(conn),
                    Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => self.shared.give_back(conn),
                    // One that failed is dropped (it may be broken, or hold a late reply), and so
                    // are the idle ones: what broke one (Redis restarted, a network fault) broke
                    // them all, and the next operation (or a resent checkout) must not meet them.
                    Err(_) => self.shared.idle.lock().unwrap_or_else(|p| p.into_inner()).clear(),
                }
                reply
            });
            return Box::pin(std::future::ready(reply));
        }
        self.manager.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.manager.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

pub(super) struct Shared {
    pub(super) conn: ConnectionManager,
    /// For blocking connections ([`Link`]).
    pub(super) client: redis::Client,
    /// Idle blocking connections.
    pub(super) idle: Mutex<Vec<redis::Connection>>,
    pub(super) prefix: String,
    pub(super) replica: String,
    pub(super) lease_ms: u64,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) scripts: Scripts,
    /// Fence tokens of the runs this replica holds (checked out and not yet stored or settled);
    /// [`LOST`] for a run whose lease the heartbeat found taken over or removed (every later write
    /// for it is refused, until the runtime gives it up).
    pub(super) held: Mutex<HashMap<RunId, i64>>,
    pub(super) max_runs: usize,
    pub(super) keys: RunKeys,
}

/// Keeps suspended runs, the call log, decisions and leases in Redis: the store of a fleet of
/// gateways. See the module documentation for the key layout, the scripts and the guarantees.
///
/// Limits: at most 64 runs suspended per scope across the fleet (contract §6, counted atomically in
/// the put script); every key expires with its run.
pub struct RedisSnapshotStore {
    pub(super) shared: Arc<Shared>,
    pub(super) heartbeat: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for RedisSnapshotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSnapshotStore")
            .field("prefix", &self.shared.prefix)
            .field("replica", &self.shared.replica)
            .finish()
    }
}

/// Whether the connection broke before a command could be sent (the manager reconnects by itself;
/// a command that only reads may be sent again at once).
pub(super) fn reconnecting(e: &redis::RedisError) -> bool {
    e.is_connection_dropped() || e.is_connection_refusal() || e.is_io_error()
}

/// A Redis failure as a store error: the connection's failures, and the answers of a Redis that
/// cannot serve for now (`LOADING` while it reloads its data after a restart, `READONLY`,
/// `MASTERDOWN`, `TRYAGAIN`, `CLUSTERDOWN` during a failover), are [`StoreError::Unreachable`];
/// any other error Redis answered (a script that met data it cannot read, a wrong type under a
/// key) is [`StoreError::Corrupt`].
pub(super) fn unreachable(e: redis::RedisError) -> StoreError {
    use redis::{ErrorKind, ServerErrorKind as S};
    let not_now = matches!(
        e.kind(),
        ErrorKind::Server(S::BusyLoading | S::ReadOnly | S::MasterDown | S::TryAgain | S::ClusterDown)
    );
    if not_now || e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() {
        StoreError::Unreachable(e.to_string())
    } else {
        StoreError::Corrupt(format!("redis: {e}"))
    }
}

pub(super) fn encode_err(e: serde_json::Error) -> StoreError {
    StoreError::Encode(e.to_string())
}

impl RedisSnapshotStore {
    /// `SET key value PX ttl` (at least 1 ms): session and fleet-wide state that expires by itself.
    pub(super) async fn set_expiring(&self, key: String, value: &str, ttl_ms: u64) -> Result<(), StoreError> {
        let mut conn = self.shared.link();
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(ttl_ms.max(1))
            .query_async::<()>(&mut conn)
            .await
            .map_err(unreachable)
    }

    /// Connects (failing when Redis cannot be reached), registers this replica and starts its
    /// heartbeat. Must be called inside a tokio runtime.
    pub async fn connect(config: RedisStoreConfig) -> Result<Self, StoreError> {
        Self::connect_with_clock(config, Arc::new(SystemClock)).await
    }

    /// [`connect`](Self::connect) with a given clock (tests).
    pub async fn connect_with_clock(config: RedisStoreConfig, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        if config.lease_ms < MIN_LEASE_MS {
            return Err(StoreError::Unsupported(format!(
                "snapshotStore.leaseMs must be at least {MIN_LEASE_MS} (got {})",
                config.lease_ms
            )));
        }
        let client = redis::Client::open(config.url.as_str())
            .map_err(|e| StoreError::Unsupported(format!("invalid Redis URL: {e}")))?;
        let manager = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(RESPONSE_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn =
            tokio::time::timeout(RESPONSE_TIMEOUT * 2, ConnectionManager::new_with_config(client.clone(), manager))
                .await
                .map_err(|_| StoreError::Unreachable(format!("no answer from {}", redacted(&config.url))))?
                .map_err(|e| StoreError::Unreachable(format!("{}: {e}", redacted(&config.url))))?;
        let replica = format!("r-{}", uuid::Uuid::new_v4().simple());
        let keys = match RunKeys::given_or_env(config.keys).map_err(|e| StoreError::Unsupported(e.to_string()))? {
            Some(k) => k,
            None => {
                // A key of its own, derived from the secret (never the MRTR key itself).
                let secret = fleet_secret_at(&conn, &config.key_prefix).await?;
                let derived = RunKeys::kept_in_store(&secret)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?
                    .sign("codemode run signing key", &[]);
                RunKeys::kept_in_store(&derived)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?
                    .accept_unsigned_until(config.accept_unsigned_until_ms)
            }
        };
        let shared = Arc::new(Shared {
            conn,
            client,
            idle: Mutex::new(Vec::new()),
            prefix: config.key_prefix,
            replica,
            lease_ms: config.lease_ms,
            clock,
            scripts: Scripts::new(),
            held: Mutex::new(HashMap::new()),
            max_runs: MAX_SUSPENDED_RUNS,
            keys,
        });
        shared.renew().await?;
        let heartbeat = tokio::spawn(heartbeat(Arc::downgrade(&shared)));
        Ok(RedisSnapshotStore { shared, heartbeat })
    }

    /// This replica's id (the `issuer` of the call log entries it writes).
    pub fn replica_id(&self) -> &str {
        &self.shared.replica
    }

    /// Stops renewing this replica's leases and liveness, as a replica that is paused or cut off
    /// from Redis would (for tests of takeover and fencing).
    pub fn stop_heartbeat(&self) {
        self.heartbeat.abort();
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.shared.prefix
    }

    /// The fleet's shared 32-byte secret (created by the first replica that asks): lets every
    /// replica check tags another replica made (MRTR approval state).
    pub async fn fleet_secret(&self) -> Result<[u8; 32], StoreError> {
        fleet_secret_at(&self.shared.conn, &self.shared.prefix).await
    }

    /// The keys this store signs and verifies runs and decisions with.
    pub fn keys(&self) -> &RunKeys {
        &self.shared.keys
    }

    /// Bytes Redis uses for the run's keys (`MEMORY USAGE`), for sizing.
    pub async fn run_bytes(&self, run_id: &RunId) -> Result<u64, StoreError> {
        let mut conn = self.shared.link();
        let mut total = 0u64;
        for key in [self.shared.key("run", run_id), self.shared.key("calls", run_id)] {
            let n: Option<u64> =
                redis::cmd("MEMORY").arg("USAGE").arg(key).query_async(&mut conn).await.map_err(unreachable)?;
            total += n.unwrap_or(0);
        }
        Ok(total)
    }
}

impl Drop for RedisSnapshotStore {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Hides a password in a Redis URL for messages.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

async fn heartbeat(shared: Weak<Shared>) {
    loop {
        let Some(s) = shared.upgrade() else { return };
        let every = Duration::from_millis((s.lease_ms / 3).max(50));
        if let Err(e) = s.renew().await {
            tracing::warn!(error = %e, "cannot renew this replica's leases in Redis");
        }
        drop(s);
        tokio::time::sleep(every).await;
    }
}

impl Shared {
    pub(super) fn key(&self, kind: &str, run: &RunId) -> String {
        format!("{}{kind}:{run}", self.prefix)
    }

    pub(super) fn replica_prefix(&self) -> String {
        format!("{}replica:", self.prefix)
    }

    pub(super) fn scope_key(&self, scope: &RunScope) -> String {
        use sha2::Digest;
        let text = serde_json::to_string(scope).unwrap_or_default();
        let digest: String =
            sha2::Sha256::digest(text.as_bytes()).iter().take(16).map(|b| format!("{b:02x}")).collect();
        format!("{}scope:{digest}", self.prefix)
    }

    pub(super) fn session_key(&self, scope: &RunScope, kind: &str) -> String {
        let scope_key = self.scope_key(scope);
        let digest = scope_key.rsplit(':').next().unwrap_or_default();
        format!("{}session:{digest}:{kind}", self.prefix)
    }

    /// The fence token this replica holds for `run` (0: none, a run not checked out here).
    /// [`StoreError::TakenOver`] when the heartbeat found its lease lost (the mark is dropped: the
    /// runtime gives the run up on this answer).
    pub(super) fn fenced_token(&self, run: &RunId) -> Result<i64, StoreError> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match held.get(run).copied() {
            Some(LOST) => {
                held.remove(run);
                Err(StoreError::TakenOver)
            }
            token => Ok(token.unwrap_or(0)),
        }
    }

    pub(super) fn release(&self, run: &RunId) {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).remove(run);
    }

    pub(super) async fn renew(&self) -> Result<(), StoreError> {
        let held: Vec<(RunId, i64)> =
            self.held.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(k, v)| (k.clone(), *v)).collect();
        let mut inv = self.scripts.renew.prepare_invoke();
        inv.key(format!("{}{}", self.replica_prefix(), self.replica));
        for (run, _) in &held {
            inv.key(self.key("run", run));
        }
        inv.arg(self.clock.now_ms()).arg(&self.replica).arg(self.lease_ms);
        for (_, token) in &held {
            inv.arg(*token);
        }
        let mut conn = self.link();
        let lost: Vec<usize> = inv.invoke_async(&mut conn).await.map_err(unreachable)?;
        for i in lost {
            if let Some((run, token)) = held.get(i.wrapping_sub(1)) {
                let mut map = self.held.lock().unwrap_or_else(|p| p.into_inner());
                if map.get(run) == Some(token) {
                    tracing::warn!(run = %run, "lease lost: another replica took the run over, or it was removed");
                    map.insert(run.clone(), LOST);
                }
            }
        }
        Ok(())
    }
}
