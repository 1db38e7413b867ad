//! Task records and drive claims kept in one process (the memory store's, see
//! `codemode_core::task`), and the checks every store shares.

use codemode_core::store::StoreError;
use codemode_core::task::TaskRecord;
use std::collections::HashMap;
use std::sync::Mutex;

/// At most this many task records are kept by one in-process table. Prevents: a client that starts
/// task after task (each finishing quickly, so the 64-run cap never binds) growing the process's
/// memory with finished records until their TTL ends.
pub const MAX_TASK_RECORDS: usize = 4_096;

/// Largest task record a store writes (its JSON). The result inside is bounded by the output limits
/// already; this stops a record carried over many resumes from growing past any of them.
pub const MAX_TASK_RECORD_BYTES: usize = 16 << 20;

/// The record as stored: JSON, refused past [`MAX_TASK_RECORD_BYTES`].
pub(crate) fn encode(task: &TaskRecord) -> Result<Vec<u8>, StoreError> {
    let json = serde_json::to_vec(task).map_err(|e| StoreError::Encode(e.to_string()))?;
    if json.len() > MAX_TASK_RECORD_BYTES {
        return Err(StoreError::Encode(format!(
            "task record of {} bytes is over the {MAX_TASK_RECORD_BYTES}-byte limit",
            json.len()
        )));
    }
    Ok(json)
}

/// A stored record read back; `None` when it is not a record or names another task (a record
/// written under one task's key never answers for another).
pub(crate) fn decode(task_id: &str, json: &[u8]) -> Option<TaskRecord> {
    serde_json::from_slice::<TaskRecord>(json).ok().filter(|t| t.task_id == task_id)
}

/// Tasks and their drive claims in process memory.
#[derive(Debug, Default)]
pub(crate) struct TaskTable {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    records: HashMap<String, TaskRecord>,
    /// Task id → (driver, lease end in Unix ms).
    claims: HashMap<String, (String, u64)>,
}

impl TaskTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every update is one insert or remove: a poisoned lock left nothing half-done.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, task_id: &str, now: u64) -> Option<TaskRecord> {
        let mut inner = self.lock();
        match inner.records.get(task_id) {
            Some(t) if t.expired(now) => {
                inner.records.remove(task_id);
                inner.claims.remove(task_id);
                None
            }
            other => other.cloned(),
        }
    }

    pub(crate) fn put(&self, task: &TaskRecord, driver: Option<&str>, now: u64) -> Result<bool, StoreError> {
        encode(task)?;
        let mut inner = self.lock();
        if inner.records.get(&task.task_id).is_some_and(|t| !t.expired(now) && t.state.is_terminal()) {
            return Ok(false);
        }
        if let Some(d) = driver
            && inner.claims.get(&task.task_id).is_some_and(|(holder, until)| holder != d && *until > now)
        {
            return Ok(false);
        }
        if !inner.records.contains_key(&task.task_id) && inner.records.len() >= MAX_TASK_RECORDS {
            inner.records.retain(|_, t| !t.expired(now));
            let Inner { records, claims } = &mut *inner;
            claims.retain(|id, _| records.contains_key(id));
            if inner.records.len() >= MAX_TASK_RECORDS {
                return Err(StoreError::TooMany);
            }
        }
        inner.records.insert(task.task_id.clone(), task.clone());
        Ok(true)
    }

    pub(crate) fn drive(&self, task_id: &str, driver: &str, lease_ms: u64, now: u64) -> bool {
        let mut inner = self.lock();
        match inner.claims.get(task_id) {
            Some((holder, until)) if holder != driver && *until > now => false,
            _ => {
                inner.claims.insert(task_id.to_string(), (driver.to_string(), now.saturating_add(lease_ms)));
                true
            }
        }
    }

    pub(crate) fn orphaned(&self, limit: usize, now: u64) -> Vec<String> {
        let inner = self.lock();
        let free = |id: &String| inner.claims.get(id).is_none_or(|(_, until)| *until <= now);
        inner
            .records
            .values()
            .filter(|t| t.state == codemode_core::task::TaskState::Working && !t.expired(now) && free(&t.task_id))
            .map(|t| t.task_id.clone())
            .take(limit)
            .collect()
    }

    pub(crate) fn release(&self, task_id: &str, driver: &str) {
        let mut inner = self.lock();
        if inner.claims.get(task_id).is_some_and(|(holder, _)| holder == driver) {
            inner.claims.remove(task_id);
        }
    }
}
