//! The one-shot commands: `codemode run` (a cell to its end, in this process), `exec` and `wait`
//! (one step each, the run kept in a snapshot directory between processes) and `approve` (a human's
//! decision on a parked call).

use crate::{CommonArgs, Gateway, LanguageArg, StoreArgs, build_traced_runtime, load_config, trace_writer};
use anyhow::{Context as _, Result};
use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, RunContext};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

fn read_cell(file: &str) -> Result<String> {
    if file == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("cannot read the cell from stdin")?;
        Ok(s)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))
    }
}

fn language_of(arg: Option<LanguageArg>, file: &str) -> &'static str {
    match arg {
        Some(LanguageArg::Javascript) => "javascript",
        Some(LanguageArg::Typescript) => "typescript",
        None if Path::new(file).extension().is_some_and(|e| e == "ts" || e == "mts") => "typescript",
        None => "javascript",
    }
}

fn print_json(result: &CodeModeResult) {
    println!(
        "{}",
        serde_json::to_string(result).unwrap_or_else(|e| format!("{{\"status\":\"failed\",\"error\":{e:?}}}"))
    );
}

fn exit_for(result: &CodeModeResult) -> ExitCode {
    match result {
        CodeModeResult::Failed { .. } => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    }
}

/// Most `wait` calls `run` makes before giving up (each is bounded by `timeoutMs`).
const MAX_WAITS: usize = 10_000;

fn exec_input(language: Option<LanguageArg>, file: &str) -> Result<CodeModeExecInput> {
    Ok(CodeModeExecInput {
        code: Some(read_cell(file)?),
        language: Some(language_of(language, file).to_string()),
        ..CodeModeExecInput::default()
    })
}

pub(crate) async fn exec(
    common: CommonArgs,
    store: StoreArgs,
    language: Option<LanguageArg>,
    file: String,
) -> Result<ExitCode> {
    let gw = store.runtime(&common, true).await?;
    let input = exec_input(language, &file)?;
    let result = gw.cm().exec(&common.context(store.session.clone()), &input).await;
    print_json(&result);
    finish_nested_calls(&gw).await;
    gw.close().await;
    Ok(exit_for(&result))
}

/// Prepares the engine before the first cell (compiling the guest module on a machine's first run
/// takes seconds), with a line on stderr; a run never counts preparation against its `timeoutMs`.
pub(crate) async fn prepare_engine(cm: &CodeMode) {
    let started = std::time::Instant::now();
    let prepare = cm.prepare_engine();
    tokio::pin!(prepare);
    let result = match tokio::time::timeout(std::time::Duration::from_millis(300), &mut prepare).await {
        Ok(r) => r,
        Err(_) => {
            // A human is waiting: say why (stderr only; stdout may carry protocol messages).
            eprintln!(
                "codemode: preparing engine `{}` (the first run on a machine compiles the guest module, a few seconds; \
                 later starts load it from the cache)…",
                cm.engine_name()
            );
            prepare.await
        }
    };
    match result {
        Ok(()) => tracing::debug!(ms = started.elapsed().as_millis() as u64, "engine prepared"),
        Err(e) => tracing::warn!(error = %e, "the code mode engine is not available"),
    }
}

/// A nested call this process started must be able to finish even though the process is done:
/// the result is printed first, then the process stays until its nested calls have finished (within
/// the run's lifetime and the tools' own limits) and records their results in the snapshot
/// directory, where the next `codemode wait` — in any process — collects them. Without this, a
/// read-only call slower than `timeoutMs` would be re-issued by every `wait` and never finish.
async fn finish_nested_calls(gw: &Gateway) {
    if gw.cm().has_nested_calls_in_flight() {
        tracing::info!(
            "result printed; finishing nested calls still running (their results go to the snapshot directory)"
        );
        let n = gw.cm().finish_nested_calls().await;
        tracing::info!(recorded = n, "nested calls finished");
    }
}

pub(crate) async fn wait(common: CommonArgs, store: StoreArgs, run_id: String) -> Result<ExitCode> {
    let gw = store.runtime(&common, false).await?;
    let result = gw.cm().wait(&common.context(store.session.clone()), &CodeModeWaitInput::new(run_id)).await;
    print_json(&result);
    finish_nested_calls(&gw).await;
    gw.close().await;
    Ok(exit_for(&result))
}

