//! The console records a store keeps beside its runs (see
//! [`SnapshotStore::put_console_record`](codemode_core::store::SnapshotStore::put_console_record)):
//! a table in process memory (the memory store) and the checks every store applies.

use codemode_core::store::{ConsoleKind, MAX_CONSOLE_RECORD_BYTES, StoreError, console_key_ok};
use std::collections::HashMap;
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
    expires_ms: u64,
}

/// Console records in process memory, at most [`ConsoleKind::max_records`] of each kind.
#[derive(Default)]
pub(crate) struct ConsoleTable {
    entries: Mutex<HashMap<(ConsoleKind, String), Entry>>,
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
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.retain(|_, e| e.expires_ms > now);
        let entry = Entry { value: value.to_string(), updated_ms: now, expires_ms: now.saturating_add(ttl_ms) };
        entries.insert((kind, key.to_string()), entry);
        let of_kind = entries.keys().filter(|(k, _)| *k == kind).count();
        if of_kind > kind.max_records() {
            // The least recently updated records of the kind go first.
            let mut keys: Vec<(u64, String)> = entries
                .iter()
                .filter(|((k, _), _)| *k == kind)
                .map(|((_, key), e)| (e.updated_ms, key.clone()))
                .collect();
            keys.sort();
            for (_, key) in keys.into_iter().take(of_kind - kind.max_records()) {
                entries.remove(&(kind, key));
            }
        }
        Ok(())
    }

    pub(crate) fn get(&self, kind: ConsoleKind, key: &str, now: u64) -> Option<String> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(&(kind, key.to_string())).filter(|e| e.expires_ms > now).map(|e| e.value.clone())
    }

    pub(crate) fn list(&self, kind: ConsoleKind, limit: usize, now: u64) -> Vec<String> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut live: Vec<(&(ConsoleKind, String), &Entry)> =
            entries.iter().filter(|((k, _), e)| *k == kind && e.expires_ms > now).collect();
        live.sort_by(|a, b| b.1.updated_ms.cmp(&a.1.updated_ms).then_with(|| a.0.1.cmp(&b.0.1)));
        live.into_iter().take(limit).map(|(_, e)| e.value.clone()).collect()
    }
}
