//! [`CodeModeBuilder`]: everything a runtime is built from, and the inputs its catalogs are built
//! from ([`BuildInputs`]: the catalog of each policy target).

use crate::runtime::{self, Inner};
use crate::tools::{LocalTools, ToolHook};
use crate::{CodeMode, Engines, Router, config_file};
use codemode_catalog::Catalog;
use codemode_catalog::approval::ApprovalPolicy;
use codemode_catalog::loops::LoopPolicy;
use codemode_catalog::policy::{PolicyTarget, ToolPolicy};
use codemode_catalog::sandbox::SandboxPolicy;
use codemode_core::approval::Approver;
use codemode_core::executor::{RunObserver, ToolExecutor};
use codemode_core::namespace::NamespaceRegistry;
use codemode_core::{CodeModeConfig, GuestEngine, RunContext, SnapshotStore, ToolDefinition};
use codemode_namespaces::Namespaces;
use codemode_snapshot::{Clock, MemorySnapshotStore, RunKeys, SystemClock};
use std::sync::Arc;

/// Builds a [`CodeMode`].
pub struct CodeModeBuilder {
    config: CodeModeConfig,
    engine: Option<Option<Arc<dyn GuestEngine>>>,
    local: LocalTools,
    definitions: Vec<ToolDefinition>,
    unavailable_mcp: Vec<(String, String)>,
    executor: Option<Arc<dyn ToolExecutor>>,
    hooks: Vec<Arc<dyn ToolHook>>,
    approvals: ApprovalPolicy,
    approver: Option<Arc<dyn Approver>>,
    sandbox: SandboxPolicy,
    store: Option<Arc<dyn SnapshotStore>>,
    run_keys: Option<RunKeys>,
    clock: Option<Arc<dyn Clock>>,
    policy: Option<ToolPolicy>,
    target: PolicyTarget,
    namespaces: Option<Arc<dyn NamespaceRegistry>>,
    trajectory: Option<Arc<dyn RunObserver>>,
    redaction: Option<codemode_core::trajectory::Redaction>,
    loops: LoopPolicy,
    observe_results: bool,
    inline_wait: std::time::Duration,
    auto_wait: crate::AutoWait,
}

impl CodeModeBuilder {
    /// A builder with `config` and nothing else (see [`CodeMode::builder`]).
    pub(crate) fn new(config: CodeModeConfig) -> Self {
        CodeModeBuilder {
            config,
            engine: None,
            local: LocalTools::new(),
            definitions: Vec::new(),
            unavailable_mcp: Vec::new(),
            executor: None,
            hooks: Vec::new(),
            approvals: ApprovalPolicy::default(),
            approver: None,
            sandbox: SandboxPolicy::default(),
            store: None,
            run_keys: None,
            clock: None,
            policy: None,
            target: PolicyTarget::default(),
            namespaces: None,
            trajectory: None,
            redaction: None,
            loops: LoopPolicy::default(),
            observe_results: true,
            inline_wait: std::time::Duration::ZERO,
            auto_wait: crate::AutoWait::OFF,
        }
    }

    /// Enforces loop detection on nested calls (`tools.loopDetection` and
    /// `agents.list[].tools.loopDetection`, contract §22; off unless a configuration enables it): a
    /// session's repeated calls without progress get a warning in the output, then are refused,
    /// then fail the run (see [`codemode_catalog::loops`]).
    pub fn loop_detection(mut self, policy: LoopPolicy) -> Self {
        self.loops = policy;
        self
    }

    /// Learns the result types of tools that declare no output schema from the results runs see
    /// (on by default): `tools.describe` and `MCP.<server>.$api()` show them marked
    /// `observed`, with how many results they are based on. Only shapes are kept, never values.
    pub fn observe_result_types(mut self, on: bool) -> Self {
        self.observe_results = on;
        self
    }

    /// How far `exec` / `wait` resume a `waiting` run themselves before handing it back
    /// (zero-token waiting; see [`crate::AutoWait`]). Off by default.
    pub fn auto_wait(mut self, budget: crate::AutoWait) -> Self {
        self.auto_wait = budget;
        self
    }

