//! # codemode (command)
//!
//! The `codemode` binary: the top layer (docs/src/layout.md). It wires the `codemode` facade to files, stdin,
//! stdout and the terminal:
//!
//! - `codemode run FILE|-`: run one cell against the demo catalog, calling `wait` until it ends;
//! - `codemode demo`: a scripted showcase of code mode on the demo catalog;
//! - `codemode exec FILE|-` / `codemode wait RUN_ID`: one `exec` or `wait` per process, with suspended
//!   runs kept in a snapshot directory — a run suspended by one process resumes in another;
//! - `codemode approve RUN_ID REQUEST_ID [--deny REASON]`: a human's decision on a call parked for
//!   approval, recorded in the snapshot directory for the run's next `wait` (in any process);
//! - `codemode serve`: an MCP server exposing `exec`/`wait` in front of upstream MCP servers;
//! - `codemode catalog`: the effective catalog after policy, the quick index, search, sizes;
//! - `codemode bench`: latency, snapshot size and cold start of every compiled engine.
//!
//! Exit status: 0 when the cell completed (or, for `exec`/`wait`, is waiting), 1 when it failed, 2 for
//! usage or configuration errors.
//! Logs go to stderr (`RUST_LOG`, or `OPENCLAW_DEBUG_CODE_MODE=1` for debug logs); stdout carries only
//! results.
#![forbid(unsafe_code)]

mod bench;
mod catalog;
mod commands;
mod demo;
mod eval;
mod fleet_bench;
mod serve;

use anyhow::{Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use codemode::config_file::ConfigFile;
use codemode::{CodeMode, CodeModeConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Exit status of a usage or configuration error.
const EXIT_USAGE: u8 = 2;

#[derive(Parser, Debug)]
#[command(name = "codemode", version, about = "Code mode for LLM agents: exec/wait over a sandboxed JavaScript guest")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LanguageArg {
    Javascript,
    Typescript,
}

#[derive(clap::Args, Debug, Clone)]
struct CommonArgs {
    /// Configuration file (JSON5, `{ tools: { codeMode: {...} } }`). Without one, code mode is
    /// enabled with the contract's defaults (contract §3).
    #[arg(long, value_name = "FILE", env = "CODEMODE_CONFIG")]
    config: Option<PathBuf>,
    /// Engine to use (overrides `tools.codeMode.runtime`).
    #[arg(long, value_name = "NAME")]
    engine: Option<String>,
    #[command(flatten)]
    policy: PolicyArgs,
}

impl CommonArgs {
    /// The policy target named by `--agent`, `--provider` and `--model`.
    pub(crate) fn target(&self) -> codemode::PolicyTarget {
        self.policy.target()
    }

    /// The context of this command's runs in `session`: `--agent` names the run's agent (part of
    /// its scope: a `wait` must name the same), `--provider` and `--model` its model; all three are
    /// stored with a suspended run, whose `wait` must give the same.
    pub(crate) fn context(&self, session: impl Into<String>) -> codemode::RunContext {
        let mut ctx = codemode::RunContext::session(session);
        ctx.scope.agent_id = self.policy.agent.clone();
        ctx.provider = self.policy.provider.clone();
        ctx.model = self.policy.model.clone();
        ctx
    }
}

/// Which agent's overrides and which `tools.byProvider` entry the tool policy applies.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PolicyArgs {
    /// Apply this agent's tool policy (`agents.list[].id` of the config).
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Apply `tools.byProvider` for this model provider ...
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// ... and this model (`byProvider` keys `provider/model`).
    #[arg(long, value_name = "ID", requires = "provider")]
    model: Option<String>,
}

