//! The console records a store keeps beside its runs (see
//! [`SnapshotStore::put_console_record`](codemode_core::store::SnapshotStore::put_console_record)):
//! a table in process memory (the memory store) and the checks every store applies.

use codemode_core::store::{ConsoleKind, MAX_CONSOLE_RECORD_BYTES, StoreError, console_key_ok};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// Refuses a key or value no store keeps (see [`console_key_ok`], [`MAX_CONSOLE_RECORD_BYTES`]).
pub(crate) fn check_record(key: &str, value: &str) -> Result<(), StoreError> {
    if !console_key_ok(key) {
        return Err(StoreError::Encode(format!("`{}` is not a console record key", key.escape_debug())));
    }
    if value.len() > MAX_CONSOLE_RECORD_BYTES {
        return Err(StoreError::Encode(format!(
            "a console record of {} bytes is over the limit of {MAX_CONSOLE_RECORD_BYTES}",
            value.len()
        )));
    }
    Ok(())
}

struct Entry {
    value: String,
    updated_ms: u64,
    seq: u64,
    expires_ms: u64,
}

/// The records of one kind, with an index by age (so the oldest goes in O(log n) at the cap).
#[derive(Default)]
struct Records {
    entries: HashMap<String, Entry>,
    by_age: BTreeSet<(u64, u64, String)>,
    next_sweep_ms: u64,
}

impl Records {
    fn remove(&mut self, key: &str) {
        if let Some(e) = self.entries.remove(key) {
            self.by_age.remove(&(e.updated_ms, e.seq, key.to_string()));
        }
    }

    /// Drops expired records, at most once a second.
    fn sweep(&mut self, now: u64) {
        if now < self.next_sweep_ms {
            return;
        }
        self.next_sweep_ms = now.saturating_add(1_000);
        let expired: Vec<String> =
            self.entries.iter().filter(|(_, e)| e.expires_ms <= now).map(|(k, _)| k.clone()).collect();
        for k in expired {
            self.remove(&k);
        }
    }
}

/// Console records in process memory, at most [`ConsoleKind::max_records`] of each kind.
#[derive(Default)]
pub(crate) struct ConsoleTable {
    kinds: Mutex<HashMap<ConsoleKind, Records>>,
    seq: std::sync::atomic::AtomicU64,
}

impl ConsoleTable {
    pub(crate) fn put(
        &self,
        kind: ConsoleKind,
        key: &str,
        value: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Result<(), StoreError> {
        check_record(key, value)?;
        let seq = self.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        let records = kinds.entry(kind).or_default();
        records.sweep(now);
        records.remove(key);
        let entry = Entry { value: value.to_string(), updated_ms: now, seq, expires_ms: now.saturating_add(ttl_ms) };
        records.entries.insert(key.to_string(), entry);
        records.by_age.insert((now, seq, key.to_string()));
        // Past the cap, the least recently updated records of the kind go first.
        while records.entries.len() > kind.max_records() {
            let Some((_, _, oldest)) = records.by_age.pop_first() else { break };
            records.entries.remove(&oldest);
        }
        Ok(())
    }

    pub(crate) fn get(&self, kind: ConsoleKind, key: &str, now: u64) -> Option<String> {
        let kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        kinds.get(&kind)?.entries.get(key).filter(|e| e.expires_ms > now).map(|e| e.value.clone())
    }

    pub(crate) fn list(&self, kind: ConsoleKind, limit: usize, now: u64) -> Vec<String> {
        let kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        let Some(records) = kinds.get(&kind) else { return Vec::new() };
        records
            .by_age
            .iter()
            .rev()
            .filter_map(|(_, _, k)| records.entries.get(k).filter(|e| e.expires_ms > now))
            .take(limit)
            .map(|e| e.value.clone())
            .collect()
    }
}
