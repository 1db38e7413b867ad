//! The metadata of a stored run, as the stores that serialize runs (directory, Redis) keep it next
//! to the engine's snapshot bytes: everything of a [`SuspendedRun`] but the snapshot body.

use codemode_core::engine::{Delivery, Snapshot, SnapshotBody};
use codemode_core::positions::CellPositions;
use codemode_core::result::WaitReason;
use codemode_core::scope::{RunId, RunScope};
use codemode_core::store::{PendingRequest, RunPolicy, StoreError, SuspendedRun};
use codemode_core::telemetry::CodeModeTelemetry;
use serde::{Deserialize, Serialize};

/// A suspended run without its snapshot body (JSON).
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunMeta {
    pub(crate) run_id: RunId,
    pub(crate) scope: RunScope,
    pub(crate) engine: String,
    pub(crate) reason: WaitReason,
    pub(crate) pending: Vec<PendingRequest>,
    pub(crate) ready: Vec<Delivery>,
    pub(crate) restart_safe: bool,
    pub(crate) telemetry: CodeModeTelemetry,
    pub(crate) created_at_ms: u64,
    pub(crate) expires_at_ms: u64,
    #[serde(default)]
    pub(crate) positions: CellPositions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) policy: Option<RunPolicy>,
}

impl RunMeta {
    /// Splits a run into its metadata and its serialized snapshot bytes; a live snapshot cannot be
    /// stored by these stores ([`StoreError::LiveNotSupported`]).
    pub(crate) fn split(run: SuspendedRun) -> Result<(RunMeta, Vec<u8>), StoreError> {
        let SnapshotBody::Serialized(bytes) = run.snapshot.body else {
            return Err(StoreError::LiveNotSupported(run.snapshot.engine));
        };
        let meta = RunMeta {
            run_id: run.run_id,
            scope: run.scope,
            engine: run.snapshot.engine,
            reason: run.reason,
            pending: run.pending,
            ready: run.ready,
            restart_safe: run.restart_safe,
            telemetry: run.telemetry,
            created_at_ms: run.created_at_ms,
            expires_at_ms: run.expires_at_ms,
            positions: run.positions,
            policy: run.policy,
        };
        Ok((meta, bytes))
    }

    /// The run again, with its snapshot bytes.
    pub(crate) fn into_run(self, bytes: Vec<u8>) -> SuspendedRun {
        SuspendedRun {
            run_id: self.run_id,
            scope: self.scope,
            snapshot: Snapshot { engine: self.engine, body: SnapshotBody::Serialized(bytes) },
            reason: self.reason,
            pending: self.pending,
            ready: self.ready,
            restart_safe: self.restart_safe,
            telemetry: self.telemetry,
            created_at_ms: self.created_at_ms,
            expires_at_ms: self.expires_at_ms,
            positions: self.positions,
            policy: self.policy,
        }
    }

    /// The run's listing (see `SnapshotStore::list_runs`), whose stored run takes `stored_bytes`.
    pub(crate) fn listing(&self, stored_bytes: u64) -> codemode_core::store::RunListing {
        codemode_core::store::RunListing::from_parts(
            &self.run_id,
            &self.scope,
            self.reason,
            &self.pending,
            &self.positions,
            (self.created_at_ms, self.expires_at_ms),
            stored_bytes,
        )
    }

    /// Parses metadata JSON; a store's unreadable record is [`StoreError::Corrupt`].
    pub(crate) fn parse(bytes: &[u8]) -> Result<RunMeta, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt(e.to_string()))
    }
}
