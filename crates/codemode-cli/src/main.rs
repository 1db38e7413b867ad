//! # codemode (command)
//!
//! The `codemode` binary: the top layer (DESIGN §2). It wires the `codemode` facade to files, stdin,
//! stdout and the terminal:
//!
//! - `codemode run FILE|-`: run one cell against the demo catalog, calling `wait` until it ends;
//! - `codemode demo`: a scripted showcase of code mode on the demo catalog.
//!
//! Exit status: 0 when the cell completed, 1 when it failed, 2 for usage or configuration errors.
//! Logs go to stderr (`RUST_LOG`, or `OPENCLAW_DEBUG_CODE_MODE=1` for debug logs); stdout carries only
//! results.
#![forbid(unsafe_code)]

mod demo;

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand, ValueEnum};
use codemode::config_file::ConfigFile;
use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, RunContext};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
    /// enabled with the SPEC defaults.
    #[arg(long, value_name = "FILE", env = "CODEMODE_CONFIG")]
    config: Option<PathBuf>,
    /// Engine to use (overrides `tools.codeMode.runtime`).
    #[arg(long, value_name = "NAME")]
    engine: Option<String>,
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
        /// The cell: a file path, or `-` to read stdin.
        file: String,
    },
    /// A scripted showcase of code mode on the demo catalog.
    Demo {
        #[command(flatten)]
        common: CommonArgs,
    },
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let debug = std::env::var("OPENCLAW_DEBUG_CODE_MODE").is_ok_and(|v| v == "1");
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(if debug { "codemode=debug,warn" } else { "warn" }));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// Loads the code-mode config: the file's `tools.codeMode` when a file is given (which must enable
/// code mode), else the defaults with code mode enabled.
pub(crate) fn load_config(common: &CommonArgs) -> Result<CodeModeConfig> {
    let mut config = match &common.config {
        None => CodeModeConfig::enabled(),
        Some(path) => {
            let file = ConfigFile::load(path)?;
            if !file.code_mode.enabled {
                bail!(
                    "code mode is disabled in {}: set `tools.codeMode.enabled: true` (or `tools.codeMode: true`)",
                    path.display()
                );
            }
            file.code_mode
        }
    };
    if let Some(engine) = &common.engine {
        config.runtime = engine.clone();
    }
    Ok(config)
}

/// Builds the runtime over the demo catalog.
pub(crate) fn build_runtime(config: CodeModeConfig) -> Result<CodeMode> {
    let cm = CodeMode::builder(config).local_tools(codemode::demo::demo_tools()).build();
    if !cm.engine_available() {
        bail!(
            "engine `{}` is not available in this build (compiled engines: {})",
            cm.engine_name(),
            codemode::Engines::compiled().join(", ")
        );
    }
    Ok(cm)
}

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
        CodeModeResult::Completed { .. } => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    }
}

/// Most `wait` calls `run` makes before giving up (each is bounded by `timeoutMs`).
const MAX_WAITS: usize = 10_000;

async fn run(common: CommonArgs, language: Option<LanguageArg>, steps: bool, file: String) -> Result<ExitCode> {
    let config = load_config(&common)?;
    let cm = build_runtime(config)?;
    let code = read_cell(&file)?;
    let input = CodeModeExecInput {
        code: Some(code),
        language: Some(language_of(language, &file).to_string()),
        ..CodeModeExecInput::default()
    };
    let ctx = RunContext::session("cli");
    let mut result = cm.exec(&ctx, &input).await;
    for _ in 0..MAX_WAITS {
        let Some(run_id) = result.run_id().map(str::to_string) else {
            break;
        };
        if steps {
            print_json(&result);
        }
        result = cm.wait(&ctx, &CodeModeWaitInput::new(run_id)).await;
    }
    print_json(&result);
    Ok(exit_for(&result))
}

fn main() -> ExitCode {
    init_tracing();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(EXIT_USAGE) } else { ExitCode::SUCCESS };
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("codemode: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Run { common, language, steps, file } => run(common, language, steps, file).await,
            Command::Demo { common } => demo::run(common).await,
        }
    });
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("codemode: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}