impl PolicyArgs {
    /// The policy target these options name.
    pub(crate) fn target(&self) -> codemode::PolicyTarget {
        codemode::PolicyTarget { agent: self.agent.clone(), provider: self.provider.clone(), model: self.model.clone() }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one cell (a JavaScript file, or `-` for stdin) against the demo catalog until it ends.
    Run {
        #[command(flatten)]
        common: CommonArgs,
        /// Language of the cell (default: from the file extension, else javascript).
        #[arg(long, value_enum)]
        language: Option<LanguageArg>,
        /// Print every intermediate result (one JSON object per line), not only the last.
        #[arg(long)]
        steps: bool,
        /// Write the run's trajectory as JSON lines: every `exec` / `wait` call and every nested
        /// call under it, with redacted inputs and results. `--trace` writes to stderr,
        /// `--trace=FILE` appends to FILE (the `=` keeps FILE apart from the cell argument).
        #[arg(long, value_name = "FILE", num_args = 0..=1, require_equals = true, default_missing_value = "-")]
        trace: Option<PathBuf>,
        /// The cell: a file path, or `-` to read stdin.
        file: String,
    },
    /// A scripted showcase of code mode on the demo catalog.
    Demo {
        #[command(flatten)]
        common: CommonArgs,
        /// Also print the trajectory of every scene (JSON lines on stderr, as `run --trace`).
        #[arg(long)]
        trace: bool,
    },
    /// Start one cell and print its first result (possibly `waiting`, with a runId); suspended runs
    /// are stored in the snapshot directory for `codemode wait`, in this or any other process.
    Exec {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        store: StoreArgs,
        /// Language of the cell (default: from the file extension, else javascript).
        #[arg(long, value_enum)]
        language: Option<LanguageArg>,
        /// The cell: a file path, or `-` to read stdin.
        file: String,
    },
    /// Serve `exec` and `wait` over MCP (stdio, or streamable HTTP with --http) in front of the
    /// config's `mcpServers`.
    Serve(serve::ServeArgs),
    /// Run a suite of tasks with the upstream tools given directly and through code mode, on the
    /// real MCP servers, and report tokens, turns, bytes, time and success per task and arm.
    Eval(eval::EvalArgs),
    /// Show the effective catalog: ids, safe names, hints, what the policy removed, the quick index.
    Catalog(catalog::CatalogArgs),
    /// Measure latency, snapshot size and cold start of every compiled engine (or those named).
    Bench {
        /// Engines to measure (repeatable; default: all compiled).
        #[arg(long = "engine", value_name = "NAME")]
        engines: Vec<String>,
        /// Samples per latency.
        #[arg(long, default_value_t = 200)]
        samples: usize,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Concurrency levels of the throughput rows (repeatable; default 1, 2, 8, 64).
        #[arg(long = "concurrency", value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
        concurrency: Vec<u16>,
        /// Seconds each throughput row runs.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Instead of the engine rows: suspend and resume latency through the memory, directory
        /// and Redis snapshot stores (this Redis; its keys use the prefix `codemode-bench:`), and
        /// the bytes a parked run takes in Redis.
        #[arg(long, value_name = "URL")]
        stores_redis: Option<String>,
        /// Instead of the engine rows: what the operator console adds to an `exec` (trivial
        /// cells through a gateway with the console and one live-update client, and one
        /// without, interleaved; `--samples` batches of 100 each way).
        #[arg(long, conflicts_with = "stores_redis")]
        console: bool,
        /// Instead of the engine rows: `codemode serve --http` measured from outside by a load
        /// generator in this process — trivial cells on one server at each `--concurrency`, and
        /// suspend + resume on one server (memory store) and across three replicas on one Redis
        /// (a `redis-server` it starts), with the CPU each party spends per cell.
        #[arg(long, conflicts_with_all = ["stores_redis", "console"])]
        fleet: bool,
    },
    /// Approve (or, with --deny, refuse) a nested call parked for approval: a `pendingToolCalls`
    /// entry with `kind: "approval"`. The decision is recorded in the snapshot directory; the run's
    /// next `wait`, in any process, runs or rejects the call.
    Approve {
        /// The configuration file whose `snapshotStore` (a fleet's Redis and its `keyPrefix`, or a
        /// directory) holds the run.
        #[arg(long, value_name = "FILE", env = "CODEMODE_CONFIG")]
        config: Option<PathBuf>,
        #[command(flatten)]
        store: StoreArgs,
        /// The run's runId.
        run_id: String,
        /// The parked call's requestId.
        request_id: u64,
        /// Refuse the call with this reason (the guest sees a catchable `nested_tool_failed` error).
        #[arg(long, value_name = "REASON")]
        deny: Option<String>,
    },
    /// Resume a suspended run from the snapshot directory and print its next result.
    Wait {
        #[command(flatten)]
        common: CommonArgs,
        #[command(flatten)]
        store: StoreArgs,
        /// The runId printed by `codemode exec` (or an earlier `wait`).
        run_id: String,
    },
}

#[derive(clap::Args, Debug, Clone)]
struct StoreArgs {
    /// Where suspended runs are kept (default: $XDG_STATE_HOME/codemode/runs, or
    /// ~/.local/state/codemode/runs).
    #[arg(long, value_name = "DIR", env = "CODEMODE_SNAPSHOT_DIR")]
    snapshot_dir: Option<PathBuf>,
    /// Keep suspended runs in a fleet's store instead: `redis://HOST:PORT[/DB]` (or `redis` with
    /// CODEMODE_REDIS_URL), e.g. to approve a call parked by a `codemode serve` replica.
    #[arg(long, value_name = "STORE", conflicts_with = "snapshot_dir")]
    store: Option<String>,
    /// The session the run belongs to; `wait` must name the same one.
    #[arg(long, default_value = "cli")]
    session: String,
}

impl StoreArgs {
    fn dir(&self) -> Result<PathBuf> {
        if let Some(d) = &self.snapshot_dir {
            return Ok(d.clone());
        }
        if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
            return Ok(PathBuf::from(d).join("codemode").join("runs"));
        }
        match std::env::var_os("HOME") {
            Some(h) => Ok(PathBuf::from(h).join(".local/state/codemode/runs")),
            None => bail!("no snapshot directory: pass --snapshot-dir or set CODEMODE_SNAPSHOT_DIR"),
        }
    }