/// `codemode approve`: records the decision through the runtime's own `decide` (no engine or upstream
/// server is started), prints it as JSON, and writes an audit line to stderr.
pub(crate) async fn approve(
    config: Option<PathBuf>,
    store: StoreArgs,
    run_id: String,
    request_id: u64,
    deny: Option<String>,
) -> Result<ExitCode> {
    let file = config.as_deref().map(codemode::config_file::ConfigFile::load).transpose()?;
    let snapshots = store.open(file.as_ref()).await?;
    let cm = CodeMode::builder(CodeModeConfig::enabled()).store(snapshots).build();
    let id = codemode::RunId::parse(&run_id).map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let decision = match deny {
        Some(reason) => codemode::ApprovalDecision::deny(reason),
        None => codemode::ApprovalDecision::Approve,
    };
    let record = serde_json::json!({ "runId": run_id, "requestId": request_id, "decision": decision });
    match cm.decide(&id, request_id, decision).await {
        Ok(()) => {
            eprintln!("codemode: approval decision recorded: {record}");
            println!("{record}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("codemode: cannot record the decision for run {run_id}: {}", e.message);
            Ok(ExitCode::from(1))
        }
    }
}

pub(crate) async fn run(
    common: CommonArgs,
    language: Option<LanguageArg>,
    steps: bool,
    trace: Option<PathBuf>,
    file: String,
) -> Result<ExitCode> {
    let config = load_config(&common)?;
    let writer = trace_writer(trace.as_deref())?;
    let gw = build_traced_runtime(config, &common, writer.clone().map(|w| w as Arc<dyn codemode::RunObserver>)).await?;
    let cm = gw.cm().clone();
    let input = exec_input(language, &file)?;
    // Each model-visible call gets its own id, as a model's tool calls would (the trajectory's
    // parent ids).
    let mut calls = 0u32;
    let mut ctx_for = |tool: &str| {
        calls += 1;
        RunContext { tool_call_id: Some(format!("{tool}-{calls}")), ..common.context("cli") }
    };
    let ctx = ctx_for("exec");
    let interrupted = || {
        CodeModeResult::failed(
            codemode::CodeModeError::new(codemode::CodeModeErrorCode::Aborted, "aborted by Ctrl-C (SIGINT)"),
            Vec::new(),
            codemode::CodeModeTelemetry { engine: cm.engine_name().to_string(), ..Default::default() },
        )
    };
    // Ctrl-C drops the exec/wait in progress, which aborts the run (nested calls stopped, state
    // deleted); the aborted result is printed like any other.
    let mut result = tokio::select! {
        r = cm.exec(&ctx, &input) => r,
        _ = tokio::signal::ctrl_c() => interrupted(),
    };
    for _ in 0..MAX_WAITS {
        let Some(run_id) = result.run_id().map(str::to_string) else {
            break;
        };
        // Only calls waiting for a human are left: this run lives in this process's
        // memory, so nobody can approve them, and waiting would poll until the run expires.
        if let CodeModeResult::Waiting { pending_tool_calls, .. } = &result
            && !pending_tool_calls.is_empty()
            && pending_tool_calls.iter().all(|p| p.kind == codemode::PendingCallKind::Approval)
        {
            let ids: Vec<String> = pending_tool_calls.iter().map(|p| p.request_id.to_string()).collect();
            eprintln!(
                "codemode: the run is waiting for approval of request {} and `codemode run` keeps it in this process, \
                 where nobody can approve it. Start it with `codemode exec --snapshot-dir DIR`, decide with \
                 `codemode approve --snapshot-dir DIR RUN_ID REQUEST_ID [--deny REASON]`, then resume it with \
                 `codemode wait --snapshot-dir DIR RUN_ID`; or serve it to an MCP client that answers elicitation.",
                ids.join(", ")
            );
            if let Ok(id) = codemode::RunId::parse(&run_id) {
                cm.abort(&id).await;
            }
            break;
        }
        if steps {
            print_json(&result);
        }
        let wait_input = CodeModeWaitInput::new(run_id.clone());
        let ctx = ctx_for("wait");
        result = tokio::select! {
            r = cm.wait(&ctx, &wait_input) => r,
            _ = tokio::signal::ctrl_c() => {
                if let Ok(id) = codemode::RunId::parse(&run_id) {
                    cm.abort(&id).await;
                }
                interrupted()
            }
        };
    }
    gw.close().await;
    if let Some(w) = writer {
        w.close();
    }
    print_json(&result);
    Ok(match result {
        CodeModeResult::Completed { .. } => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}
