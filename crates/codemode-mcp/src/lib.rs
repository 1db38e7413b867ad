//! # codemode-mcp
//!
//! MCP both ways, on the official Rust SDK (`rmcp`):
//!
//! - **Upstream** ([`config`], [`hub`]): the `mcpServers` of the config (stdio child processes or
//!   streamable HTTP) become catalog entries `mcp:<server>:<tool>`, reachable from guest code only as
//!   `MCP.<server>.<tool>({...})` (plus `resources.read`, `prompts.get`, `$api` and the virtual
//!   `API` declaration files); [`McpHub`] is the executor that runs those calls upstream, with time
//!   limits and per-server failure isolation.
//! - **Debugging** ([`debug`]): the contract §18 switches, mapped to what the server sends and serves.
//! - **Downstream** ([`server`]): `codemode serve` exposes exactly two tools, `exec` and `wait`, to
//!   any MCP client over stdio or streamable HTTP; every MCP session is its own run scope. Run
//!   events go to the client as progress notifications, a cancelled request aborts its run, and
//!   gated nested calls are put to the session's human through elicitation ([`approval`]) or, over
//!   HTTP, a token-protected approval endpoint.
//!
//! - **Passthrough** ([`passthrough`]): with code mode disabled, the upstream tools served unchanged.
//!
//! Layering (docs/src/layout.md): above the `codemode` facade; below the CLI.
#![forbid(unsafe_code)]

pub mod approval;
pub mod clients;
pub mod config;
pub mod console;
pub mod debug;
mod gateway;
pub mod http;
pub mod hub;
pub mod passthrough;
pub mod replay;
pub mod server;
pub mod tasks;

pub use hub::{McpHub, ServerStatus};

use codemode::config_file::ConfigFile;
use codemode::{CodeMode, LocalTools, PolicyTarget, SnapshotStore};
use codemode_core::config::ConfigError;
use std::sync::Arc;

