//! Result types learned from observed results: what the runtime learned about the
//! results of tools without an output schema, when the boot data must state a newer type, and how
//! a fleet shares it through the store.

use super::Inner;
use codemode_catalog::observed::Observed;
use codemode_core::ToolDefinition;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::runtime::Handle;

/// Most tools whose observed result types are kept. Prevents: a catalog of thousands of tools
/// growing the map without bound (results of further tools are not learned).
pub(super) const MAX_OBSERVED_TOOLS: usize = 4_096;

/// What was learned about one tool's results, and from which definition of the tool.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Learned {
    /// Digest of the definition the results came from ([`definition_digest`]; empty when no
    /// fleet shares what is learned: only a fleet compares them). A fleet joins only what its
    /// replicas learned from the same definition: a tool redefined on one replica (a rolling
    /// upgrade, an upstream server's new version) must not get back the type its old definition
    /// returned, nor hand its new type to replicas still running the old one.
    pub(crate) def: String,
    /// The type learned, and how many results it is based on.
    pub(crate) seen: Observed,
    /// The tool declares an output schema: what is learned is compared with it.
    #[serde(default)]
    pub(crate) declares: bool,
    /// The declared output as a type, made at the first result this process records (not shared).
    #[serde(skip)]
    pub(crate) declared: Option<std::sync::Arc<codemode_catalog::declarations::Declaration>>,
}

impl Learned {
    fn new(def: String, declares: bool) -> Learned {
        Learned { def, seen: Observed::default(), declares, declared: None }
    }
}

/// What was learned about the results of tools without an output schema.
pub(crate) struct Observations {
    /// By tool id; at most [`MAX_OBSERVED_TOOLS`] tools. Updated on every nested call of a tool
    /// without an output schema (see [`codemode_core::hash`]).
    pub(crate) map: Mutex<codemode_core::hash::ToolMap<Learned>>,
    /// Goes up when a learned type widens (or a tool's first result arrives): the boot data built
    /// before states an older type and is built again for the next run.
    pub(crate) generation: std::sync::atomic::AtomicU64,
    /// On a fleet store: the generation last joined with the fleet's view, and when the fleet's
    /// view was last read (ms).
    pub(crate) synced: Mutex<(u64, u64)>,
    /// A fleet store shares what is learned: each entry keeps its definition's digest.
    pub(crate) shared: bool,
}

/// The kind of shared state the learned result types are kept under in a fleet store: tool id →
/// [`Learned`]. (Replicas of an earlier version kept theirs, without the definition, under
/// `observed`; the two views do not mix.)
const OBSERVED_STATE: &str = "observed-by-definition";

/// How often a replica reads the fleet's learned result types when it learned nothing new itself.
const OBSERVED_PULL_MS: u64 = 10_000;

/// Largest shared view of learned result types written to a fleet store. Prevents: a catalog of
/// thousands of tools with wide results making every sync move megabytes.
const MAX_OBSERVED_SHARED_BYTES: usize = 1 << 20;

impl Observations {
    /// The `.d.ts` doc lines of what was learned so far.
    pub(super) fn docs(&self) -> codemode_catalog::mcp_api::ObservedDocs {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .filter(|(_, o)| o.seen.results > 0)
            .map(|(id, o)| (id.clone(), o.seen.doc_line(o.declares)))
            .collect()
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records one result of `tool_id`, defined by `def`; bumps the generation when the learned
    /// type widens. The definition is digested only for a tool's first result, and only when a
    /// fleet shares what is learned.
    pub(crate) fn record(&self, tool_id: &str, def: &ToolDefinition, value: &Value) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_OBSERVED_TOOLS && !map.contains_key(tool_id) {
            return;
        }
        let entry = match map.get_mut(tool_id) {
            Some(entry) => entry,
            None => {
                let digest = if self.shared { definition_digest(def) } else { String::new() };
                map.entry(tool_id.to_string()).or_insert(Learned::new(digest, def.output_schema.is_some()))
            }
        };
        let mut widened = entry.seen.record(value);
        // A tool that declares its output: is this result what it declares? (The declaration is
        // made once, at the first result this process records.)
        if let Some(schema) = def.output_schema.as_ref().filter(|_| entry.declares) {
            let declared = entry
                .declared
                .get_or_insert_with(|| std::sync::Arc::new(codemode_catalog::declarations::Declaration::of(schema)));
            if !declared.accepts(value) {
                widened |= entry.seen.contradicted();
            }
        }
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
        map.iter().filter(|(_, v)| v.seen.results > 0).map(|(id, v)| (id.clone(), v.seen.shape.render())).collect()
    }

