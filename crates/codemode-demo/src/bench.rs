//! Benchmark scenarios shared by the criterion benches (`benches/`) and `codemode bench`: the same
//! cells, measured the same way, so numbers from both agree.

use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, RunContext};
use std::time::{Duration, Instant};

/// `return 1+1`: trivial exec latency, end to end.
pub const TRIVIAL: &str = "return 1+1";

/// Cells that write far more of the guest's memory than an ordinary one: recursion to the stack
/// limit, and a heap that outgrows the instance's initial memory. [`heavy`] runs them before
/// [`trivial`] cells are measured again: an engine that keeps memory from one run to the next (a
/// pool slot, a reset VM) must not make the ordinary cells after such a cell slower.
pub const HEAVY: [&str; 2] = [
    "function deep(n) { return n === 0 ? 0 : 1 + deep(n - 1); } try { return deep(1e6) } catch (e) { return e.name }",
    "const a = []; for (let i = 0; i < 20000; i++) a.push({ i, s: 'x' + i }); return a.length",
];

/// Sequential nested calls in one cell (per-call overhead = time / [`NESTED_CALLS`]).
pub const NESTED: &str =
    "let s = 0; for (let i = 0; i < 1000; i++) { const r = await tools.demo_echo({ i }); s += r.i; } return s";
/// Nested calls made by [`NESTED`].
pub const NESTED_CALLS: u32 = 1000;

/// [`NESTED`] three times as long. With both, [`split_nested`] tells what one more call costs from
/// what a cell making calls costs once (its compile, its first call, the reset after it, and its
/// early calls, which run slower than later ones): [`NESTED`]'s time per call is both together.
pub const NESTED_LONG: &str =
    "let s = 0; for (let i = 0; i < 3000; i++) { const r = await tools.demo_echo({ i }); s += r.i; } return s";
/// Nested calls made by [`NESTED_LONG`].
pub const NESTED_LONG_CALLS: u32 = 3000;

/// A cell making one nested call: what a cell's first call costs (the tool's convenience function
/// made, its first message written) on top of [`TRIVIAL`], as an agent's cells mostly make a few
/// calls of different tools rather than thousands of one.
pub const ONE_CALL: &str = "const r = await tools.demo_echo({ i: 1 }); return r.i";

/// A cell that suspends once (yield) and resumes: exec + wait.
pub const SUSPEND_RESUME: &str = "const rows = [1, 2, 3]; await yield_control(); return rows.length";

/// A cell suspended on one pending nested call (for the snapshot size).
pub const PENDING_ONE_CALL: &str = "const r = await tools.demo_sleep({ ms: 400 }); return r.slept";

/// The runtime the scenarios run on: the demo catalog, code mode enabled, `engine`.
pub fn runtime(engine: &str, timeout_ms: u64) -> CodeMode {
    demo_builder(engine, timeout_ms).build()
}

/// The builder every scenario starts from: the demo catalog on `engine`, code mode enabled.
fn demo_builder(engine: &str, timeout_ms: u64) -> codemode::CodeModeBuilder {
    let config = CodeModeConfig { timeout_ms, ..CodeModeConfig::enabled() };
    CodeMode::builder(config).engine_name(engine).local_tools(crate::catalog::demo_tools())
}

/// [`runtime`] plus `extra` tools of the realistic fixture catalog (core, plugin, MCP and client
/// tools; never called): measures what a larger catalog costs every run (its boot data, the `MCP`
/// namespace and the `API` files).
pub fn runtime_with_fixture(engine: &str, timeout_ms: u64, extra: usize) -> CodeMode {
    demo_builder(engine, timeout_ms).tool_definitions(codemode_catalog::fixtures::realistic(extra)).build()
}

/// [`NESTED`] through a namespace member (`Bench.echo`, over `demo_echo`).
pub const NESTED_NAMESPACE: &str =
    "let s = 0; for (let i = 0; i < 1000; i++) { const r = await Bench.echo({ i }); s += r.i; } return s";