/// Checks that `target` names an agent the config defines (a typo must not silently drop the
/// agent's restrictions).
pub fn check_target(file: &ConfigFile, target: &PolicyTarget) -> Result<(), ConfigError> {
    match &target.agent {
        Some(agent) if !file.policy.agents.contains_key(agent) => {
            let known: Vec<&str> = file.policy.agents.keys().map(String::as_str).collect();
            Err(ConfigError::new(
                "agent",
                format!(
                    "unknown agent `{agent}` (agents.list ids: {})",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Parses the config's `mcpServers` and connects them (failures are per server, see [`McpHub`]).
pub async fn connect_servers(file: &ConfigFile) -> Result<Arc<McpHub>, ConfigError> {
    let servers = match &file.mcp_servers {
        Some(v) => config::parse_servers(v)?,
        None => Vec::new(),
    };
    Ok(McpHub::connect(servers).await)
}

/// Environment variable holding the Redis URL of a fleet's store when the configuration names none.
pub const REDIS_URL_ENV: &str = "CODEMODE_REDIS_URL";

/// Unix milliseconds by the system clock (what the stores and the runtime read by default).
pub(crate) fn now_ms() -> u64 {
    use codemode::Clock as _;
    codemode::SystemClock.now_ms()
}

/// A snapshot store opened from a configuration's `snapshotStore`.
#[derive(Default)]
pub struct OpenedStore {
    /// The store; `None`: the default (in memory).
    pub store: Option<Arc<dyn SnapshotStore>>,
    /// The fleet's shared secret when the store is shared by replicas (Redis).
    pub fleet_key: Option<[u8; 32]>,
    /// The store's lease (`leaseMs` of a Redis store): also the lease of a task's drive claim.
    pub lease_ms: Option<u64>,
    /// The store's id of this replica (Redis: what it names as a run's holder).
    pub replica: Option<String>,
}

/// Opens the store a configuration chooses (`None` and `memory`: the default in-memory store); a
/// Redis store without a URL takes [`REDIS_URL_ENV`]. A directory or Redis store signs its runs with
/// `signing`'s key, or else one it keeps itself (see `codemode_snapshot::signing`). Errors name
/// `snapshotStore` or `runSigning`.
pub async fn open_store(
    choice: Option<codemode::config_file::SnapshotStoreConfig>,
    signing: &codemode::config_file::RunSigningConfig,
) -> Result<OpenedStore, ConfigError> {
    use codemode::config_file::SnapshotStoreConfig;
    match choice {
        None | Some(SnapshotStoreConfig::Memory) => Ok(OpenedStore::default()),
        Some(SnapshotStoreConfig::Directory { dir }) => {
            let store = codemode::DirectorySnapshotStore::open(&dir, signing.keys()?, Arc::new(codemode::SystemClock))
                .map_err(|e| {
                    ConfigError::new("snapshotStore.dir", format!("snapshot directory {}: {e}", dir.display()))
                })?
                .accept_unsigned_until(signing.accept_unsigned_until_ms);
            Ok(OpenedStore { store: Some(Arc::new(store)), fleet_key: None, lease_ms: None, replica: None })
        }
        Some(SnapshotStoreConfig::Redis { url, key_prefix, lease_ms }) => {
            let Some(url) = url.or_else(|| std::env::var(REDIS_URL_ENV).ok().filter(|u| !u.is_empty())) else {
                return Err(ConfigError::new(
                    "snapshotStore.url",
                    format!(
                        "a redis snapshot store needs a URL: snapshotStore.url, --store redis://HOST:PORT or {REDIS_URL_ENV}"
                    ),
                ));
            };
            let mut config = codemode_snapshot::RedisStoreConfig::new(url);
            if let Some(p) = key_prefix {
                config.key_prefix = p;
            }
            if let Some(l) = lease_ms {
                config.lease_ms = l;
            }
            let lease_ms = Some(config.lease_ms);
            config.keys = signing.keys()?;
            config.accept_unsigned_until_ms = signing.accept_unsigned_until_ms;
            let unreachable = |e: codemode_core::store::StoreError| {
                ConfigError::new("snapshotStore", format!("redis snapshot store: {e}"))
            };
            let store = codemode_snapshot::RedisSnapshotStore::connect(config).await.map_err(unreachable)?;
            let key = store.fleet_secret().await.map_err(unreachable)?;
            tracing::info!(
                replica = store.replica_id(),
                prefix = store.key_prefix(),
                "snapshot store: redis (fleet mode)"
            );
            let replica = Some(store.replica_id().to_string());
            Ok(OpenedStore { store: Some(Arc::new(store)), fleet_key: Some(key), lease_ms, replica })
        }
    }
}

/// What a gateway serves besides the config file's servers.
#[derive(Default)]
pub struct GatewayOptions {
    /// Tools implemented in this process (e.g. the demo tools).
    pub local: LocalTools,
    /// Namespaces registered by this process's plugins; the config's declared ones join them.
    pub namespaces: codemode::Namespaces,
    /// Where suspended runs are kept (default: in memory).
    pub store: Option<Arc<dyn SnapshotStore>>,
    /// Receives every run's trajectory records (e.g. `serve --audit`).
    pub trajectory: Option<Arc<dyn codemode::RunObserver>>,
    /// The fleet's shared secret when `store` is shared by several replicas (see
    /// [`server::Gateway::fleet_replica`]); `None`: a lone gateway.
    pub fleet_key: Option<[u8; 32]>,
    /// The lease of a task's drive claim (the store's `leaseMs`; `None`:
    /// [`tasks::DEFAULT_LEASE_MS`]).
    pub task_lease_ms: Option<u64>,
    /// The operator console's ledger (`serve --console`): it becomes the runtime's trajectory sink
    /// (passing every record on to `trajectory`), every nested call carries its cell line, and the
    /// gateway reports each `exec`/`wait` to it.
    pub console: Option<Arc<console::ledger::Ledger>>,
}

/// The runtime of a config file over its upstream servers, not yet built: the file's semantics
/// ([`CodeModeBuilder::config_file`](codemode::CodeModeBuilder::config_file)) for `target`, `local`
/// tools, the connected servers' tools (down ones kept, see [`McpHub::unavailable_servers`]) with
/// the hub as executor, and the store and trajectory sink when given. Used by [`build_gateway`]
/// and by the `codemode` commands that run cells without serving MCP.
pub async fn runtime_builder(
    file: &ConfigFile,
    target: &PolicyTarget,
    local: LocalTools,
    namespaces: codemode::Namespaces,
    store: Option<Arc<dyn SnapshotStore>>,
    trajectory: Option<Arc<dyn codemode::RunObserver>>,
) -> Result<(codemode::CodeModeBuilder, Arc<McpHub>), ConfigError> {
    check_target(file, target)?;
    let builder = CodeMode::builder(file.code_mode.clone()).config_file(file, namespaces)?;
    let hub = connect_servers(file).await?;
    let mut builder = builder
        .policy_target(target.clone())
        .local_tools(local)
        .tool_definitions(hub.tool_definitions())
        .unavailable_mcp_servers(hub.unavailable_servers())
        .executor(hub.clone());
    if let Some(store) = store {
        builder = builder.store(store);
    }
    if let Some(sink) = trajectory {
        builder = builder.trajectory(sink);
    }
    Ok((builder, hub))
}

/// Connects the configured upstream servers and builds the code-mode runtime over them (plus
/// `local` tools): the catalog holds the local tools and every connected server's tools, after the
/// config's policy for `target` (agent, provider, model); nested MCP calls go to the hub. The
/// config's declared namespaces join `namespaces` (a registry that may already hold plugin ones).
pub async fn build_gateway(
    file: &ConfigFile,
    target: &PolicyTarget,
    options: GatewayOptions,
) -> Result<Arc<server::Gateway>, ConfigError> {
    let GatewayOptions { local, namespaces, store, trajectory, fleet_key, task_lease_ms, console } = options;
    let trajectory = match &console {
        Some(ledger) => {
            ledger.set_audit(trajectory);
            Some(ledger.clone() as Arc<dyn codemode::RunObserver>)
        }
        None => trajectory,
    };
    // Before any server starts: a bad `clients` section fails the start.
    let clients = clients::Clients::from_config(file)?;
    let (builder, hub) = runtime_builder(file, target, local, namespaces, store, trajectory).await?;
    let approver = Arc::new(approval::ElicitingApprover::default());
    let builder = builder.approver(approver.clone()).call_lines(console.is_some());
    let gateway = match fleet_key {
        Some(key) => server::Gateway::fleet_replica(builder.build(), hub, approver, key),
        None => server::Gateway::with_approver(builder.build(), hub, approver),
    };
    gateway.set_clients(clients);
    if let Some(ledger) = console {
        ledger.attach(gateway.code_mode().store().clone());
        gateway.set_console(ledger);
    }
    if let Some(lease) = task_lease_ms {
        gateway.set_task_lease(lease);
    }
    Ok(gateway)
}