    /// The store these commands share: `--store` (a Redis URL, or a directory), else
    /// `--snapshot-dir`, else the config file's `snapshotStore` when it is a directory or Redis
    /// (a fleet's config: its `keyPrefix` says where the fleet's runs are), else the default
    /// snapshot directory. A Redis URL given with `--store` keeps the file's `keyPrefix` and
    /// `leaseMs`.
    pub(crate) async fn open(
        &self,
        file: Option<&codemode::config_file::ConfigFile>,
    ) -> Result<Arc<dyn codemode::SnapshotStore>> {
        use codemode::config_file::SnapshotStoreConfig;
        let shared_in_file = file.is_some_and(|f| {
            matches!(f.snapshot_store, Some(SnapshotStoreConfig::Directory { .. } | SnapshotStoreConfig::Redis { .. }))
        });
        let choice = if self.store.is_some() || self.snapshot_dir.is_some() || shared_in_file {
            serve::store_choice(self.store.as_deref(), self.snapshot_dir.as_deref(), file)?
        } else {
            SnapshotStoreConfig::Directory { dir: self.dir()? }
        };
        match choice {
            SnapshotStoreConfig::Memory => {
                bail!("--store memory cannot be shared between commands: use a directory or redis://HOST:PORT")
            }
            shared => {
                let store = serve::open_store(Some(shared), file).await?.store;
                store.ok_or_else(|| anyhow::anyhow!("no snapshot store"))
            }
        }
    }

    /// The runtime of `exec` (`first_cell`: its run starts on a new instance, which is built ahead)
    /// or `wait` (its run resumes from its snapshot in an instance of its own: only the engine is
    /// loaded ahead).
    async fn runtime(&self, common: &CommonArgs, first_cell: bool) -> Result<Gateway> {
        let config = load_config(common)?;
        start_engine_load(&config.code_mode.runtime, first_cell.then_some(&config.code_mode));
        let store = self.open(Some(&config)).await?;
        build_runtime_with(config, common, Some(store), None).await
    }
}

/// What must be flushed before the process exits (the OpenTelemetry batch exporter).
struct TracingGuard {
    #[cfg(feature = "otel")]
    provider: Option<codemode::otel::Provider>,
}

impl TracingGuard {
    fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("codemode: OpenTelemetry exporter shutdown: {e}");
        }
    }
}