/// [`runtime`] with the demo plugin's `Shipping` namespace and `Bench` (`Bench.echo` = `demo_echo`):
/// [`trivial`] on it minus [`trivial`] on [`runtime`] is what visible namespaces cost every run;
/// [`nested`] with [`NESTED_NAMESPACE`] what a namespace call costs.
pub fn runtime_with_namespaces(engine: &str, timeout_ms: u64) -> CodeMode {
    use codemode_namespaces::{NamespaceRegistration, ScopeValue, namespace_tool};
    let registry = crate::catalog::demo_namespaces();
    let bench = NamespaceRegistration::new("bench", "Bench", "Benchmark helpers.")
        .require("demo_echo")
        .scope(|_| Ok(ScopeValue::object([("echo", namespace_tool("demo_echo"))])));
    if let Err(e) = registry.register_for_plugin(crate::catalog::PLUGIN_ID, bench) {
        tracing::error!(error = %e, "bench namespace refused");
    }
    demo_builder(engine, timeout_ms).namespaces(std::sync::Arc::new(registry)).build()
}

/// A hook that does nothing (its cost is what every nested call pays for having hooks at all).
struct NoopHook;

#[async_trait::async_trait]
impl codemode::ToolHook for NoopHook {
    async fn before_tool_call(&self, _call: &mut codemode::NestedToolCall) -> Result<(), codemode::ToolError> {
        Ok(())
    }

    async fn after_tool_call(
        &self,
        _call: &codemode::NestedToolCall,
        _outcome: &mut Result<codemode::ToolResult, codemode::ToolError>,
    ) {
    }
}

/// [`runtime`] with one no-op [`ToolHook`](codemode::ToolHook): [`nested`] on it minus [`nested`] on
/// [`runtime`] is the cost of a hook on a nested call.
pub fn runtime_with_hook(engine: &str, timeout_ms: u64) -> CodeMode {
    demo_builder(engine, timeout_ms).hook(std::sync::Arc::new(NoopHook)).build()
}

/// A trajectory sink that drops every record (what building the records costs, without I/O).
struct DropRecords;

impl codemode::RunObserver for DropRecords {
    fn on_event(&self, event: codemode::RunEvent) {
        std::hint::black_box(event);
    }
}

/// [`runtime`] with a trajectory sink: [`nested`] on it minus [`nested`] on [`runtime`] is what the
/// trajectory (transcript entries with redacted inputs and results) costs a nested call.
pub fn runtime_with_trajectory(engine: &str, timeout_ms: u64) -> CodeMode {
    demo_builder(engine, timeout_ms).trajectory(std::sync::Arc::new(DropRecords)).build()
}

/// Nanoseconds to create, record and drop one nested-call span like the runtime's, as this
/// process's subscriber handles it (with nothing exporting it: the cost tracing adds to a nested
/// call with export off), averaged over `n` spans.
pub fn disabled_span_ns(n: u32) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        let span = tracing::info_span!(
            target: "codemode",
            "codemode.nested_call",
            run_id = "cm_bench",
            request_id = u64::from(i),
            tool_id = "plugin:demo:demo_echo",
            outcome = tracing::field::Empty,
        );
        if !span.is_disabled() {
            span.record("outcome", "completed");
        }
        std::hint::black_box(&span);
    }
    t.elapsed().as_secs_f64() * 1e9 / f64::from(n.max(1))
}

/// [`runtime`] with `demo_invoice_send` gated behind approval (no approver: the call parks).
pub fn runtime_gated(engine: &str, timeout_ms: u64) -> CodeMode {
    demo_builder(engine, timeout_ms)
        .approvals(codemode::ApprovalPolicy::require(["plugin:demo:demo_invoice_send"]))
        .build()
}

/// A cell whose gated call parks ([`runtime_gated`]).
pub const GATED: &str =
    "const r = await tools.demo_invoice_send({ shipmentId: 'SHP-1001', amount: 1 }); return r.status";

/// exec (parks on the gated call) + decide (approve) + wait (runs it, completes): the whole
/// suspend → approve → resume cycle on [`runtime_gated`].
pub async fn approval_cycle(cm: &CodeMode) -> Duration {
    let t = Instant::now();
    let first = cm.exec(&ctx(), &CodeModeExecInput::code(GATED)).await;
    let (Some(id), Some(request)) = (
        first.run_id().and_then(|id| codemode::RunId::parse(id).ok()),
        first.pending_tool_calls().iter().find(|p| p.kind == codemode::PendingCallKind::Approval).map(|p| p.request_id),
    ) else {
        panic!("expected a parked call: {}", first.to_json());
    };
    if let Err(e) = cm.decide(&id, request, codemode::ApprovalDecision::Approve).await {
        panic!("cannot approve: {}", e.message);
    }
    let done = cm.wait(&ctx(), &CodeModeWaitInput::new(id.to_string())).await;
    let d = t.elapsed();
    expect_completed(&done);
    d
}