    /// The type learned from `tool_id`'s results, as shown to the model.
    pub(crate) fn observed_output(&self, tool_id: &str) -> Option<Value> {
        let map = self.observed.as_ref()?.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(tool_id).filter(|o| o.seen.results > 0).map(|o| o.seen.to_json(o.declares))
    }

    /// On a fleet store, joins this replica's learned result types with the fleet's (when it learned
    /// something new, or every [`OBSERVED_PULL_MS`]) and writes the joined view back, so every
    /// replica shows what any of them learned. Last writer wins; a join never loses
    /// a widening of its own. Only what was learned from the same definition of a tool is joined
    /// ([`Learned::def`]); a tool this replica has not called is taken from the fleet only when
    /// its catalog (the default target's) defines it the same way. Entries of tools this replica
    /// learned nothing about are written back as they were read.
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
        let mut shared: HashMap<String, Learned> = match rt.block_on(self.store.shared_state(OBSERVED_STATE)) {
            Ok(Some(text)) => serde_json::from_str(&text).unwrap_or_default(),
            Ok(None) => HashMap::new(),
            Err(e) => {
                tracing::debug!(error = %e, "learned result types not read from the store");
                return;
            }
        };
        // The digests of the fleet's tools this replica has learned nothing about yet, as its catalog
        // defines them: computed before the map is locked (every nested call records under it).
        let catalog = self.catalog.read().unwrap_or_else(|p| p.into_inner()).catalog.clone();
        let unknown: Vec<&String> = {
            let map = o.map.lock().unwrap_or_else(|p| p.into_inner());
            shared.keys().filter(|id| !map.contains_key(*id)).collect()
        };
        let ours: HashMap<&str, String> = unknown
            .into_iter()
            .filter_map(|id| catalog.get(id).map(|t| (id.as_str(), definition_digest(&t.def))))
            .collect();
        let text = {
            let mut map = o.map.lock().unwrap_or_else(|p| p.into_inner());
            let mut widened = false;
            for (id, theirs) in &shared {
                let mine = match map.get_mut(id) {
                    Some(mine) if mine.def == theirs.def => mine,
                    Some(_) => continue,
                    None => {
                        let same = ours.get(id.as_str()) == Some(&theirs.def);
                        if !same || map.len() >= MAX_OBSERVED_TOOLS {
                            continue;
                        }
                        map.entry(id.clone()).or_insert(Learned::new(theirs.def.clone(), theirs.declares))
                    }
                };
                let before = (mine.seen.shape.clone(), mine.seen.contradicting > 0);
                mine.seen.join(theirs.seen.clone());
                widened |= (mine.seen.shape.clone(), mine.seen.contradicting > 0) != before;
            }
            if widened {
                o.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            for (id, mine) in map.iter().filter(|(_, l)| l.seen.results > 0) {
                shared.insert(id.clone(), mine.clone());
            }
            serde_json::to_string(&shared).unwrap_or_default()
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

/// A digest of a tool definition as the catalog holds it (SHA-256 of its JSON with sorted keys):
/// the same on every replica for the same definition. Any change of the definition changes it,
/// as [`Inner::set_catalog`] forgets a tool's learned type on any change.
pub(crate) fn definition_digest(def: &ToolDefinition) -> String {
    codemode_snapshot::input_digest(&serde_json::to_value(def).unwrap_or(Value::Null))
}
