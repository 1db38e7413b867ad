//! Telemetry counters of one code-mode run (contract §17; the shape is ours, contract §5.2 leaves it open).
//!
//! Telemetry never carries tool inputs, outputs, or anything from the environment: only counts, catalog
//! ids and sizes.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most nested tool ids kept in [`CodeModeTelemetry::nested_tool_ids`]; later calls are only counted.
/// Stops a long-running loop of calls from growing every result without bound.
pub const MAX_TRACKED_TOOL_IDS: usize = 64;

/// Most snapshot events kept in [`CodeModeTelemetry::snapshot_events`] (the oldest are dropped first).
pub const MAX_SNAPSHOT_EVENTS: usize = 32;

/// Counters for one code-mode run, accumulated over its `exec` and all its `wait`s.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeModeTelemetry {
    /// The engine that ran the cell (e.g. `"quickjs-wasi"`).
    #[serde(default)]
    pub engine: String,
    /// Size of the run's hidden catalog (contract §17).
    #[serde(default)]
    pub catalog_size: u32,
    /// Catalog entries per source (`openclaw`, `plugin`, `mcp`, `client`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub catalog_by_source: BTreeMap<String, u32>,
    /// Number of `exec` calls (1 for every run).
    pub exec_count: u32,
    /// Number of `wait` calls that resumed this run.
    pub wait_count: u32,
    /// Nested `tools.search` calls.
    pub search_count: u32,
    /// Nested `tools.describe` calls.
    pub describe_count: u32,
    /// Nested tool calls (`tools.call`, `tools.callValue`, convenience functions).
    pub call_count: u32,
    /// Nested tool calls that failed.
    #[serde(default)]
    pub failed_call_count: u32,
    /// Catalog ids of nested calls, in call order (at most [`MAX_TRACKED_TOOL_IDS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nested_tool_ids: Vec<String>,
    /// Failures caused by a limit, by kind.
    #[serde(default, skip_serializing_if = "LimitFailures::is_empty")]
    pub limit_failures: LimitFailures,
    /// Snapshot lifecycle events, oldest first (at most [`MAX_SNAPSHOT_EVENTS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshot_events: Vec<SnapshotEvent>,
    /// Wall-clock milliseconds spent inside `exec`/`wait` calls of this run.
    #[serde(default)]
    pub duration_ms: u64,
    /// Bytes of nested tool results the cell received over the run (each result's compact JSON, or a
    /// failed call's error message): what the cell read without the model reading it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_result_bytes: u64,
    /// Bytes handed back to the caller over the run: each `exec` / `wait` result's output text plus
    /// its return value (compact JSON) or error message, summed over the run's results so far (this
    /// one included) — what the model read. Against [`tool_result_bytes`](Self::tool_result_bytes),
    /// what code mode kept out of the model's context.
    #[serde(default)]
    pub returned_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Counts of failures caused by limits (contract §17: timeout, memory, snapshot and output-limit failures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitFailures {
    /// `timeout`.
    #[serde(default)]
    pub timeout: u32,
    /// `memory_limit_exceeded`.
    #[serde(default)]
    pub memory: u32,
    /// `snapshot_limit_exceeded`.
    #[serde(default)]
    pub snapshot: u32,
    /// `output_limit_exceeded`.
    #[serde(default)]
    pub output: u32,
    /// `too_many_pending_tool_calls`.
    #[serde(default)]
    pub pending_calls: u32,
}

impl LimitFailures {
    /// Whether every counter is zero.
    pub fn is_empty(&self) -> bool {
        *self == LimitFailures::default()
    }
}

/// What happened to a run's snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SnapshotEventKind {
    /// A snapshot was taken and stored.
    Created,
    /// A snapshot was restored by `wait`.
    Restored,
    /// A snapshot was deleted because the run settled.
    Deleted,
    /// A snapshot was refused (over `maxSnapshotBytes`, or the store was full).
    Rejected,
    /// A snapshot could not be restored.
    RestoreFailed,
    /// The run was aborted (`CodeMode::abort`, or its caller went away): its snapshot was deleted.
    Aborted,
    /// The run passed its TTL (`snapshotTtlSeconds`) while suspended: its snapshot was deleted and
    /// its nested calls stopped. (No result reports this; it is a trajectory lifecycle record.)
    Expired,
}

/// One snapshot lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotEvent {
    /// What happened.
    pub event: SnapshotEventKind,
    /// The snapshot's size in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

impl CodeModeTelemetry {
    /// Records a nested call of `tool_id`.
    pub fn record_call(&mut self, tool_id: &str) {
        self.call_count = self.call_count.saturating_add(1);
        if self.nested_tool_ids.len() < MAX_TRACKED_TOOL_IDS {
            self.nested_tool_ids.push(tool_id.to_string());
        }
    }

    /// Records a snapshot event.
    pub fn record_snapshot(&mut self, event: SnapshotEventKind, bytes: Option<u64>) {
        if self.snapshot_events.len() >= MAX_SNAPSHOT_EVENTS {
            self.snapshot_events.remove(0);
        }
        self.snapshot_events.push(SnapshotEvent { event, bytes });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_lists() {
        let mut t = CodeModeTelemetry::default();
        for i in 0..(MAX_TRACKED_TOOL_IDS + 10) {
            t.record_call(&format!("plugin:demo:t{i}"));
        }
        assert_eq!(t.call_count as usize, MAX_TRACKED_TOOL_IDS + 10);
        assert_eq!(t.nested_tool_ids.len(), MAX_TRACKED_TOOL_IDS);
        for _ in 0..(MAX_SNAPSHOT_EVENTS + 3) {
            t.record_snapshot(SnapshotEventKind::Created, Some(1));
        }
        t.record_snapshot(SnapshotEventKind::Deleted, None);
        assert_eq!(t.snapshot_events.len(), MAX_SNAPSHOT_EVENTS);
        assert_eq!(t.snapshot_events.last().unwrap().event, SnapshotEventKind::Deleted);
        let v = serde_json::to_value(&t).unwrap();
        assert!(v.get("limitFailures").is_none());
        assert_eq!(v["snapshotEvents"][0]["event"], "created");
    }
}