/// Logs to stderr (`RUST_LOG`, plus what the contract §18 debugging switches enable); with the
/// `otel` feature and `OTEL_EXPORTER_OTLP_ENDPOINT` set, code-mode spans also go to that collector.
fn init_tracing() -> TracingGuard {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _};
    // contract §18 switches (and their CODEMODE_* aliases) add their targets to the filter.
    let switches = codemode_mcp::debug::DebugSwitches::from_env();
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,codemode::serve=info"));
    for d in switches.directives() {
        if let Ok(d) = d.parse() {
            filter = filter.add_directive(d);
        }
    }
    // Colours only on a terminal: a log file or pipe gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi).with_filter(filter);
    #[cfg(feature = "otel")]
    {
        let provider = match codemode::otel::otlp_provider_from_env() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("codemode: {e}; spans are not exported");
                None
            }
        };
        // Without an exporter there is no second layer at all: an absent `Option` layer declares
        // interest in every callsite, so the registry would record every span the stderr filter
        // drops (one per nested call: about a tenth of a nested call's host time).
        let registry = tracing_subscriber::registry().with(fmt);
        let _ = match &provider {
            Some(p) => registry.with(codemode::otel::layer(p)).try_init(),
            None => registry.try_init(),
        };
        TracingGuard { provider }
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = tracing_subscriber::registry().with(fmt).try_init();
        TracingGuard {}
    }
}

/// Loads the code-mode config: the file's `tools.codeMode` when a file is given (a file without that
/// section, such as another MCP client's config, gets code mode enabled with every default; a section
/// that does not enable it is an error), else the defaults with code mode enabled. Keys another
/// program wrote are ignored with one warning.
pub(crate) fn load_config(common: &CommonArgs) -> Result<ConfigFile> {
    load_config_as(common, false)
}

/// [`load_config`], except that with `allow_disabled` a file that disables code mode is returned
/// as it is (`codemode serve` then serves the upstream tools unchanged, contract V1).
pub(crate) fn load_config_as(common: &CommonArgs, allow_disabled: bool) -> Result<ConfigFile> {
    let mut file = match &common.config {
        None => ConfigFile { code_mode: CodeModeConfig::enabled(), ..ConfigFile::default() },
        Some(path) => {
            let mut file = ConfigFile::load(path)?;
            // A file written for another MCP client (Claude Desktop, Cursor, Claude Code) has no
            // `tools.codeMode`: serving it is asking for code mode. An explicit
            // `enabled: false` (or a section without `enabled: true`) still stops here.
            if !file.code_mode_present {
                file.code_mode = CodeModeConfig::enabled();
            }
            let mut ignored = file.ignored_keys.clone();
            if let Some(servers) = &file.mcp_servers {
                ignored.extend(codemode_mcp::config::foreign_server_keys(servers));
            }
            if !ignored.is_empty() {
                tracing::warn!(
                    file = %path.display(),
                    "ignoring settings codemode does not use (another program's): {}",
                    ignored.join(", ")
                );
            }
            if !file.code_mode.enabled && !allow_disabled {
                bail!(
                    "code mode is disabled in {}: set `tools.codeMode.enabled: true` (or `tools.codeMode: true`)",
                    path.display()
                );
            }
            file
        }
    };
    if let Some(engine) = &common.engine {
        file.code_mode.runtime = engine.clone();
    }
    Ok(file)
}

/// Builds the runtime over the demo catalog plus the config's MCP servers, sending every run's
/// trajectory records to `trajectory`.
pub(crate) async fn build_traced_runtime(
    config: ConfigFile,
    common: &CommonArgs,
    trajectory: Option<Arc<dyn codemode::RunObserver>>,
) -> Result<Gateway> {
    start_engine_load(&config.code_mode.runtime, Some(&config.code_mode));
    build_runtime_with(config, common, None, trajectory).await
}

/// The JSON-lines writer of `--trace [FILE]` (`-`: stderr).
pub(crate) fn trace_writer(trace: Option<&std::path::Path>) -> Result<Option<Arc<codemode::audit::JsonLinesAudit>>> {
    use codemode::audit::{AuditTarget, JsonLinesAudit};
    let Some(path) = trace else { return Ok(None) };
    let target =
        if path == std::path::Path::new("-") { AuditTarget::Stderr } else { AuditTarget::File(path.to_path_buf()) };
    let writer = JsonLinesAudit::start(target).map_err(|e| anyhow::anyhow!("trace file {}: {e}", path.display()))?;
    Ok(Some(Arc::new(writer)))
}

