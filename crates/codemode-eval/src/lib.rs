//! # codemode-eval
//!
//! `codemode eval`: does code mode pay, for *these* tasks and *this* model? A suite of tasks
//! ([`suite`]: data files a user extends) runs in several arms ([`suite::Arm`]): `direct` (the
//! upstream MCP servers' tools as they are, through `codemode serve`'s passthrough surface),
//! `codemode` (`exec`/`wait` in front of the same servers) and `codemode-tasks` (the same, with
//! waits driven by the host as MCP tasks). Every episode gets a fresh work directory
//! ([`setup`]), the same real servers, the same checks ([`verify`]), and a model: the recorded
//! [`oracle`] (floors, offline, deterministic) or an [`openai`]-compatible or [`anthropic`]
//! endpoint. What each turn costs is counted with a real BPE ([`tokens`]), and the [`report`] is
//! Markdown, JSON and an SVG plot.
//!
//! The book's "Measuring code mode" page is the user's guide.
//!
//! Layering (docs/src/layout.md): above `codemode-mcp` (whose gateway, passthrough surface and
//! upstream hub each episode runs in process); below the CLI, which is `codemode eval`.
#![forbid(unsafe_code)]

pub mod anthropic;
pub mod episode;
pub mod http;
pub mod js;
pub mod model;
pub mod openai;
pub mod oracle;
pub mod report;
pub mod setup;
pub mod suite;
pub mod surface;
pub mod tokens;
pub mod verify;

pub use episode::EpisodeResult;
pub use model::Model;
pub use report::Report;
pub use suite::{Arm, Suite};

/// How a suite is run.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The arms, in order (each task runs in each).
    pub arms: Vec<Arm>,
    /// Keep every episode's work directory (their paths are logged).
    pub keep_work: bool,
    /// Draw a progress bar on stderr (when it is a terminal).
    pub progress: bool,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions { arms: Arm::ALL.to_vec(), keep_work: false, progress: false }
    }
}

/// Runs every task of `suite` in every arm of `options`, one episode at a time (so the times are
/// comparable), and reports.
pub async fn run_suite(suite: &Suite, model: &dyn Model, options: &EvalOptions) -> Report {
    let total = (suite.tasks.len() * options.arms.len()) as u64;
    let bar = if options.progress {
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}") {
            bar.set_style(style);
        }
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut episodes = Vec::with_capacity(total as usize);
    for task in &suite.tasks {
        for arm in &options.arms {
            bar.set_message(format!("{} / {}", task.id, arm.name()));
            let r = episode::run(suite, task, *arm, model, options.keep_work).await;
            if !r.passed {
                bar.suspend(|| {
                    tracing::warn!(task = %r.task, arm = arm.name(), error = ?r.error, "episode failed");
                });
            }
            episodes.push(r);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Report::new(model.describe(), model.is_oracle(), options.arms.clone(), episodes)
}