    /// How long a guest worker waits itself for a nested call that did not finish at once, before
    /// handing it to the async runtime (default zero: handed over at once). A call whose result
    /// arrives within this time wakes the guest worker directly — one thread switch fewer per call;
    /// for its first 100 µs the worker spins rather than parks while a core is idle, so an answer
    /// that quick costs no wake-up at all.
    /// For hosts whose tools run on another thread and answer in microseconds (the Python and Node
    /// packages' tools, 300 µs there). The price: a cell issuing calls that take longer pays up to
    /// this much per call before the next one starts (a `Promise.all` of slow calls starts them
    /// this much apart). Clamped to 10 ms. Prevents nothing; it trades latency of fast calls
    /// against the start of slow ones.
    pub fn inline_wait(mut self, wait: std::time::Duration) -> Self {
        self.inline_wait = wait.min(std::time::Duration::from_millis(10));
        self
    }

    /// Sends every run's trajectory records ([`RunEvent::Trace`](codemode_core::executor::RunEvent::Trace): each `exec` / `wait` call's start
    /// and end, each nested call issued, parked, approved, denied, completed, failed, cancelled or
    /// re-issued, under the call id of the `exec` / `wait` that drove it) to `sink`, e.g. an audit
    /// log. Called on guest worker threads: hand records to a channel. Observers given to
    /// [`CodeMode::exec_observed`] receive the same records for their call.
    pub fn trajectory(mut self, sink: Arc<dyn RunObserver>) -> Self {
        self.trajectory = Some(sink);
        self
    }

    /// How inputs, results and messages are redacted in trajectory records (default:
    /// [`Redaction::default`](codemode_core::trajectory::Redaction::default): 2 KiB per value,
    /// secret-looking keys and this process's environment values masked).
    pub fn redaction(mut self, redaction: codemode_core::trajectory::Redaction) -> Self {
        self.redaction = Some(redaction);
        self
    }

    /// Serves the namespaces of `registry` (contract §10): each run sees those whose backing tools its
    /// catalog holds, as guest globals whose calls are catalog tool calls. Default: none. A
    /// [`Namespaces`] registry is shared by cloning, so plugins may
    /// keep registering and clearing after the runtime is built.
    pub fn namespaces(mut self, registry: Arc<dyn NamespaceRegistry>) -> Self {
        self.namespaces = Some(registry);
        self
    }

    /// Uses this engine instance (instead of resolving `config.runtime`).
    pub fn engine(mut self, engine: Arc<dyn GuestEngine>) -> Self {
        self.engine = Some(Some(engine));
        self
    }

    /// Uses the engine of this name; an unknown or not compiled name makes runs fail closed.
    pub fn engine_name(mut self, name: &str) -> Self {
        self.config.runtime = name.to_string();
        self.engine = Some(Engines::by_name(name));
        self
    }

    /// Adds host tools implemented in Rust (their definitions join the catalog, calls go to them).
    pub fn local_tools(mut self, tools: LocalTools) -> Self {
        self.local.extend(&tools);
        self
    }

    /// Adds definitions of tools run by the host's own executor (see [`Self::executor`]).
    pub fn tool_definitions(mut self, defs: impl IntoIterator<Item = ToolDefinition>) -> Self {
        self.definitions.extend(defs);
        self
    }

    /// Upstream MCP servers that are down, each with the reason (see
    /// [`CodeMode::set_upstream`]).
    pub fn unavailable_mcp_servers(mut self, down: impl IntoIterator<Item = (String, String)>) -> Self {
        self.unavailable_mcp.extend(down);
        self
    }

    /// The host's executor for tools added with [`Self::tool_definitions`].
    pub fn executor(mut self, executor: Arc<dyn ToolExecutor>) -> Self {
        self.executor = Some(executor);
        self
    }

    /// Adds a hook that sees every nested call.
    pub fn hook(mut self, hook: Arc<dyn ToolHook>) -> Self {
        self.hooks.push(hook);
        self
    }

    /// Gates nested calls behind a human's approval (contract P5; the config file's top-level
    /// `approvals`). A gated call goes to the [`approver`](Self::approver) if there is one, else it
    /// parks: the run suspends with the call listed as `kind: "approval"` until
    /// [`CodeMode::decide`] records a decision.
    pub fn approvals(mut self, policy: ApprovalPolicy) -> Self {
        self.approvals = policy;
        self
    }