/// Builds the runtime of `run`, `demo`, `exec`, `wait`: the config file's semantics through
/// [`CodeModeBuilder::config_file`](codemode::CodeModeBuilder::config_file) (policy, approvals,
/// sandbox, loop detection, namespaces — exactly what an embedding gets), the demo catalog, and the
/// config's MCP servers as the `MCP` namespace. No MCP server is built: these commands have no MCP
/// client, so a gated call parks until `codemode approve` decides it.
async fn build_runtime_with(
    config: ConfigFile,
    common: &CommonArgs,
    store: Option<Arc<dyn codemode::SnapshotStore>>,
    trajectory: Option<Arc<dyn codemode::RunObserver>>,
) -> Result<Gateway> {
    let (builder, hub) = codemode_mcp::runtime_builder(
        &config,
        &common.target(),
        codemode_demo::demo_tools(),
        codemode_demo::demo_namespaces(),
        store,
        trajectory,
    )
    .await?;
    report_servers(&hub);
    let cm = builder.build();
    if !cm.engine_available() {
        hub.shutdown().await;
        bail!(
            "engine `{}` is not available in this build (compiled engines: {})",
            cm.engine_name(),
            codemode::Engines::compiled().join(", ")
        );
    }
    Ok(Gateway { cm, hub })
}

/// Prepares the engine a command will run cells on, in the background, so that the work overlaps
/// the async runtime's start, opening the snapshot store, building the catalog and starting the
/// config's MCP servers instead of delaying the first cell (or, for `serve`, the first answer).
/// When `config` — the whole config the command runs under — is known and the command will start
/// a run on a new instance (not `wait`, which resumes from a snapshot), one instance is built for
/// the limits it gives runs ([`codemode::Engines::prepare_ahead`], which returns at once: on a
/// thread of the engine's own, the native `quickjs` engine builds a VM, and `quickjs-wasi` loads
/// its module — mapped from the module cache, or compiled on a machine's first run — and
/// instantiates it; both start a guest worker meanwhile); else only `quickjs-wasi`'s module is
/// loaded, on a thread of ours (`codemode-load`).
/// The first run waits for this work rather than doing it a second time, and meets its outcome (a
/// failed load fails that run closed as `runtime_unavailable`, a failed instance is built again by
/// the run). Other engines are left alone: boa's preparation builds spare VMs a one-shot command
/// does not need. At most one module load and one instance per process. A command that fails
/// before its first cell (a bad config, an unreachable store) exits without waiting for them; a
/// compile it cut short leaves at most a temporary file in the cache, which a later artifact write
/// removes once it is a day old.
///
/// `engine` is the engine's name (`config.runtime` when `config` is given).
pub(crate) fn start_engine_load(engine: &str, config: Option<&CodeModeConfig>) {
    static LOADING: std::sync::Once = std::sync::Once::new();
    static BUILDING: std::sync::Once = std::sync::Once::new();
    if !PREPARED_AHEAD.contains(&engine) {
        return;
    }
    match config {
        Some(config) => BUILDING.call_once(|| {
            // Building the instance loads the module too (waiting for a load under way).
            LOADING.call_once(|| {});
            if let Err(error) = codemode::Engines::prepare_ahead(config) {
                tracing::debug!(%error, "preparing the engine ahead of the first cell failed");
            }
        }),
        None if engine == MODULE_LOADED_AHEAD => {
            let Some(engine) = codemode::Engines::by_name(engine) else { return };
            LOADING.call_once(|| {
                let spawned = std::thread::Builder::new().name("codemode-load".into()).spawn(move || {
                    if let Err(error) = engine.prepare() {
                        tracing::debug!(%error, "loading the engine ahead of the first cell failed");
                    }
                });
                if let Err(e) = spawned {
                    tracing::debug!(error = %e, "cannot start the engine-loading thread; the first cell loads it");
                }
            });
        }
        None => {}
    }
}

/// The engines [`start_engine_load`] prepares ahead.
const PREPARED_AHEAD: [&str; 2] = [MODULE_LOADED_AHEAD, "quickjs"];

/// The engine with a module to load, which [`start_engine_load`] loads ahead even before it knows
/// the config.
const MODULE_LOADED_AHEAD: &str = "quickjs-wasi";

/// The config a cell-running command will run under when it is known before any file is read: no
/// config file given (the defaults, with `--engine`'s choice). None for `wait`, which starts no
/// new instance (its run resumes from its snapshot).
fn config_before_file(command: &Command) -> Option<CodeModeConfig> {
    if matches!(command, Command::Wait { .. }) {
        return None;
    }
    let common = common_args(command)?;
    if common.config.is_some() {
        return None;
    }
    load_config(common).ok().map(|file| file.code_mode)
}

