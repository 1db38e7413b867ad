//! The catalogs runs see: the default target's, one per other agent, provider and model (the tool
//! policy is per run; built once and cached), and the catalog a resumed run keeps
//! ([`Inner::recheck_catalog`]: the tools it started with, as defined now). Each [`RunCatalog`]
//! carries the boot data its runs start with.

use super::Inner;
use super::observed::Observations;
use codemode_catalog::Catalog;
use codemode_catalog::approval::ApprovalPolicy;
use codemode_core::engine::GuestLimits;
use codemode_core::scope::RunContext;
use std::sync::Arc;

/// The catalog of a run plus its cached boot data.
pub(crate) struct RunCatalog {
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) boot: codemode_bridge::BootText,
    /// Tools per source (telemetry of every call; counted once per catalog).
    pub(crate) by_source: std::collections::BTreeMap<String, u32>,
    /// The [`Observations::generation`] its `.d.ts` files state.
    observed_generation: u64,
}

impl RunCatalog {
    pub(crate) fn new(
        catalog: Catalog,
        limits: &GuestLimits,
        approvals: &ApprovalPolicy,
        observed: Option<&Observations>,
    ) -> Self {
        let (docs, observed_generation) = match observed {
            Some(o) => (o.docs(), o.generation()),
            None => (Default::default(), 0),
        };
        let mut boot = codemode_catalog::mcp_api::boot_data_with(&catalog, limits.max_json_depth, &docs);
        if approvals.lines_for_every_call {
            boot.gated = catalog.tools().iter().map(|t| t.id.to_string()).collect();
        } else if !approvals.is_off() {
            boot.gated = catalog
                .tools()
                .iter()
                .filter(|t| approvals.reason(&t.def).is_some())
                .map(|t| t.id.to_string())
                .collect();
        }
        let boot = codemode_bridge::BootText::new(&boot);
        let by_source = catalog.count_by_source();
        RunCatalog { catalog: Arc::new(catalog), boot, by_source, observed_generation }
    }

    /// Whether its `.d.ts` files state an older learned type than `observed` holds now.
    pub(super) fn stale(&self, observed: Option<&Observations>) -> bool {
        observed.is_some_and(|o| o.generation() != self.observed_generation)
    }
}

/// Most per-target catalogs kept. Prevents: a stream of made-up agent, provider or model names
/// growing the cache without bound.
const MAX_TARGET_CATALOGS: usize = 256;

impl Inner {
    /// The current catalog (runs keep the one they started with).
    pub(crate) fn catalog(&self) -> Arc<RunCatalog> {
        let current = self.catalog.read().unwrap_or_else(|p| p.into_inner()).clone();
        if !current.stale(self.observed.as_deref()) {
            return current;
        }
        // A learned result type widened: the next run's `.d.ts` files state it.
        let next = Arc::new(RunCatalog::new(
            (*current.catalog).clone(),
            &self.limits,
            &self.approvals,
            self.observed.as_deref(),
        ));
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = next.clone();
        next
    }

    /// Replaces the catalog for runs started from now on (the default target's; the other targets'
    /// are built again when next needed).
    pub(crate) fn set_catalog(&self, catalog: Catalog) {
        // A new catalog version: what a tool returns is learned anew when its definition changed or
        // it went away. The others keep what was learned: an upstream server announcing tools it
        // registers after the handshake must not erase what its unchanged tools were seen to return.
        if let Some(o) = &self.observed {
            let before = self.catalog.read().unwrap_or_else(|p| p.into_inner()).catalog.clone();
            let mut map = o.map.lock().unwrap_or_else(|p| p.into_inner());
            let len = map.len();
            map.retain(|id, _| match (before.get(id), catalog.get(id)) {
                (Some(old), Some(new)) => old.def == new.def,
                _ => false,
            });
            if map.len() != len {
                o.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let next = Arc::new(RunCatalog::new(catalog, &self.limits, &self.approvals, self.observed.as_deref()));
        *self.catalog.write().unwrap_or_else(|p| p.into_inner()) = next;
        self.target_catalogs.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// The catalog a resumed run keeps for this `wait`: the tools it started with (ids are stable
    /// within a run) that the policy still allows the wait's context, each as the catalog defines
    /// it now — so approved and re-issued calls meet their gates against the tool's current
    /// definition. Costs a pointer comparison when nothing changed.
    pub(super) fn recheck_catalog(&self, started: &Arc<Catalog>, ctx: &RunContext) -> Arc<Catalog> {
        let now = self.catalog_for(ctx);
        if Arc::ptr_eq(started, &now.catalog) {
            return started.clone();
        }
        let kept: Vec<codemode_core::ToolDefinition> =
            now.catalog.tools().iter().filter(|t| started.get(&t.id).is_some()).map(|t| (*t.def).clone()).collect();
        if kept.len() == now.catalog.len() {
            return now.catalog.clone();
        }
        Arc::new(Catalog::build(kept).with_unavailable_mcp_servers(now.catalog.unavailable_mcp_servers().clone()))
    }

    /// The catalog a run of `ctx` sees (the policy is per agent): the
    /// tool policy applied for the context's agent, provider and model. The default target's
    /// catalog serves every run when there is no policy or the context names no other target, so
    /// the single-agent case costs nothing; other targets' catalogs are built once and cached.
    pub(crate) fn catalog_for(&self, ctx: &RunContext) -> Arc<RunCatalog> {
        if !self.inputs.has_policy() {
            return self.catalog();
        }
        let target = self.inputs.target_of(ctx);
        if &target == self.inputs.default_target() {
            return self.catalog();
        }
        if let Some(c) = self.target_catalogs.lock().unwrap_or_else(|p| p.into_inner()).get(&target)
            && !c.stale(self.observed.as_deref())
        {
            return c.clone();
        }
        let built = Arc::new(RunCatalog::new(
            self.inputs.catalog_for(&target),
            &self.limits,
            &self.approvals,
            self.observed.as_deref(),
        ));
        let mut cache = self.target_catalogs.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_TARGET_CATALOGS
            && let Some(k) = cache.keys().next().cloned()
        {
            cache.remove(&k);
        }
        cache.insert(target, built.clone());
        built
    }
}
