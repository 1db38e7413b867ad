//! The in-memory snapshot store.

use crate::clock::{Clock, SystemClock};
use codemode_core::approval::ApprovalDecision;
use codemode_core::engine::RequestId;
use codemode_core::scope::{RunId, RunScope};
use codemode_core::store::{
    ConsoleKind, MAX_SUSPENDED_RUNS, RunListing, RunPage, SnapshotStore, StoreError, SuspendedRun, page_runs,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// How long after its expiry a checked-out run is still held for the `wait` that took it; after that
/// the slot is reclaimed (the longest `wait` is 60 s).
const CHECKOUT_GRACE_MS: u64 = 120_000;

enum Slot {
    Suspended(Box<SuspendedRun>),
    /// Held by a `wait`; `parked` are the requests that were parked for approval when it took the
    /// run (the ids a human was shown), the only ones a decision may name meanwhile.
    CheckedOut {
        scope: RunScope,
        expires_at_ms: u64,
        parked: Vec<RequestId>,
    },
}

impl Slot {
    fn expired(&self, now: u64) -> bool {
        match self {
            Slot::Suspended(run) => now >= run.expires_at_ms,
            Slot::CheckedOut { expires_at_ms, .. } => now >= expires_at_ms.saturating_add(CHECKOUT_GRACE_MS),
        }
    }
}

/// Keeps suspended runs in process memory (the default store).
///
/// Limits: at most `max_runs` (64 by contract §6) runs held at once, so suspended VMs cannot exhaust host
/// memory; each run is dropped at its expiry (`snapshotTtlSeconds`, set by the runtime per run).
pub struct MemorySnapshotStore {
    slots: Mutex<HashMap<RunId, Slot>>,
    /// Approval decisions not yet collected, per run (dropped with the run).
    decisions: Mutex<HashMap<RunId, BTreeMap<RequestId, ApprovalDecision>>>,
    clock: Arc<dyn Clock>,
    max_runs: usize,
    /// Runs served as tasks (at most [`crate::MAX_TASK_RECORDS`] records).
    tasks: crate::tasks::TaskTable,
    /// The operator console's records (journals, replica reports).
    console: crate::console::ConsoleTable,
}

impl std::fmt::Debug for MemorySnapshotStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySnapshotStore").field("max_runs", &self.max_runs).finish_non_exhaustive()
    }
}

impl Default for MemorySnapshotStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemorySnapshotStore {
    /// A store with the system clock and the contract's cap of 64 runs (contract §6).
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// A store with a given clock (tests).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
            decisions: Mutex::new(HashMap::new()),
            clock,
            max_runs: MAX_SUSPENDED_RUNS,
            tasks: Default::default(),
            console: Default::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RunId, Slot>> {
        // A panic while holding the lock cannot leave the map half-updated (every update is one
        // insert or remove), so a poisoned lock is still usable.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn decisions(&self) -> MutexGuard<'_, HashMap<RunId, BTreeMap<RequestId, ApprovalDecision>>> {
        self.decisions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn purge_locked(slots: &mut HashMap<RunId, Slot>, now: u64) -> Vec<RunId> {
        let expired: Vec<RunId> = slots.iter().filter(|(_, s)| s.expired(now)).map(|(id, _)| id.clone()).collect();
        for id in &expired {
            slots.remove(id);
        }
        expired
    }
}

#[async_trait::async_trait]
impl SnapshotStore for MemorySnapshotStore {
    fn name(&self) -> &str {
        "memory"
    }

    fn accepts_live(&self) -> bool {
        true
    }

    async fn put(&self, run: SuspendedRun) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let mut slots = self.lock();
        let resuspension = matches!(slots.get(&run.run_id), Some(Slot::CheckedOut { .. }));
        if !resuspension {
            Self::purge_locked(&mut slots, now);
            if slots.len() >= self.max_runs {
                return Err(StoreError::TooMany);
            }
        }
        slots.insert(run.run_id.clone(), Slot::Suspended(Box::new(run)));
        Ok(())
    }

