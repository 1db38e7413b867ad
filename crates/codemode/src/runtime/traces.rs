//! Where a run's trajectory records go ([`TraceTarget`]), and the trace each suspended run's `exec`
//! started, so the `wait` spans of the run join it.

use super::Inner;
use codemode_core::executor::RunObserver;
use codemode_core::trajectory::Redaction;
use codemode_snapshot::Clock;
use std::sync::Arc;

/// Most run traces kept. Prevents: runs nobody resumes growing the map (an arbitrary entry goes).
const MAX_RUN_TRACES: usize = 4_096;

/// Where a run's trajectory records go while one `exec` / `wait` call drives it.
pub(crate) struct TraceTarget {
    /// The model-visible call driving the run (`RunContext::tool_call_id` of that call).
    pub(crate) parent: Option<String>,
    /// `exec` or `wait`.
    pub(crate) parent_tool: &'static str,
    /// The runtime-wide trajectory sink (audit log), if any.
    pub(crate) sink: Option<Arc<dyn RunObserver>>,
    pub(crate) redaction: Arc<Redaction>,
    pub(crate) clock: Arc<dyn Clock>,
}

impl Inner {
    /// The trace a run's `exec` started (see [`Inner::remember_run_trace`]).
    pub(crate) fn run_trace(&self, run_id: &str) -> Option<String> {
        self.run_traces.lock().unwrap_or_else(|p| p.into_inner()).get(run_id).cloned()
    }

    /// Remembers the trace of a suspended run's `exec`.
    pub(crate) fn remember_run_trace(&self, run_id: &str, traceparent: String) {
        let mut traces = self.run_traces.lock().unwrap_or_else(|p| p.into_inner());
        if traces.len() >= MAX_RUN_TRACES
            && !traces.contains_key(run_id)
            && let Some(k) = traces.keys().next().cloned()
        {
            traces.remove(&k);
        }
        traces.insert(run_id.to_string(), traceparent);
    }

    /// Forgets a settled run's trace.
    pub(crate) fn forget_run_trace(&self, run_id: &str) {
        self.run_traces.lock().unwrap_or_else(|p| p.into_inner()).remove(run_id);
    }
}