fn common_args(command: &Command) -> Option<&CommonArgs> {
    match command {
        Command::Run { common, .. }
        | Command::Exec { common, .. }
        | Command::Wait { common, .. }
        | Command::Demo { common, .. } => Some(common),
        Command::Serve(args) => Some(&args.common),
        Command::Approve { .. } | Command::Bench { .. } | Command::Catalog(_) | Command::Eval(_) => None,
    }
}

/// The engine a cell-running command (`run`, `exec`, `wait`, `demo`, `serve`) will use when that is
/// known before its config file is read: `--engine`, or the default when no config file is given.
fn engine_before_config(command: &Command) -> Option<String> {
    let common = common_args(command)?;
    match (&common.engine, &common.config) {
        (Some(engine), _) => Some(engine.clone()),
        (None, None) => Some(CodeModeConfig::enabled().runtime),
        (None, Some(_)) => None,
    }
}

/// Worker threads of the async runtime. `serve` and `bench` run many sessions or cells at once and
/// get two, as before. A one-shot command gets one: a cell's tool calls and its
/// upstream servers' I/O are waits, not work (the guest runs on a thread of its own), and each
/// worker is a thread to start and stop in a process that lives a few milliseconds.
fn runtime_workers(command: &Command) -> usize {
    match command {
        Command::Serve(_) | Command::Bench { .. } | Command::Eval(_) => 2,
        Command::Run { .. }
        | Command::Exec { .. }
        | Command::Wait { .. }
        | Command::Demo { .. }
        | Command::Approve { .. }
        | Command::Catalog(_) => 1,
    }
}

/// Warns on stderr about upstream servers that did not connect.
pub(crate) fn report_servers(hub: &codemode_mcp::McpHub) {
    for s in hub.statuses() {
        if s.state == codemode_mcp::hub::ServerState::Failed {
            let error = codemode::text::for_display(s.error.as_deref().unwrap_or("")).into_owned();
            tracing::warn!(server = %s.name, %error, "MCP server unavailable (codemode restarts it)");
        }
    }
}

/// A command's runtime and its upstream MCP servers, which [`close`](Self::close) stops at the end
/// of the command.
pub(crate) struct Gateway {
    cm: CodeMode,
    hub: Arc<codemode_mcp::McpHub>,
}

impl Gateway {
    pub(crate) fn cm(&self) -> &CodeMode {
        &self.cm
    }