    async fn checkout(&self, run_id: &RunId, scope: &RunScope) -> Result<SuspendedRun, StoreError> {
        let now = self.clock.now_ms();
        let mut slots = self.lock();
        let slot = slots.get(run_id).ok_or(StoreError::Unavailable)?;
        if slot.expired(now) {
            slots.remove(run_id);
            return Err(StoreError::Unavailable);
        }
        let owner = match slot {
            Slot::Suspended(run) => &run.scope,
            Slot::CheckedOut { scope, .. } => scope,
        };
        owner.check(scope).map_err(StoreError::WrongScope)?;
        match slots.remove(run_id) {
            Some(Slot::Suspended(run)) => {
                let hold = Slot::CheckedOut {
                    scope: run.scope.clone(),
                    expires_at_ms: run.expires_at_ms,
                    parked: run.parked(),
                };
                slots.insert(run_id.clone(), hold);
                Ok(*run)
            }
            Some(held) => {
                slots.insert(run_id.clone(), held);
                Err(StoreError::Busy)
            }
            None => Err(StoreError::Unavailable),
        }
    }

    async fn remove(&self, run_id: &RunId) -> bool {
        self.decisions().remove(run_id);
        self.lock().remove(run_id).is_some()
    }

    async fn purge_expired(&self) -> Vec<RunId> {
        let now = self.clock.now_ms();
        let expired = Self::purge_locked(&mut self.lock(), now);
        let mut decisions = self.decisions();
        for id in &expired {
            decisions.remove(id);
        }
        expired
    }

