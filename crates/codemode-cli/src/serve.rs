//! `codemode serve`: an MCP server exposing `exec` and `wait` in front of the configured MCP servers.

use crate::{CommonArgs, load_config_as, report_servers};
use anyhow::{Context as _, Result, bail};
use codemode::config_file::SnapshotStoreConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Options of `codemode serve`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// Serve streamable HTTP at `http://ADDR/mcp` instead of stdio (loopback addresses are
    /// recommended; the Host and Origin headers are checked against the bound address).
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Keep suspended runs in this directory (they survive a restart) instead of in memory.
    #[arg(long, value_name = "DIR", conflicts_with = "store")]
    snapshot_dir: Option<PathBuf>,
    /// Where suspended runs are kept: `memory`, a directory, or `redis://HOST:PORT[/DB]` — a store
    /// shared by a fleet of replicas (any replica resumes any run). `redis` alone takes the URL from
    /// CODEMODE_REDIS_URL. Overrides the config file's `snapshotStore` (whose `keyPrefix` and
    /// `leaseMs` still apply to a Redis URL given here).
    #[arg(long, value_name = "STORE")]
    store: Option<String>,
    /// Also offer the built-in demo tools (`plugin:demo:*`).
    #[arg(long)]
    demo_tools: bool,
    /// Append every `exec` / `wait` call and every nested call it drove to FILE as JSON lines
    /// (trajectory records, inputs and results redacted). Safe to rotate; a write failure is
    /// logged and never fails a run.
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Also serve the operator console at `http://ADDR/console` (needs `--http`): runs, approvals,
    /// upstream servers and the fleet in a browser. Operators log in with the tokens of the config
    /// file's `console.operators`; on a loopback address without any, one operator `local` gets a
    /// random token printed at start. Refused on a non-loopback address without operators.
    #[arg(long, requires = "http")]
    console: bool,
}

/// Environment variable holding the bearer token of the HTTP approval endpoint (`--http` only;
/// without it there is no endpoint).
pub(crate) const APPROVAL_TOKEN_ENV: &str = "CODEMODE_APPROVAL_TOKEN";

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Reads `--store`: `memory`, `redis`, `redis://…`, `rediss://…`, or a directory.
pub(crate) fn store_from_flag(flag: &str) -> Result<SnapshotStoreConfig> {
    Ok(match flag {
        "memory" => SnapshotStoreConfig::Memory,
        "redis" => SnapshotStoreConfig::Redis { url: None, key_prefix: None, lease_ms: None },
        url if url.starts_with("redis://") || url.starts_with("rediss://") || url.starts_with("valkey://") => {
            SnapshotStoreConfig::Redis { url: Some(url.to_string()), key_prefix: None, lease_ms: None }
        }
        "" => bail!("--store needs a value: memory, a directory, or redis://HOST:PORT"),
        dir => SnapshotStoreConfig::Directory { dir: dir.into() },
    })
}

/// The store a command uses: `--store` (a Redis URL named there keeps the config file's `keyPrefix`
/// and `leaseMs`: they say which fleet's keys the command reads and writes), else `--snapshot-dir`.
/// Without either flag the caller decides (`serve` takes the file's `snapshotStore`; the one-shot
/// commands take it when it is shared, see [`crate::StoreArgs::open`]).
pub(crate) fn store_choice(
    flag: Option<&str>,
    dir: Option<&std::path::Path>,
    file: Option<&codemode::config_file::ConfigFile>,
) -> Result<SnapshotStoreConfig> {
    let file_store = file.and_then(|f| f.snapshot_store.as_ref());
    Ok(match (flag, dir) {
        (Some(s), _) => match (store_from_flag(s)?, file_store) {
            (
                SnapshotStoreConfig::Redis { url, .. },
                Some(SnapshotStoreConfig::Redis { key_prefix, lease_ms, url: file_url }),
            ) => SnapshotStoreConfig::Redis {
                url: url.or_else(|| file_url.clone()),
                key_prefix: key_prefix.clone(),
                lease_ms: *lease_ms,
            },
            (flag, _) => flag,
        },
        (None, Some(dir)) => SnapshotStoreConfig::Directory { dir: dir.to_path_buf() },
        (None, None) => match file_store {
            Some(shared @ (SnapshotStoreConfig::Directory { .. } | SnapshotStoreConfig::Redis { .. })) => {
                shared.clone()
            }
            _ => bail!("no shared snapshot store named"),
        },
    })
}