fn ctx() -> RunContext {
    RunContext::session("bench")
}

/// One trivial exec; panics if it does not complete (a benchmark of failures would be meaningless).
pub async fn trivial(cm: &CodeMode) -> Duration {
    let t = Instant::now();
    let r = cm.exec(&ctx(), &CodeModeExecInput::code(TRIVIAL)).await;
    let d = t.elapsed();
    expect_completed(&r);
    d
}

/// One run of [`ONE_CALL`]; panics unless it completes.
pub async fn one_call(cm: &CodeMode) -> Duration {
    cell_time(cm, ONE_CALL).await
}

/// Runs each of the [`HEAVY`] cells `rounds` times, each followed by a [`TRIVIAL`] one (runs
/// interleave over the engine's instances as they would in a server). A heavy cell must end, as
/// completed or, on an engine whose recursion limit is not catchable (Boa), failed.
pub async fn heavy(cm: &CodeMode, rounds: usize) {
    for _ in 0..rounds {
        for cell in HEAVY {
            let r = cm.exec(&ctx(), &CodeModeExecInput::code(cell)).await;
            if !matches!(r, CodeModeResult::Completed { .. } | CodeModeResult::Failed { .. }) {
                panic!("heavy benchmark cell did not end: {}", r.to_json());
            }
            trivial(cm).await;
        }
    }
}

/// The nested-call cell; returns the time per nested call.
pub async fn nested(cm: &CodeMode) -> Duration {
    nested_cell(cm, NESTED).await
}

/// One run of a cell making [`NESTED_CALLS`] sequential calls (e.g. [`NESTED_NAMESPACE`]), divided
/// per call.
pub async fn nested_cell(cm: &CodeMode, cell: &str) -> Duration {
    cell_time(cm, cell).await / NESTED_CALLS
}

/// The whole time of one run of `cell` (panics unless it completes).
pub async fn cell_time(cm: &CodeMode, cell: &str) -> Duration {
    let t = Instant::now();
    let r = cm.exec(&ctx(), &CodeModeExecInput::code(cell)).await;
    let d = t.elapsed();
    expect_completed(&r);
    d
}

/// A nested call's cost split in two (see [`split_nested`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NestedSplit {
    /// What one more call in a cell costs: the medians' difference over the calls between them.
    pub per_call: Duration,
    /// What a cell of [`NESTED_CALLS`] calls costs beyond its calls at that rate.
    pub per_cell: Duration,
}

/// Splits the time of calls into a cost per call and a cost per cell, from whole-cell times of
/// [`NESTED`] (`short`) and [`NESTED_LONG`] (`long`): `None` when a side has no samples or the
/// longer cells' median is not the larger (noise larger than 2,000 calls).
pub fn split_nested(short: &[Duration], long: &[Duration]) -> Option<NestedSplit> {
    let median = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        (!v.is_empty()).then(|| percentile(&v, 0.5))
    };
    let (short, long) = (median(short)?, median(long)?);
    let per_call = long.checked_sub(short).filter(|d| !d.is_zero())? / (NESTED_LONG_CALLS - NESTED_CALLS);
    Some(NestedSplit { per_call, per_cell: short.saturating_sub(per_call * NESTED_CALLS) })
}

/// A cell that loads what a run's first nested call pays for once per runtime (the engine's first
/// instance, the called tool's compiled input schema), so a measurement after it counts only what
/// every call costs.
pub const WARM_UP: &str = "await tools.demo_echo({ i: 0 }); return 1+1";

/// One run of [`WARM_UP`] (panics unless it completes).
pub async fn warm_up(cm: &CodeMode) {
    let r = cm.exec(&ctx(), &CodeModeExecInput::code(WARM_UP)).await;
    expect_completed(&r);
}