    async fn record_decision(
        &self,
        run_id: &RunId,
        request_id: RequestId,
        decision: &ApprovalDecision,
    ) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        {
            let mut slots = self.lock();
            match slots.get(run_id) {
                Some(slot) if !slot.expired(now) => {
                    let parked = match slot {
                        Slot::Suspended(run) => run.parked(),
                        Slot::CheckedOut { parked, .. } => parked.clone(),
                    };
                    if !parked.contains(&request_id) {
                        return Err(StoreError::NotParked { request_id, parked });
                    }
                }
                Some(_) => {
                    slots.remove(run_id);
                    self.decisions().remove(run_id);
                    return Err(StoreError::Expired);
                }
                None => return Err(StoreError::Unavailable),
            }
        }
        self.decisions().entry(run_id.clone()).or_default().insert(request_id, decision.clone());
        Ok(())
    }

    async fn has_decisions(&self, run_id: &RunId) -> Result<bool, StoreError> {
        Ok(self.decisions().get(run_id).is_some_and(|m| !m.is_empty()))
    }

    async fn take_decisions(&self, run_id: &RunId) -> Result<Vec<(RequestId, ApprovalDecision)>, StoreError> {
        Ok(self.decisions().remove(run_id).map(|m| m.into_iter().collect()).unwrap_or_default())
    }

    async fn task(&self, task_id: &str) -> Result<Option<codemode_core::task::TaskRecord>, StoreError> {
        Ok(self.tasks.get(task_id, self.clock.now_ms()))
    }

    async fn put_task(&self, task: &codemode_core::task::TaskRecord, driver: Option<&str>) -> Result<bool, StoreError> {
        self.tasks.put(task, driver, self.clock.now_ms())
    }

    async fn drive_task(&self, task_id: &str, driver: &str, lease_ms: u64) -> Result<bool, StoreError> {
        Ok(self.tasks.drive(task_id, driver, lease_ms, self.clock.now_ms()))
    }

    async fn orphaned_tasks(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        Ok(self.tasks.orphaned(limit, self.clock.now_ms()))
    }

    async fn release_task(&self, task_id: &str, driver: &str) -> Result<(), StoreError> {
        self.tasks.release(task_id, driver);
        Ok(())
    }

    async fn count(&self) -> usize {
        self.lock().len()
    }

    async fn list_runs(
        &self,
        scope: Option<&RunScope>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let now = self.clock.now_ms();
        let runs: Vec<RunListing> = self
            .lock()
            .iter()
            .filter(|(_, slot)| !slot.expired(now))
            .filter_map(|(id, slot)| {
                let listing = match slot {
                    Slot::Suspended(run) => RunListing::of(run),
                    Slot::CheckedOut { scope, expires_at_ms, .. } => RunListing::checked_out(id, scope, *expires_at_ms),
                };
                scope.is_none_or(|s| *s == listing.scope).then_some(listing)
            })
            .collect();
        Ok(page_runs(runs, cursor, limit))
    }

    async fn put_console_record(
        &self,
        kind: ConsoleKind,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        self.console.put(kind, key, value, ttl_ms, self.clock.now_ms())
    }

    async fn console_record(&self, kind: ConsoleKind, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.console.get(kind, key, self.clock.now_ms()))
    }

    async fn console_records(&self, kind: ConsoleKind, limit: usize) -> Result<Vec<String>, StoreError> {
        Ok(self.console.list(kind, limit, self.clock.now_ms()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use codemode_core::engine::{Snapshot, SnapshotBody};
    use codemode_core::result::WaitReason;
    use codemode_core::scope::{MSG_OTHER_SESSION, MSG_UNAVAILABLE, ScopeMismatch};
    use codemode_core::telemetry::CodeModeTelemetry;

    fn run(id: &str, session: &str, expires_at_ms: u64) -> SuspendedRun {
        SuspendedRun {
            run_id: RunId::parse(id).unwrap(),
            scope: RunScope::session(session),
            snapshot: Snapshot { engine: "test".into(), body: SnapshotBody::Serialized(vec![1, 2, 3]) },
            reason: WaitReason::Yield,
            pending: vec![],
            ready: vec![],
            restart_safe: false,
            telemetry: CodeModeTelemetry::default(),
            created_at_ms: 0,
            expires_at_ms,
            positions: Default::default(),
            policy: Some(codemode_core::store::RunPolicy::default()),
        }
    }

    fn id(s: &str) -> RunId {
        RunId::parse(s).unwrap()
    }

    #[tokio::test]
    async fn v25_sixty_fifth_suspension_is_rejected() {
        let clock = ManualClock::at(1000);
        let store = MemorySnapshotStore::with_clock(Arc::new(clock.clone()));
        for i in 0..64 {
            store.put(run(&format!("r{i}"), "s", 10_000)).await.unwrap();
        }
        let err = store.put(run("r64", "s", 10_000)).await.unwrap_err();
        assert_eq!(err, StoreError::TooMany);
        assert_eq!(err.to_string(), "too many suspended code mode runs.");
        // A checked-out run re-suspending does not need a new slot.
        let taken = store.checkout(&id("r3"), &RunScope::session("s")).await.unwrap();
        store.put(taken).await.unwrap();
        // Expired runs free their slots.
        clock.advance_ms(20_000);
        store.put(run("r64", "s", 40_000)).await.unwrap();
        assert_eq!(store.count().await, 1);
    }

    #[tokio::test]
    async fn v22_v26_lookup_failures() {
        let clock = ManualClock::at(0);
        let store = MemorySnapshotStore::with_clock(Arc::new(clock.clone()));
        store.put(run("a", "s1", 5_000)).await.unwrap();
        assert_eq!(store.checkout(&id("zzz"), &RunScope::session("s1")).await.unwrap_err(), StoreError::Unavailable);
        let e = store.checkout(&id("a"), &RunScope::session("s2")).await.unwrap_err();
        assert_eq!(e, StoreError::WrongScope(ScopeMismatch::Session));
        assert_eq!(e.to_string(), MSG_OTHER_SESSION);
        // Another session's failed attempt does not consume the run.
        let taken = store.checkout(&id("a"), &RunScope::session("s1")).await.unwrap();
        // WF5: a concurrent wait is refused while the first holds the run.
        assert_eq!(store.checkout(&id("a"), &RunScope::session("s1")).await.unwrap_err(), StoreError::Busy);
        store.put(taken).await.unwrap();
        clock.advance_ms(5_000);
        let e = store.checkout(&id("a"), &RunScope::session("s1")).await.unwrap_err();
        assert_eq!(e, StoreError::Unavailable);
        assert_eq!(e.to_string(), MSG_UNAVAILABLE);
        assert_eq!(store.count().await, 0, "expired runs are deleted on lookup");
    }

    #[tokio::test]
    async fn remove_and_purge() {
        let clock = ManualClock::at(0);
        let store = MemorySnapshotStore::with_clock(Arc::new(clock.clone()));
        store.put(run("a", "s", 100)).await.unwrap();
        store.put(run("b", "s", 1_000)).await.unwrap();
        assert!(store.remove(&id("b")).await);
        assert!(!store.remove(&id("b")).await);
        clock.advance_ms(100);
        assert_eq!(store.purge_expired().await, vec![id("a")]);
        assert_eq!(store.count().await, 0);
    }
}
