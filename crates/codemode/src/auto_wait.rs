//! Zero-token waiting for hosts: `exec` and `wait` resume a `waiting` run themselves, within a
//! budget, so an agent loop pays one model turn for a cell however long its tools take
//! (book: "Zero-token waiting").
//!
//! A run suspended on slow nested calls (or `yield_control`) is resumed with `wait` until it
//! completes, fails, or the budget — wall time and number of resumes, counted from the call's start
//! and checked between resumes — runs out; only then is `waiting` handed back. A run with a call
//! parked for approval is handed back at once: approvals still stop and ask. The output of the
//! intermediate results is carried into the result handed back, in order.
//!
//! Off by default in the Rust API ([`AutoWait::OFF`]); the framework adapters of the language
//! packages turn it on with [`AutoWait::ADAPTER_DEFAULT`].

use crate::CodeMode;
use codemode_core::executor::RunObserver;
use codemode_core::input::CodeModeWaitInput;
use codemode_core::result::{CodeModeOutput, CodeModeResult, PendingCallKind};
use codemode_core::scope::RunContext;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How far one `exec` / `wait` call resumes a waiting run itself before handing `waiting` back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AutoWait {
    /// Longest wall time one call keeps resuming, from its start (checked between resumes: one
    /// resume can take up to `timeoutMs`). Bounds how long a host's call blocks its agent loop.
    pub max_wall: Duration,
    /// Most resumes one call makes. Bounds a cell that yields in a loop.
    pub max_resumes: u32,
}

impl AutoWait {
    /// No resumes: every `waiting` result is handed back (the Rust API's default).
    pub const OFF: AutoWait = AutoWait { max_wall: Duration::ZERO, max_resumes: 0 };

    /// The framework adapters' default: up to 5 minutes and 50 resumes per call.
    pub const ADAPTER_DEFAULT: AutoWait = AutoWait { max_wall: Duration::from_secs(300), max_resumes: 50 };

    /// A budget of `max_wall` and `max_resumes`.
    pub const fn new(max_wall: Duration, max_resumes: u32) -> Self {
        AutoWait { max_wall, max_resumes }
    }

    /// Whether this budget never resumes.
    pub fn is_off(&self) -> bool {
        self.max_resumes == 0 || self.max_wall.is_zero()
    }

    /// Whether `r` is resumed, `resumes` resumes into a call that started at `started`.
    fn resumes(&self, r: &CodeModeResult, started: Instant, resumes: u32) -> bool {
        let CodeModeResult::Waiting { pending_tool_calls, .. } = r else { return false };
        resumes < self.max_resumes
            && started.elapsed() < self.max_wall
            && !pending_tool_calls.iter().any(|p| p.kind == PendingCallKind::Approval)
    }
}

/// Puts `earlier` before `r`'s own output.
fn carry_output(r: &mut CodeModeResult, mut earlier: Vec<CodeModeOutput>) {
    if earlier.is_empty() {
        return;
    }
    let output = r.output_mut();
    earlier.append(output);
    *output = earlier;
}

impl CodeMode {
    /// This runtime with another auto-wait budget (the same runtime: runs, stores and tools are
    /// shared).
    pub fn with_auto_wait(&self, budget: AutoWait) -> CodeMode {
        CodeMode { auto_wait: budget, ..self.clone() }
    }

    /// The auto-wait budget of `exec` / `wait` on this runtime.
    pub fn auto_wait(&self) -> AutoWait {
        self.auto_wait
    }

    /// Resumes `r` while the budget allows (see the module docs).
    pub(crate) async fn keep_waiting(
        &self,
        ctx: &RunContext,
        mut r: CodeModeResult,
        started: Instant,
        observer: Option<Arc<dyn RunObserver>>,
    ) -> CodeModeResult {
        let budget = self.auto_wait;
        let mut resumes = 0;
        while budget.resumes(&r, started, resumes) {
            let Some(run_id) = r.run_id().map(str::to_string) else { break };
            let carried = std::mem::take(r.output_mut());
            r = self.wait_once(ctx, &CodeModeWaitInput::new(run_id), observer.clone()).await;
            carry_output(&mut r, carried);
            resumes += 1;
        }
        r
    }
}