    /// Makes every nested call carry the line of the cell that made it, not only gated ones (see
    /// `ApprovalPolicy::lines_for_every_call`): what an operator's console marks in a run's source.
    /// Call after [`approvals`](Self::approvals) and [`config_file`](Self::config_file), which set
    /// the policy whole.
    pub fn call_lines(mut self, every_call: bool) -> Self {
        self.approvals.lines_for_every_call = every_call;
        self
    }

    /// Asks `approver` about every gated call (from the [`approvals`](Self::approvals) policy or a
    /// hook's [`ToolHook::requires_approval`]); when it has no answer (`None`, or none within
    /// `approvals.timeoutMs`) the call parks.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Applies the sandbox tool policy (`tools.sandbox.tools`, `tools.elevated`,
    /// `agents.list[].tools.elevated`) to nested calls of runs whose caller is sandboxed
    /// ([`RunContext::sandboxed`]). Runs of callers that are not sandboxed are not affected.
    pub fn sandbox(mut self, policy: SandboxPolicy) -> Self {
        self.sandbox = policy;
        self
    }

    /// Uses this snapshot store (default: a new [`MemorySnapshotStore`]).
    pub fn store(mut self, store: Arc<dyn SnapshotStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Signs exported runs with `keys`, and imports only runs they verify (see
    /// [`codemode_snapshot::signing`]). Default: the key of `CODEMODE_RUN_SIGNING_KEY` (and
    /// `CODEMODE_RUN_SIGNING_PREVIOUS_KEYS`), or else a key random to this process — then only this
    /// process imports its exports. Prevents: bytes a host keeps (or anyone who can hand it bytes)
    /// forging an approval, a policy or a pending call.
    pub fn run_keys(mut self, keys: RunKeys) -> Self {
        self.run_keys = Some(keys);
        self
    }

    /// Applies a tool policy (contract §22) to every tool before the catalog is built, for the agent,
    /// provider and model set with [`Self::policy_target`] (none by default). Build one runtime per
    /// agent/provider when their policies differ.
    pub fn policy(mut self, policy: ToolPolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Applies a configuration file as the `codemode` command does: `tools.codeMode` (this
    /// builder's configuration), the tool policy, the approval policy, the sandbox tool policy, loop
    /// detection, and the file's declared namespaces, registered into `namespaces` next to whatever
    /// plugins registered there (and used as this runtime's registry). An embedder gets exactly the
    /// semantics of the CLI. A declared namespace that clashes with a registered one is an error
    /// naming `namespaces`. (`mcpServers` is for `codemode-mcp`, which connects them.)
    pub fn config_file(
        mut self,
        file: &config_file::ConfigFile,
        namespaces: Namespaces,
    ) -> Result<Self, codemode_core::ConfigError> {
        file.register_namespaces(&namespaces)?;
        match file.run_signing.keys()? {
            Some(keys) => self.run_keys = Some(keys),
            // The process's own key, with the file's upgrade window.
            None if file.run_signing.accept_unsigned_until_ms.is_some() => {
                self.run_keys =
                    Some(RunKeys::process().accept_unsigned_until(file.run_signing.accept_unsigned_until_ms));
            }
            None => {}
        }
        // An engine chosen on this builder before keeps its choice; otherwise the file's `runtime`.
        let chosen = self.engine.is_some().then(|| self.config.runtime.clone());
        self.config = file.code_mode.clone();
        if let Some(runtime) = chosen {
            self.config.runtime = runtime;
        }
        Ok(self
            .policy(file.policy.clone())
            .approvals(file.approvals.clone())
            .sandbox(file.sandbox.clone())
            .loop_detection(file.loops.clone())
            .observe_result_types(file.observe_result_types.unwrap_or(true))
            .namespaces(Arc::new(namespaces)))
    }

    /// Selects the agent's overrides (`agents.list[].tools`) and the `tools.byProvider` entry the
    /// policy applies.
    pub fn policy_target(mut self, target: PolicyTarget) -> Self {
        self.target = target;
        self
    }

    /// Uses this clock for expiry times (share it with the store; tests use a
    /// [`ManualClock`](codemode_snapshot::ManualClock)).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Builds the runtime.
    pub fn build(self) -> CodeMode {
        let engine = self.engine.unwrap_or_else(|| Engines::by_name(&self.config.runtime));
        let local_defs = self.local.definitions();
        let extra = Arc::new(BuildInputs {
            local_defs,
            policy: self.policy,
            target: self.target,
            host: std::sync::RwLock::new((Vec::new(), Vec::new())),
        });
        *extra.host.write().unwrap_or_else(|p| p.into_inner()) = (self.definitions, self.unavailable_mcp);
        let executor: Arc<dyn ToolExecutor> = Arc::new(Router { local: self.local, host: self.executor });
        let store = self.store.unwrap_or_else(|| Arc::new(MemorySnapshotStore::new()));
        let clock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let run_keys = self.run_keys.unwrap_or_else(|| match RunKeys::from_default_env() {
            Ok(Some(keys)) => keys,
            Ok(None) => RunKeys::process(),
            Err(e) => {
                // Hosts that read a config check the key first (`ConfigFile::run_keys`); here the
                // exports simply stay in this process, and say why on import elsewhere.
                tracing::error!(error = %e, "ignoring a malformed run signing key; exported runs are signed with a key of this process");
                RunKeys::process()
            }
        });
        CodeMode {
            inner: Arc::new_cyclic(|me| {
                let mut inner = Inner::new(
                    self.config,
                    engine,
                    extra.clone(),
                    executor,
                    runtime::CallGates {
                        loops: self.loops,
                        observe_results: self.observe_results,
                        inline_wait: self.inline_wait,
                        namespaces: self.namespaces.unwrap_or_else(|| Arc::new(codemode_core::namespace::NoNamespaces)),
                        trajectory: self.trajectory,
                        redaction: self.redaction.unwrap_or_default(),
                        hooks: self.hooks,
                        approvals: self.approvals,
                        approver: self.approver,
                        sandbox: self.sandbox,
                    },
                    store,
                    clock,
                );
                inner.me = me.clone();
                inner.run_keys = run_keys;
                inner
            }),
            extra,
            auto_wait: self.auto_wait,
        }
    }
}

/// What building a catalog needs: the local tools, the policy and the runtime's default target,
/// and the current host tools (kept for `set_host_tools` and for the catalogs of other targets).
pub(crate) struct BuildInputs {
    local_defs: Vec<ToolDefinition>,
    policy: Option<ToolPolicy>,
    target: PolicyTarget,
    /// The host-executed tools and the upstream servers that are down, as last set.
    host: std::sync::RwLock<HostTools>,
}

/// Host-executed tool definitions, and the upstream MCP servers that are down with the reason.
type HostTools = (Vec<ToolDefinition>, Vec<(String, String)>);

impl BuildInputs {
    /// The catalog of the local tools plus `host` tools, after the policy for the default target;
    /// remembers `host` and `down` for later catalogs.
    pub(crate) fn catalog(&self, host: Vec<ToolDefinition>, down: Vec<(String, String)>) -> Catalog {
        *self.host.write().unwrap_or_else(|p| p.into_inner()) = (host, down);
        self.catalog_for(&self.target)
    }

    /// Whether runs of different agents, providers or models may see different catalogs.
    pub(crate) fn has_policy(&self) -> bool {
        self.policy.is_some()
    }

    /// The target of a run: the context's agent, provider and model, each falling back to the
    /// runtime's default target.
    pub(crate) fn target_of(&self, ctx: &RunContext) -> PolicyTarget {
        PolicyTarget {
            agent: ctx.scope.agent_id.clone().or_else(|| self.target.agent.clone()),
            provider: ctx.provider.clone().or_else(|| self.target.provider.clone()),
            model: ctx.model.clone().or_else(|| self.target.model.clone()),
        }
    }

    /// The runtime's default target.
    pub(crate) fn default_target(&self) -> &PolicyTarget {
        &self.target
    }

    /// The catalog of the local and current host tools, after the policy for `target`.
    pub(crate) fn catalog_for(&self, target: &PolicyTarget) -> Catalog {
        let (host, down) = self.host.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut defs = self.local_defs.clone();
        defs.extend(host);
        if let Some(policy) = &self.policy {
            let outcome = policy.apply(defs, target.context());
            for w in &outcome.warnings {
                tracing::warn!("{w}");
            }
            defs = outcome.kept;
        }
        let catalog = Catalog::build(defs).with_unavailable_mcp_servers(down);
        for id in catalog.dropped() {
            tracing::warn!(%id, "a second tool with the same catalog id was left out");
        }
        catalog
    }
}