    pub(crate) async fn close(self) {
        self.hub.shutdown().await;
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(EXIT_USAGE) } else { ExitCode::SUCCESS };
        }
    };
    // The engine's preparation first, so it overlaps everything after it (setting up the log
    // subscriber included: the preparation logs only when it fails, well after that).
    match config_before_file(&cli.command) {
        Some(config) => start_engine_load(&config.runtime, Some(&config)),
        None => {
            if let Some(engine) = engine_before_config(&cli.command) {
                start_engine_load(&engine, None);
            }
        }
    }
    let tracing_guard = init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(runtime_workers(&cli.command))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("codemode: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Run { common, language, steps, trace, file } => {
                commands::run(common, language, steps, trace, file).await
            }
            Command::Demo { common, trace } => demo::run(common, trace).await,
            Command::Exec { common, store, language, file } => commands::exec(common, store, language, file).await,
            Command::Wait { common, store, run_id } => commands::wait(common, store, run_id).await,
            Command::Approve { config, store, run_id, request_id, deny } => {
                commands::approve(config, store, run_id, request_id, deny).await
            }
            Command::Bench { engines, samples, json, concurrency, seconds, stores_redis, console, fleet } => {
                match stores_redis {
                    Some(url) => bench::stores(samples, json, &url).await,
                    None if console => bench::console(samples, json).await,
                    None if fleet => {
                        fleet_bench::run(concurrency.into_iter().map(usize::from).collect(), seconds, json).await
                    }
                    None => {
                        let concurrency = concurrency.into_iter().map(usize::from).collect();
                        bench::run(engines, samples, json, bench::Options { concurrency, seconds }).await
                    }
                }
            }
            Command::Catalog(args) => catalog::run(args).await,
            Command::Serve(args) => serve::run(args).await,
            Command::Eval(args) => eval::run(args).await,
        }
    });
    drop(runtime);
    tracing_guard.shutdown();
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("codemode: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_for(args: &[&str]) -> Option<String> {
        let cli = Cli::try_parse_from(std::iter::once("codemode").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        engine_before_config(&cli.command)
    }

    /// The module is loaded ahead only when the engine is known before a config file is read: the
    /// flag wins, no file means the default, and a file (which may name another engine) defers the
    /// decision to after it is read. Commands that run no cell load nothing.
    #[test]
    fn the_engine_loaded_ahead_is_the_one_the_command_will_use() {
        // `CODEMODE_CONFIG` in the environment is a config file as far as clap is concerned.
        let default_engine = codemode::CodeModeConfig::enabled().runtime;
        let default = std::env::var_os("CODEMODE_CONFIG").is_none().then_some(default_engine.as_str());
        assert_eq!(engine_for(&["run", "cell.js"]).as_deref(), default, "the default engine");
        assert_eq!(engine_for(&["run", "--engine", "boa", "cell.js"]).as_deref(), Some("boa"));
        assert_eq!(engine_for(&["run", "--config", "c.json", "--engine", "quickjs", "-"]).as_deref(), Some("quickjs"));
        assert_eq!(engine_for(&["run", "--config", "c.json", "-"]), None, "the file decides");
        assert_eq!(engine_for(&["exec", "cell.js"]).as_deref(), default);
        assert_eq!(engine_for(&["wait", "--engine", "quickjs", "run-id"]).as_deref(), Some("quickjs"));
        assert_eq!(engine_for(&["demo"]).as_deref(), default);
        assert_eq!(engine_for(&["approve", "run-id", "1"]), None, "approve runs no cell");
        assert_eq!(engine_for(&["serve", "--http", "127.0.0.1:0"]).as_deref(), default);
        assert_eq!(engine_for(&["serve", "--engine", "quickjs"]).as_deref(), Some("quickjs"));
        assert_eq!(engine_for(&["bench"]), None, "bench loads every engine itself");
        assert_eq!(engine_for(&["catalog"]), None);
    }

    /// The instance built ahead is built for the config the command will run under, and only when
    /// that is known before any file is read: no config file means the defaults with `--engine`'s
    /// choice (exactly what `load_config` gives the run); a file may set other limits, so the
    /// instance waits until it is read. Commands that start no new instance (`wait` resumes from a
    /// snapshot) or run no cell build nothing.
    #[test]
    fn the_instance_built_ahead_is_for_the_config_the_command_will_use() {
        let config_for = |args: &[&str]| {
            let cli = Cli::try_parse_from(std::iter::once("codemode").chain(args.iter().copied()))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            config_before_file(&cli.command)
        };
        if std::env::var_os("CODEMODE_CONFIG").is_none() {
            assert_eq!(config_for(&["run", "cell.js"]), Some(CodeModeConfig::enabled()));
            let native = CodeModeConfig { runtime: "quickjs".into(), ..CodeModeConfig::enabled() };
            assert_eq!(config_for(&["run", "--engine", "quickjs", "cell.js"]), Some(native.clone()));
            assert_eq!(config_for(&["serve", "--engine", "quickjs"]), Some(native.clone()));
            let cli = Cli::try_parse_from(["codemode", "exec", "--engine", "quickjs", "cell.js"])
                .unwrap_or_else(|e| panic!("{e}"));
            let Command::Exec { common, .. } = &cli.command else { panic!("not exec") };
            let used = load_config(common).unwrap_or_else(|e| panic!("{e}")).code_mode;
            assert_eq!(config_before_file(&cli.command), Some(used), "the run's own config");
        }
        assert_eq!(config_for(&["run", "--config", "c.json", "-"]), None, "the file decides");
        assert_eq!(config_for(&["run", "--config", "c.json", "--engine", "quickjs", "-"]), None);
        assert_eq!(config_for(&["wait", "run-id"]), None, "a wait resumes from its snapshot");
        assert_eq!(config_for(&["approve", "run-id", "1"]), None);
        assert_eq!(config_for(&["bench"]), None);
        assert_eq!(config_for(&["catalog"]), None);
    }
}
