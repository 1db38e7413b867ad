//! `codemode eval`: a suite of tasks in several arms with one model, and its report (see
//! `codemode_eval` and the book's "Measuring code mode").

use anyhow::{Context, Result, bail};
use codemode_eval::{Arm, EvalOptions, Model, Suite};
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `codemode eval`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct EvalArgs {
    /// The suite's directory (`servers.json5` and `tasks/*.json5`).
    #[arg(long, value_name = "DIR", default_value = "eval")]
    suite: PathBuf,
    /// Run only this task (repeatable; default: every task).
    #[arg(long = "task", value_name = "ID")]
    tasks: Vec<String>,
    /// Arms to run (repeatable: direct, codemode, codemode-tasks; default: all three).
    #[arg(long = "arm", value_name = "ARM")]
    arms: Vec<String>,
    /// The model: `oracle` (recorded trajectories, offline: floors), `openai` (any Chat
    /// Completions endpoint: OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL) or `anthropic`
    /// (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_MODEL).
    #[arg(long, default_value = "oracle", value_parser = ["oracle", "openai", "anthropic"])]
    model: String,
    /// Where the report goes: report.md, report.json, report.svg.
    #[arg(long, value_name = "DIR", default_value = "eval-report")]
    out: PathBuf,
    /// Keep every episode's work directory (their paths are logged) and put its transcript in
    /// report.json.
    #[arg(long)]
    keep_work: bool,
}

pub(crate) async fn run(args: EvalArgs) -> Result<ExitCode> {
    let mut suite =
        Suite::load(&args.suite).with_context(|| format!("cannot load the suite in {}", args.suite.display()))?;
    suite.select(&args.tasks)?;
    let mut arms = Vec::new();
    for a in &args.arms {
        match Arm::parse(a) {
            Some(arm) if !arms.contains(&arm) => arms.push(arm),
            Some(_) => {}
            None => bail!("unknown arm `{a}`: direct, codemode or codemode-tasks"),
        }
    }
    if arms.is_empty() {
        arms = Arm::ALL.to_vec();
    }
    let model: Box<dyn Model> = match args.model.as_str() {
        "openai" => Box::new(codemode_eval::openai::OpenAi::from_env()?),
        "anthropic" => Box::new(codemode_eval::anthropic::Anthropic::from_env()?),
        _ => Box::new(codemode_eval::oracle::Oracle::new()),
    };
    use std::io::IsTerminal as _;
    let options = EvalOptions { arms, keep_work: args.keep_work, progress: std::io::stderr().is_terminal() };
    eprintln!("codemode eval: {} task(s) × {} arm(s) with {}", suite.tasks.len(), options.arms.len(), model.describe());
    let report = codemode_eval::run_suite(&suite, model.as_ref(), &options).await;
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let write = |name: &str, text: String| -> Result<()> {
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))
    };
    write("report.json", report.to_json())?;
    write("report.md", report.to_markdown())?;
    write("report.svg", report.to_svg())?;
    for (arm, t) in &report.totals {
        println!(
            "{:<15} passed {:>3}/{:<3} input tokens {:>9} output tokens {:>7} turns {:>4} tool calls {:>4} result bytes {:>9} wall {:>7} ms",
            arm.name(),
            t.passed,
            t.episodes,
            t.input_tokens,
            t.output_tokens,
            t.turns,
            t.tool_calls,
            t.result_bytes,
            t.wall_ms
        );
    }
    println!("report: {}/report.md (and report.json, report.svg)", args.out.display());
    let failures = report.failures();
    for f in &failures {
        eprintln!("codemode eval: failed: {f}");
    }
    Ok(if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
