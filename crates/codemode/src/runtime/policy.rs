//! A run carries its policy (the book's security model, "A run carries its policy"): the target it
//! was started for (agent, provider, model), whether its caller was sandboxed, the version of the
//! catalog it was checked against and the set of tools it may call are stored with it
//! ([`RunPolicy`]). Every `wait` — in this process, another one, or another replica — is refused
//! unless its caller's target and sandbox flag are the run's, and resumes the run with the tools of
//! its own catalog that are also in the run's set: a later configuration can take a tool away from
//! a run, never give it one.

use super::{Inner, RunCatalog};
use codemode_catalog::{Catalog, tool_hash};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::store::{RunPolicy, SuspendedRun};
use codemode_core::{RunContext, RunId};
use std::sync::Arc;

/// Why a `wait` is refused for a run started under another policy; names what differs, never the
/// run's own values.
pub(crate) fn mismatch(run_id: &RunId, what: &[&str]) -> CodeModeError {
    CodeModeError::new(
        CodeModeErrorCode::InvalidInput,
        format!(
            "run `{run_id}` was started under another policy than this wait's ({} differ{}): resume it with the \
             agent, provider, model and sandbox it was started with",
            what.join(", "),
            if what.len() == 1 { "s" } else { "" }
        ),
    )
}

impl Inner {
    /// The policy a run of `ctx` started under, with `catalog` (the catalog chosen for `ctx`).
    /// Made when the run is first stored, not when it starts: a run that never suspends pays
    /// nothing for it.
    pub(crate) fn run_policy(&self, ctx: &RunContext, catalog: &Catalog) -> RunPolicy {
        let target = self.inputs.target_of(ctx);
        let (version, tools) = catalog.version().clone();
        RunPolicy {
            agent: target.agent,
            provider: target.provider,
            model: target.model,
            sandboxed: ctx.sandboxed,
            catalog: version,
            tools,
        }
    }

    /// Whether `ctx` may resume `run`: its target (agent, provider, model — each the context's or
    /// this runtime's default) and its sandbox flag must be the ones the run was started with. A
    /// run stored without its policy (by an older version) is not resumed.
    pub(crate) fn check_run_policy(&self, run: &SuspendedRun, ctx: &RunContext) -> Result<(), CodeModeError> {
        let Some(policy) = &run.policy else {
            return Err(CodeModeError::new(
                CodeModeErrorCode::InvalidInput,
                format!(
                    "run `{}` was stored without the policy it was started under (by an older version of codemode) \
                     and cannot be resumed",
                    run.run_id
                ),
            ));
        };
        let target = self.inputs.target_of(ctx);
        let mut differ = Vec::new();
        if policy.agent != target.agent {
            differ.push("agent");
        }
        if policy.provider != target.provider {
            differ.push("provider");
        }
        if policy.model != target.model {
            differ.push("model");
        }
        if policy.sandboxed != ctx.sandboxed {
            differ.push("sandbox");
        }
        if differ.is_empty() { Ok(()) } else { Err(mismatch(&run.run_id, &differ)) }
    }

    /// The catalog a run resumed in a process that did not start it gets: this process's catalog
    /// for the run's target (`current`), as it is when its version is the run's, else only its
    /// tools that are also in the run's set. Returns the catalog, and the policy with the set
    /// narrowed to it (a later resume cannot get back what this one took away).
    pub(crate) fn resumed_catalog(&self, current: Arc<RunCatalog>, policy: &RunPolicy) -> (Arc<RunCatalog>, RunPolicy) {
        if current.catalog.version().0 == policy.catalog {
            return (current, policy.clone());
        }
        let allowed: std::collections::HashSet<&str> = policy.tool_hashes().collect();
        let kept: Vec<codemode_core::ToolDefinition> = current
            .catalog
            .tools()
            .iter()
            .filter(|t| allowed.contains(tool_hash(&t.id).as_str()))
            .map(|t| (*t.def).clone())
            .collect();
        if kept.len() == current.catalog.len() {
            let narrowed = RunPolicy { tools: current.catalog.version().1.clone(), ..policy.clone() };
            return (current, narrowed);
        }
        let catalog =
            Catalog::build(kept).with_unavailable_mcp_servers(current.catalog.unavailable_mcp_servers().clone());
        let rebuilt = Arc::new(RunCatalog::new(catalog, &self.limits, &self.approvals, self.observed.as_deref()));
        let narrowed = RunPolicy { tools: rebuilt.catalog.version().1.clone(), ..policy.clone() };
        (rebuilt, narrowed)
    }

    /// The policy of a run whose catalog a `wait` in its own process narrowed: its tool set is the
    /// narrowed catalog's.
    pub(crate) fn narrowed_policy(policy: &RunPolicy, catalog: &Catalog) -> RunPolicy {
        RunPolicy { tools: catalog.version().1.clone(), ..policy.clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_allows_exactly_its_tools() {
        let ids = ["mcp:files:read", "plugin:demo:demo_echo", "openclaw:core:exec"];
        let mut hashes: Vec<String> = ids.iter().map(|i| tool_hash(i)).collect();
        hashes.sort();
        let policy = RunPolicy { tools: hashes.concat(), ..RunPolicy::default() };
        for id in ids {
            assert!(policy.allows(&tool_hash(id)), "{id}");
        }
        for id in ["mcp:files:write", "plugin:demo:demo_echo2", ""] {
            assert!(!policy.allows(&tool_hash(id)), "{id}");
        }
        // A malformed set allows nothing (a stored byte cannot make it allow more).
        let odd = RunPolicy { tools: format!("{}x", hashes.concat()), ..RunPolicy::default() };
        assert!(!odd.allows(&tool_hash(ids[0])));
        assert!(!policy.allows("short"));
    }
}