/// exec (suspends) + wait (resumes to the end).
pub async fn suspend_resume(cm: &CodeMode) -> Duration {
    let t = Instant::now();
    let first = cm.exec(&ctx(), &CodeModeExecInput::code(SUSPEND_RESUME)).await;
    let id = first.run_id().map(str::to_string).unwrap_or_else(|| panic!("expected waiting: {}", first.to_json()));
    let done = cm.wait(&ctx(), &CodeModeWaitInput::new(id)).await;
    let d = t.elapsed();
    expect_completed(&done);
    d
}

/// Bytes of the snapshot of a cell suspended on one pending call (`timeout_ms` must be below the
/// call's 400 ms). The run is aborted afterwards.
pub async fn pending_snapshot_bytes(cm: &CodeMode) -> u64 {
    let r = cm.exec(&ctx(), &CodeModeExecInput::code(PENDING_ONE_CALL)).await;
    let bytes = r.telemetry().snapshot_events.last().and_then(|e| e.bytes).unwrap_or(0);
    if let Some(id) = r.run_id().and_then(|id| codemode::RunId::parse(id).ok()) {
        cm.abort(&id).await;
    }
    bytes
}

fn expect_completed(r: &CodeModeResult) {
    if !matches!(r, CodeModeResult::Completed { .. }) {
        panic!("benchmark cell did not complete: {}", r.to_json());
    }
}

/// Extra fixture tools of the catalog-size rows: the demo catalog alone, +200 and +1,000 tools.
pub const CATALOG_SIZES: [usize; 3] = [0, 200, 1000];

/// Concurrency levels of the throughput rows.
pub const CONCURRENCY: [usize; 4] = [1, 2, 8, 64];

/// What [`throughput`] measured.
#[derive(Debug, Clone)]
pub struct Throughput {
    /// Tasks issuing cells at once.
    pub concurrency: usize,
    /// Cells completed.
    pub cells: usize,
    /// Cells completed per second of wall time.
    pub cells_per_s: f64,
    /// Median latency of one cell.
    pub p50: Duration,
    /// 99th-percentile latency of one cell.
    pub p99: Duration,
}

/// Trivial cells issued by `concurrency` tasks at once, each starting its next cell when the last
/// one completes, for `duration`: throughput and latency under load.
pub async fn throughput(cm: &CodeMode, concurrency: usize, duration: Duration) -> Throughput {
    let concurrency = concurrency.max(1);
    let started = Instant::now();
    let until = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let cm = cm.clone();
        tasks.spawn(async move {
            let mut times = Vec::new();
            while Instant::now() < until {
                times.push(trivial(&cm).await);
            }
            times
        });
    }
    let mut times = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(t) => times.extend(t),
            Err(e) => panic!("a throughput task failed: {e}"),
        }
    }
    let wall = started.elapsed();
    times.sort();
    Throughput {
        concurrency,
        cells: times.len(),
        cells_per_s: times.len() as f64 / wall.as_secs_f64().max(1e-9),
        p50: percentile(&times, 0.5),
        p99: percentile(&times, 0.99),
    }
}

/// What [`suspended_footprint`] measured.
#[derive(Debug, Clone)]
pub struct SuspendedFootprint {
    /// Runs suspended at once.
    pub runs: usize,
    /// Mean snapshot size the store was given (bytes).
    pub snapshot_bytes: f64,
    /// Growth of this process's resident memory per suspended run (bytes; `None` where the
    /// platform does not tell, i.e. outside Linux). Allocator reuse makes it noisy; the snapshot
    /// size is the lower bound.
    pub resident_bytes: Option<f64>,
}

/// This process's resident set size (Linux: `/proc/self/statm`).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// Suspends `runs` cells at once (each at a `yield_control()`), measures what they occupy, then
/// aborts them: the memory a suspended run costs on `cm`'s store.
pub async fn suspended_footprint(cm: &CodeMode, runs: usize) -> SuspendedFootprint {
    let before = resident_bytes();
    let mut ids = Vec::with_capacity(runs);
    let mut bytes = 0u64;
    for _ in 0..runs {
        let r = cm.exec(&ctx(), &CodeModeExecInput::code(SUSPEND_RESUME)).await;
        bytes += r.telemetry().snapshot_events.last().and_then(|e| e.bytes).unwrap_or(0);
        match r.run_id().and_then(|id| codemode::RunId::parse(id).ok()) {
            Some(id) => ids.push(id),
            None => panic!("expected a suspended run: {}", r.to_json()),
        }
    }
    let after = resident_bytes();
    for id in &ids {
        cm.abort(id).await;
    }
    let n = runs.max(1) as f64;
    SuspendedFootprint {
        runs,
        snapshot_bytes: bytes as f64 / n,
        resident_bytes: before.zip(after).map(|(b, a)| a.saturating_sub(b) as f64 / n),
    }
}