/// Opens the chosen store (see [`codemode_mcp::open_store`]).
pub(crate) async fn open_store(
    choice: Option<SnapshotStoreConfig>,
    file: Option<&codemode::config_file::ConfigFile>,
) -> Result<codemode_mcp::OpenedStore> {
    let signing = file.map(|f| f.run_signing.clone()).unwrap_or_default();
    codemode_mcp::open_store(choice, &signing).await.map_err(|e| anyhow::anyhow!("{e}"))
}

pub(crate) async fn run(args: ServeArgs) -> Result<ExitCode> {
    let file = load_config_as(&args.common, true)?;
    if !file.code_mode.enabled {
        return serve_passthrough(&args, &file).await;
    }
    crate::start_engine_load(&file.code_mode.runtime, Some(&file.code_mode));
    let choice = match (&args.store, &args.snapshot_dir) {
        (None, None) => file.snapshot_store.clone(),
        (flag, dir) => Some(store_choice(flag.as_deref(), dir.as_deref(), Some(&file))?),
    };
    let codemode_mcp::OpenedStore { store, fleet_key, lease_ms, replica } = open_store(choice, Some(&file)).await?;
    let local = if args.demo_tools { codemode_demo::demo_tools() } else { codemode::LocalTools::new() };
    // The demo plugin's namespace is registered with its tools; it is visible only when they are.
    let namespaces = if args.demo_tools { codemode_demo::demo_namespaces() } else { codemode::Namespaces::new() };
    let audit = match &args.audit {
        Some(path) => Some(Arc::new(
            codemode::audit::JsonLinesAudit::start(codemode::audit::AuditTarget::File(path.clone()))
                .map_err(|e| anyhow::anyhow!("audit file {}: {e}", path.display()))?,
        )),
        None => None,
    };
    let console = match (args.console, args.http) {
        (true, Some(addr)) => Some(console_setup(&file, addr, replica)?),
        _ => None,
    };
    let options = codemode_mcp::GatewayOptions {
        local,
        namespaces,
        store,
        trajectory: audit.clone().map(|a| a as Arc<dyn codemode::RunObserver>),
        fleet_key,
        task_lease_ms: lease_ms,
        console: console.as_ref().map(|(setup, _)| setup.ledger.clone()),
    };
    let gw = codemode_mcp::build_gateway(&file, &args.common.target(), options).await?;
    report_servers(gw.hub());
    if !gw.code_mode().engine_available() {
        gw.shutdown().await;
        bail!("engine `{}` is not available in this build", gw.code_mode().engine_name());
    }
    crate::commands::prepare_engine(gw.code_mode()).await;
    report_surface(&gw);
    let served = match args.http {
        None => {
            tracing::info!("serving MCP on stdio");
            tokio::select! {
                r = codemode_mcp::server::serve_stdio(gw.clone()) => r,
                () = shutdown_signal() => Ok(()),
            }
        }
        Some(addr) => {
            if !addr.ip().is_loopback() {
                tracing::warn!(%addr, "serving on a non-loopback address: anyone who can reach it can run code mode cells");
            }
            let listener =
                tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
            eprintln!("codemode: serving MCP at http://{}/mcp", listener.local_addr()?);
            // Out-of-band approvals over HTTP exist only when a token is configured.
            let token = std::env::var(APPROVAL_TOKEN_ENV).ok().filter(|t| !t.is_empty());
            if token.is_some() {
                eprintln!(
                    "codemode: approval endpoint at http://{}/approvals/{{runId}}/{{requestId}} (bearer token from {APPROVAL_TOKEN_ENV})",
                    listener.local_addr()?
                );
            }
            let console = console.map(|(setup, local)| {
                let at = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
                match local {
                    Some(token) => {
                        eprintln!("codemode: console at http://{at}/console (operator \"local\", token {token})")
                    }
                    None => eprintln!("codemode: console at http://{at}/console"),
                }
                setup
            });
            let options = codemode_mcp::server::HttpOptions { approval_token: token, console };
            codemode_mcp::server::serve_http_with(gw.clone(), listener, shutdown_signal(), options).await
        }
    };
    gw.shutdown().await;
    // Every audit record handed over so far is written before the process exits.
    if let Some(a) = audit {
        a.close();
    }
    served.map_err(|e| anyhow::anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}

/// The console's operators and ledger (`--console`): the config's `console.operators`, or on a
/// loopback address without any, one operator `local` with a random token (returned, to print).
fn console_setup(
    file: &codemode::config_file::ConfigFile,
    addr: SocketAddr,
    store_replica: Option<String>,
) -> Result<(codemode_mcp::console::ConsoleSetup, Option<String>)> {
    use codemode_mcp::console::auth::{ConsoleConfig, Operator, random_token};
    let mut config = ConsoleConfig::from_config(file.console.as_ref())?;
    let mut local = None;
    if config.operators.is_empty() {
        if !addr.ip().is_loopback() {
            bail!(
                "--console on the non-loopback address {addr} needs operators with tokens (console.operators in the config file): anyone who reaches it could approve calls and abort runs"
            );
        }
        let token = random_token();
        config.operators.push(Operator::new("local", token.clone()));
        local = Some(token);
    }
    let ttl_ms = file.code_mode.snapshot_ttl_seconds.saturating_mul(1_000);
    let ledger = codemode_mcp::console::ledger::Ledger::new(store_replica, ttl_ms, None);
    Ok((codemode_mcp::console::ConsoleSetup { config, ledger }, local))
}

/// `codemode serve` with code mode disabled (contract V1): the config's upstream servers' tools,
/// served unchanged over stdio or HTTP; no runs, so no store, approvals or demo tools.
async fn serve_passthrough(args: &ServeArgs, file: &codemode::config_file::ConfigFile) -> Result<ExitCode> {
    if args.demo_tools {
        bail!("--demo-tools needs code mode: the demo tools exist only inside `exec` (this config disables code mode)");
    }
    if args.store.is_some() || args.snapshot_dir.is_some() || args.audit.is_some() {
        tracing::warn!("code mode is disabled: --store, --snapshot-dir and --audit have no runs to keep or record");
    }
    let hub = codemode_mcp::connect_servers(file).await?;
    report_servers(&hub);
    let tools: usize = hub.listed_tools().iter().map(|(_, t)| t.len()).sum();
    tracing::info!(tools, "code mode is disabled: serving the upstream servers' tools unchanged");
    let served = match args.http {
        None => {
            tokio::select! {
                r = codemode_mcp::passthrough::serve_stdio_passthrough(hub.clone()) => r,
                () = shutdown_signal() => Ok(()),
            }
        }
        Some(addr) => {
            if !addr.ip().is_loopback() {
                tracing::warn!(%addr, "serving on a non-loopback address: anyone who can reach it can call the upstream tools");
            }
            let listener =
                tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
            eprintln!(
                "codemode: serving MCP at http://{}/mcp (the upstream tools unchanged: code mode is disabled)",
                listener.local_addr()?
            );
            codemode_mcp::passthrough::serve_http_passthrough(hub.clone(), listener, shutdown_signal()).await
        }
    };
    hub.shutdown().await;
    served.map_err(|e| anyhow::anyhow!(e))?;
    Ok(ExitCode::SUCCESS)
}

/// contract §17 at start: the hidden catalog by source, the tool names the model will see, and what
/// code mode saves on the tool list (direct tool definitions vs `exec` + `wait`).
fn report_surface(gw: &codemode_mcp::server::Gateway) {
    let catalog = gw.code_mode().catalog();
    let direct: Vec<codemode::surface::ModelTool> =
        catalog.tools().iter().map(|t| codemode::surface::ModelTool::direct(&t.def)).collect();
    let visible = gw.model_tools();
    let bytes = |t: &[codemode::surface::ModelTool]| serde_json::to_string(t).map(|s| s.len()).unwrap_or(0);
    let (direct_b, code_b) = (bytes(&direct), bytes(&visible));
    let names: Vec<&str> = visible.iter().map(|t| t.name.as_str()).collect();
    let namespaces: Vec<String> = gw.code_mode().visible_namespaces().into_iter().map(|n| n.global_name).collect();
    tracing::info!(
        catalog = catalog.len(),
        by_source = ?catalog.count_by_source(),
        visible_tools = ?names,
        namespaces = ?namespaces,
        direct_bytes = direct_b,
        code_mode_bytes = code_b,
        "catalog of {} tools behind {:?}: tool list {} bytes (~{} tokens) instead of {} bytes (~{} tokens) direct{}",
        catalog.len(),
        names,
        code_b,
        code_b / 4,
        direct_b,
        direct_b / 4,
        if direct_b > 0 { format!(", {:.0}% smaller", 100.0 * (1.0 - code_b as f64 / direct_b as f64)) } else { String::new() },
    );
}
