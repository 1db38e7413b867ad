//! Result types learned from observed results (issue 26 §4): what the runtime learned about the
//! results of tools without an output schema, when the boot data must state a newer type, and how
//! a fleet shares it through the store.

use super::Inner;
use codemode_catalog::observed::Observed;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::runtime::Handle;

/// Most tools whose observed result types are kept. Prevents: a catalog of thousands of tools
/// growing the map without bound (results of further tools are not learned).
pub(super) const MAX_OBSERVED_TOOLS: usize = 4_096;

/// What was learned about the results of tools without an output schema (issue 26 §4).
pub(crate) struct Observations {
    /// By tool id; at most [`MAX_OBSERVED_TOOLS`] tools. Updated on every nested call of a tool
    /// without an output schema (see [`codemode_core::hash`]).
    pub(crate) map: Mutex<codemode_core::hash::ToolMap<Observed>>,
    /// Goes up when a learned type widens (or a tool's first result arrives): the boot data built
    /// before states an older type and is built again for the next run.
    pub(crate) generation: std::sync::atomic::AtomicU64,
    /// On a fleet store: the generation last joined with the fleet's view, and when the fleet's
    /// view was last read (ms).
    pub(crate) synced: Mutex<(u64, u64)>,
}

/// The kind of shared state the learned result types are kept under in a fleet store.
const OBSERVED_STATE: &str = "observed";

/// How often a replica reads the fleet's learned result types when it learned nothing new itself.
const OBSERVED_PULL_MS: u64 = 10_000;

/// Largest shared view of learned result types written to a fleet store. Prevents: a catalog of
/// thousands of tools with wide results making every sync move megabytes.
const MAX_OBSERVED_SHARED_BYTES: usize = 1 << 20;

impl Observations {
    /// The `.d.ts` doc lines of what was learned so far.
    pub(super) fn docs(&self) -> codemode_catalog::mcp_api::ObservedDocs {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().filter(|(_, o)| o.results > 0).map(|(id, o)| (id.clone(), o.doc_line())).collect()
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records one result of `tool_id`; bumps the generation when the learned type widens.
    pub(crate) fn record(&self, tool_id: &str, value: &Value) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_OBSERVED_TOOLS && !map.contains_key(tool_id) {
            return;
        }
        let widened = match map.get_mut(tool_id) {
            Some(entry) => entry.record(value),
            None => map.entry(tool_id.to_string()).or_default().record(value),
        };
        if widened {
            self.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Inner {
    /// The types learned so far, by tool id (rendered), for the quick index.
    pub(crate) fn observed_types(&self) -> std::collections::BTreeMap<String, String> {
        let Some(o) = &self.observed else { return Default::default() };
        let map = o.map.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().filter(|(_, v)| v.results > 0).map(|(id, v)| (id.clone(), v.shape.render())).collect()
    }

    /// The type learned from `tool_id`'s results, as shown to the model.
    pub(crate) fn observed_output(&self, tool_id: &str) -> Option<Value> {
        let map = self.observed.as_ref()?.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(tool_id).filter(|o| o.results > 0).map(codemode_catalog::observed::Observed::to_json)
    }

    /// On a fleet store, joins this replica's learned result types with the fleet's (when it learned
    /// something new, or every [`OBSERVED_PULL_MS`]) and writes the joined view back, so every
    /// replica shows what any of them learned (issue 26 §4). Last writer wins; a join never loses
    /// a widening of its own.
    pub(super) fn sync_observed(&self, rt: &Handle) {
        let Some(o) = self.observed.as_ref().filter(|_| self.store.fleet()) else { return };
        let now = self.now_ms();
        let generation = o.generation();
        {
            let synced = o.synced.lock().unwrap_or_else(|p| p.into_inner());
            if synced.0 == generation && now.saturating_sub(synced.1) < OBSERVED_PULL_MS {
                return;
            }
        }
        let remote: HashMap<String, codemode_catalog::observed::Observed> =
            match rt.block_on(self.store.shared_state(OBSERVED_STATE)) {
                Ok(Some(text)) => serde_json::from_str(&text).unwrap_or_default(),
                Ok(None) => HashMap::new(),
                Err(e) => {
                    tracing::debug!(error = %e, "learned result types not read from the store");
                    return;
                }
            };
        let text = {
            let mut map = o.map.lock().unwrap_or_else(|p| p.into_inner());
            let mut widened = false;
            for (id, theirs) in remote {
                if map.len() >= MAX_OBSERVED_TOOLS && !map.contains_key(&id) {
                    continue;
                }
                let mine = map.entry(id).or_default();
                let before = mine.shape.clone();
                mine.join(theirs);
                widened |= mine.shape != before;
            }
            if widened {
                o.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            serde_json::to_string(&*map).unwrap_or_default()
        };
        *o.synced.lock().unwrap_or_else(|p| p.into_inner()) = (o.generation(), now);
        if text.len() <= MAX_OBSERVED_SHARED_BYTES {
            let ttl_ms = self.config.snapshot_ttl_seconds.saturating_mul(1000).max(3_600_000);
            if let Err(e) = rt.block_on(self.store.put_shared_state(OBSERVED_STATE, &text, ttl_ms)) {
                tracing::debug!(error = %e, "learned result types not written to the store");
            }
        }
    }
}