/// [`runtime`] keeping its snapshots in `store` (the footprint rows of each store).
pub fn runtime_with_store(
    engine: &str,
    timeout_ms: u64,
    store: std::sync::Arc<dyn codemode::SnapshotStore>,
) -> CodeMode {
    demo_builder(engine, timeout_ms).store(store).build()
}

/// The `q` quantile (0.5 = median) of `sorted`, a sorted sample: the element at
/// `round((len - 1) * q)` (the same rule as `make bench-peers`). Zero for an empty sample.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&u| Duration::from_micros(u)).collect()
    }

    #[test]
    fn a_nested_call_splits_into_its_margin_and_its_cell() {
        // Cells of 1,000 and 3,000 calls at 2 µs a call, each with 150 µs once (medians 2,150 and
        // 6,150 µs; the outliers do not move them).
        let short = us(&[2_150, 2_140, 2_160, 9_000, 2_150]);
        let long = us(&[6_150, 6_150, 1_000, 6_160, 6_140]);
        let split = split_nested(&short, &long).unwrap();
        assert_eq!(split.per_call, Duration::from_micros(2));
        assert_eq!(split.per_cell, Duration::from_micros(150));
        // Longer cells that came out no slower, or no samples: no split.
        assert_eq!(split_nested(&us(&[2_000]), &us(&[1_900])), None);
        assert_eq!(split_nested(&us(&[2_000]), &us(&[2_000])), None);
        assert_eq!(split_nested(&[], &us(&[6_000])), None);
        assert_eq!(split_nested(&us(&[2_000]), &[]), None);
    }
}

/// The cell of the zero-token-waiting comparison: three sequential slow calls (150 ms each, past a
/// run timeout of [`SLOW_TIMEOUT_MS`], so the run suspends on each), then a list the cell filters
/// down to one number.
pub const THREE_SLOW: &str = "let slept = 0;
    for (let i = 0; i < 3; i++) slept += (await tools.demo_sleep({ ms: 150 })).slept;
    const rows = await tools.demo_shipping_list({});
    return { slept, unpaid: rows.filter((r) => !r.paid).length };";

/// The run timeout of the zero-token-waiting comparison.
pub const SLOW_TIMEOUT_MS: u64 = 50;

/// What one way of running [`THREE_SLOW`] costs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelCost {
    /// Tool results the model reads (its turns spent on the cell): the `exec` result and one per
    /// `wait` it has to send.
    pub turns: u32,
    /// Bytes of the result JSON the model reads over those turns.
    pub result_json_bytes: usize,
    /// The run's `returnedBytes` (output and values handed back).
    pub returned_bytes: u64,
    /// The run's `toolResultBytes` (what the cell read from its tools).
    pub tool_result_bytes: u64,
}

/// Runs [`THREE_SLOW`] the way a model drives it: plain `exec` then `wait` while `waiting`
/// (`auto_wait` off), or one `exec` that resumes the run itself (`auto_wait` on).
pub async fn three_slow_cost(engine: &str, auto_wait: bool) -> ModelCost {
    let cm = runtime(engine, SLOW_TIMEOUT_MS);
    let cm = if auto_wait { cm.with_auto_wait(codemode::AutoWait::new(Duration::from_secs(60), 100)) } else { cm };
    let ctx = RunContext::session("bench-three-slow");
    let mut r = cm.exec(&ctx, &CodeModeExecInput::code(THREE_SLOW)).await;
    let (mut turns, mut bytes) = (1u32, r.to_json().to_string().len());
    while let Some(id) = r.run_id().map(str::to_string) {
        r = cm.wait(&ctx, &CodeModeWaitInput::new(id)).await;
        turns += 1;
        bytes += r.to_json().to_string().len();
    }
    let t = r.telemetry();
    ModelCost {
        turns,
        result_json_bytes: bytes,
        returned_bytes: t.returned_bytes,
        tool_result_bytes: t.tool_result_bytes,
    }
}
