//! `codemode bench`: the runtime's benchmark scenarios (see `codemode_demo::bench`) on every compiled
//! engine, side by side, plus the snapshot size and the cold start of a whole `codemode run` process.

use anyhow::{Context as _, Result, bail};
use codemode_demo::bench;
use serde_json::json;
use std::io::Write as _;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Suspended runs held at once for the memory-per-suspended-run rows (below the memory store's cap
/// of 64).
const FOOTPRINT_RUNS: usize = 60;

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    (bench::percentile(&v, 0.5), bench::percentile(&v, 0.9))
}

/// How long each side of the before / after heavy cells comparison runs at least.
const HEAVY_PHASE: Duration = Duration::from_secs(1);

/// Trivial cells back to back: at least `samples` of them, for at least `at_least`.
async fn trivial_for(cm: &codemode::CodeMode, samples: usize, at_least: Duration) -> Vec<Duration> {
    let started = Instant::now();
    let mut out = Vec::with_capacity(samples);
    while out.len() < samples || started.elapsed() < at_least {
        out.push(bench::trivial(cm).await);
    }
    out
}

fn cost_json(c: bench::ModelCost) -> serde_json::Value {
    json!({
        "turns": c.turns,
        "resultJsonBytes": c.result_json_bytes,
        "returnedBytes": c.returned_bytes,
        "toolResultBytes": c.tool_result_bytes,
    })
}

/// Runs [`bench::THREE_SLOW`] through `codemode serve`'s handler for a client that declared the MCP
/// tasks extension (rmcp's client, in memory): the model's one `exec` is answered with a task the
/// gateway drives; the client polls `tasks/get` (no model turn) and the model reads the final result.
async fn three_slow_as_task(engine: &str) -> Result<bench::ModelCost> {
    use rmcp::ServiceExt as _;
    use rmcp::model::{CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, GetTaskParams};
    let cm = bench::runtime(engine, bench::SLOW_TIMEOUT_MS);
    let gateway = codemode_mcp::server::Gateway::new(cm, codemode_mcp::McpHub::connect(Vec::new()).await);
    let (server_io, client_io) = tokio::io::duplex(1 << 20);
    let server = codemode_mcp::server::ExecWaitServer::new(gateway);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let caps = ClientCapabilities::builder().enable_tasks().build();
    let client = ClientConfig::new(caps, rmcp::model::Implementation::new("bench", "0")).serve(client_io).await?;
    let args = json!({ "code": bench::THREE_SLOW });
    let exec = CallToolRequestParams::new("exec").with_arguments(args.as_object().cloned().unwrap_or_default());
    let CallToolResponse::Task(created) = client.peer().call_tool_once(exec).await? else {
        bail!("the three-slow cell was not answered with a task");
    };
    let id = created.task.task_id;
    loop {
        let task = client.peer().get_task(GetTaskParams::new(id.clone())).await?.task;
        match task.payload {
            rmcp::model::TaskPayload::Working => {
                let ms = task.task.poll_interval_ms.unwrap_or(100);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            rmcp::model::TaskPayload::Completed { result } => {
                let json = result.get("structuredContent").cloned().unwrap_or_default();
                if json["status"] != "completed" {
                    // A resume whose result came at the end of its `timeoutMs` leaves the guest no
                    // time (the driver resumes back to back): reported, not counted.
                    bail!("the run ended `{}`: {}", json["status"], json["error"]);
                }
                let t = &json["telemetry"];
                return Ok(bench::ModelCost {
                    turns: 1,
                    result_json_bytes: json.to_string().len(),
                    returned_bytes: t["returnedBytes"].as_u64().unwrap_or(0),
                    tool_result_bytes: t["toolResultBytes"].as_u64().unwrap_or(0),
                });
            }
            other => bail!("the three-slow task ended {:?}", other.status()),
        }
    }
}

fn cold_start(engine: &str, samples: usize) -> Result<Vec<Duration>> {
    let exe = std::env::current_exe().context("cannot find the codemode executable")?;
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let mut child = Command::new(&exe)
            .args(["run", "--engine", engine, "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start codemode run")?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(bench::TRIVIAL.as_bytes())?;
        }
        let status = child.wait()?;
        out.push(t.elapsed());
        anyhow::ensure!(status.success(), "codemode run --engine {engine} failed");
    }
    Ok(out)
}

/// What `codemode bench` measures besides the latency rows.
pub(crate) struct Options {
    /// Concurrency levels of the throughput rows (default [`bench::CONCURRENCY`]).
    pub(crate) concurrency: Vec<usize>,
    /// How long each throughput row runs.
    pub(crate) seconds: f64,
}

pub(crate) async fn run(engines: Vec<String>, samples: usize, as_json: bool, options: Options) -> Result<ExitCode> {
    let concurrency = if options.concurrency.is_empty() { bench::CONCURRENCY.to_vec() } else { options.concurrency };
    let throughput_for = Duration::from_secs_f64(options.seconds.clamp(0.1, 600.0));
    let engines = if engines.is_empty() { codemode::Engines::compiled() } else { engines };
    let samples = samples.max(5);
    let mut rows = Vec::new();
    for engine in &engines {
        let cm = bench::runtime(engine, 10_000);
        anyhow::ensure!(cm.engine_available(), "engine `{engine}` is not compiled into this build");
        // Warm-up: loads (or builds and caches) the engine and its first instance.
        let warm = Instant::now();
        bench::trivial(&cm).await;
        let first = warm.elapsed();
        // Catalog sizes (the demo catalog, +200, +1,000 tools), interleaved so noise hits all alike.
        let sized: Vec<codemode::CodeMode> =
            bench::CATALOG_SIZES.iter().map(|&extra| bench::runtime_with_fixture(engine, 10_000, extra)).collect();
        for cm in &sized {
            bench::trivial(cm).await;
        }
        // The first size adds nothing: its samples are also the plain "exec 1+1" row.
        let mut by_size: Vec<Vec<Duration>> = vec![Vec::with_capacity(samples); sized.len()];
        for _ in 0..samples {
            for (cm, out) in sized.iter().zip(by_size.iter_mut()) {
                out.push(bench::trivial(cm).await);
            }
        }
        let mut nested = Vec::new();
        for _ in 0..(samples / 20).max(5) {
            nested.push(bench::nested(&cm).await);
        }
        // Apart from the row above (whose cells follow each other as before): cells of 1,000 calls
        // interleaved with cells of 3,000, whose difference is what one more call costs, apart
        // from what a cell making calls costs once.
        let (mut nested_short, mut nested_long) = (Vec::new(), Vec::new());
        for _ in 0..(samples / 20).max(5) {
            nested_short.push(bench::cell_time(&cm, bench::NESTED).await);
            nested_long.push(bench::cell_time(&cm, bench::NESTED_LONG).await);
        }
        let split = bench::split_nested(&nested_short, &nested_long);
        // A cell making one call, interleaved with trivial cells: what a cell's first call adds.
        let (mut one_plain, mut one_call) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for _ in 0..samples {
            one_plain.push(bench::trivial(&cm).await);
            one_call.push(bench::one_call(&cm).await);
        }
        let mut cycle = Vec::with_capacity(samples);
        for _ in 0..samples {
            cycle.push(bench::suspend_resume(&cm).await);
        }
        // Hooks and approvals: nested calls with and without a no-op hook, interleaved.
        let hooked = bench::runtime_with_hook(engine, 10_000);
        let (mut plain, mut with_hook) = (Vec::new(), Vec::new());
        for _ in 0..(samples / 20).max(5) {
            plain.push(bench::nested(&cm).await);
            with_hook.push(bench::nested(&hooked).await);
        }
        let gated = bench::runtime_gated(engine, 10_000);
        let mut approvals = Vec::with_capacity(samples);
        for _ in 0..samples {
            approvals.push(bench::approval_cycle(&gated).await);
        }
        // Namespaces: a trivial exec with two visible namespaces, and namespace calls, each
        // interleaved with its plain counterpart.
        let with_ns = bench::runtime_with_namespaces(engine, 10_000);
        bench::trivial(&with_ns).await;
        let (mut trivial_plain, mut trivial_ns) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for _ in 0..samples {
            trivial_plain.push(bench::trivial(&cm).await);
            trivial_ns.push(bench::trivial(&with_ns).await);
        }
        let (mut calls_plain, mut calls_ns) = (Vec::new(), Vec::new());
        for _ in 0..(samples / 20).max(5) {
            calls_plain.push(bench::nested(&with_ns).await);
            calls_ns.push(bench::nested_cell(&with_ns, bench::NESTED_NAMESPACE).await);
        }
        // Tracing: nested calls with a trajectory sink, interleaved with plain ones; the
        // span a nested call creates, as this process's subscriber handles it (export off, unless
        // OTEL_EXPORTER_OTLP_ENDPOINT is set: then the cost with export on).
        let traced = bench::runtime_with_trajectory(engine, 10_000);
        let (mut untraced_calls, mut traced_calls) = (Vec::new(), Vec::new());
        for _ in 0..(samples / 20).max(5) {
            untraced_calls.push(bench::nested(&cm).await);
            traced_calls.push(bench::nested(&traced).await);
        }
        let span_ns = bench::disabled_span_ns(200_000);
        let snapshot = bench::pending_snapshot_bytes(&bench::runtime(engine, 100)).await;
        let cold = cold_start(engine, (samples / 20).max(5))?;
        // Throughput under load, then the memory a suspended run occupies on each store.
        let mut load = Vec::new();
        for &n in &concurrency {
            let t = bench::throughput(&cm, n, throughput_for).await;
            load.push(json!({
                "concurrency": t.concurrency,
                "cells": t.cells,
                "cellsPerSecond": t.cells_per_s,
                "p50Us": us(t.p50),
                "p99Us": us(t.p99),
            }));
        }
        let memory_store = bench::suspended_footprint(&bench::runtime(engine, 10_000), FOOTPRINT_RUNS).await;
        // The directory store keeps serialized snapshots only (engines with live VMs cannot use it).
        let serializes = codemode::Engines::by_name(engine).is_some_and(|e| e.serializes_snapshots());
        let directory_store = if serializes {
            let dir = std::env::temp_dir().join(format!("codemode-bench-{}-{engine}", std::process::id()));
            let store = codemode::DirectorySnapshotStore::new(&dir)
                .map_err(|e| anyhow::anyhow!("cannot use {}: {e}", dir.display()))?;
            let cm = bench::runtime_with_store(engine, 10_000, std::sync::Arc::new(store));
            let f = bench::suspended_footprint(&cm, FOOTPRINT_RUNS).await;
            let _ = std::fs::remove_dir_all(&dir);
            Some(f)
        } else {
            None
        };
        // Last, as it changes what the engine keeps between runs: trivial cells after heavy ones (deep
        // recursion, a heap outgrowing the initial memory) ran in the same process, against trivial
        // cells measured right before them. An engine that keeps memory from run to run must not
        // leave them slower. Each side runs at least a second: a burst of load from elsewhere on a
        // shared machine would otherwise shift a whole side of a few milliseconds.
        let before_heavy = trivial_for(&cm, samples, HEAVY_PHASE).await;
        bench::heavy(&cm, 8).await;
        let after_heavy = trivial_for(&cm, samples, HEAVY_PHASE).await;
        let footprint = |f: &bench::SuspendedFootprint| json!({ "runs": f.runs, "snapshotBytes": f.snapshot_bytes, "residentBytes": f.resident_bytes });
        let (t50, t90) = stats(by_size.first().cloned().unwrap_or_default());
        let sizes: Vec<serde_json::Value> = bench::CATALOG_SIZES
            .iter()
            .zip(by_size)
            .map(|(extra, v)| {
                let (p50, p90) = stats(v);
                json!({ "extraTools": extra, "p50": us(p50), "p90": us(p90) })
            })
            .collect();
        let (n50, n90) = stats(nested);
        let (c50, c90) = stats(cycle);
        let (s50, s90) = stats(cold);
        let (p50, _) = stats(plain);
        let (h50, h90) = stats(with_hook);
        let (a50, a90) = stats(approvals);
        let (tp50, tp90) = stats(trivial_plain);
        let (tn50, tn90) = stats(trivial_ns);
        let (cp50, _) = stats(calls_plain);
        let (cn50, cn90) = stats(calls_ns);
        let (u50, _) = stats(untraced_calls);
        let (tr50, tr90) = stats(traced_calls);
        let (bh50, bh90) = stats(before_heavy);
        let (op50, _) = stats(one_plain);
        let (oc50, oc90) = stats(one_call);
        let (ah50, ah90) = stats(after_heavy);
        rows.push(json!({
            "engine": engine,
            "firstExecMs": first.as_secs_f64() * 1e3,
            "execTrivialUs": { "p50": us(t50), "p90": us(t90) },
            "execTrivialByCatalogSizeUs": sizes,
            "throughput": load,
            "suspendedRunMemory": { "memoryStore": footprint(&memory_store), "directoryStore": directory_store.as_ref().map(footprint) },
            "nestedCallUs": { "p50": us(n50), "p90": us(n90) },
            // null when the 3,000-call cells' median did not come out above the 1,000-call ones'.
            "nestedCallMarginalUs": split.map(|s| us(s.per_call)),
            "nestedCellFixedUs": split.map(|s| us(s.per_cell)),
            // A cell making one call, and what it costs over the trivial cells interleaved with it.
            "execOneCallUs": { "p50": us(oc50), "p90": us(oc90) },
            "firstCallCostUs": us(oc50) - us(op50),
            "suspendResumeUs": { "p50": us(c50), "p90": us(c90) },
            "snapshotBytesOnePendingCall": snapshot,
            "coldStartProcessMs": { "p50": s50.as_secs_f64() * 1e3, "p90": s90.as_secs_f64() * 1e3 },
            "nestedCallWithHookUs": { "p50": us(h50), "p90": us(h90) },
            "hookCostUs": us(h50) - us(p50),
            "approvalCycleUs": { "p50": us(a50), "p90": us(a90) },
            // The plain trivial cells interleaved with the namespace ones: what the namespaces row
            // compares with (the `execTrivialUs` row is measured earlier, on its own).
            "execTrivialInterleavedUs": { "p50": us(tp50), "p90": us(tp90) },
            "execTrivialWithNamespacesUs": { "p50": us(tn50), "p90": us(tn90) },
            "namespacesCostPerRunUs": us(tn50) - us(tp50),
            "namespaceCallUs": { "p50": us(cn50), "p90": us(cn90) },
            "namespaceCallCostUs": us(cn50) - us(cp50),
            "nestedCallWithTrajectoryUs": { "p50": us(tr50), "p90": us(tr90) },
            "trajectoryCostUs": us(tr50) - us(u50),
            "nestedCallSpanNs": span_ns,
            "execTrivialBeforeHeavyUs": { "p50": us(bh50), "p90": us(bh90) },
            "execTrivialAfterHeavyUs": { "p50": us(ah50), "p90": us(ah90) },
            "threeSlowCalls": {
                "plain": cost_json(bench::three_slow_cost(engine, false).await),
                "autoWait": cost_json(bench::three_slow_cost(engine, true).await),
                "task": match three_slow_as_task(engine).await {
                    Ok(c) => cost_json(c),
                    Err(e) => json!({ "error": e.to_string() }),
                },
            },
        }));
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("codemode bench — {samples} back-to-back samples per latency (median / p90), this machine, now");
    println!(
        "{:<14} {:>18} {:>18} {:>20} {:>14} {:>18}",
        "engine", "exec 1+1 (µs)", "nested call (µs)", "suspend+resume (µs)", "snapshot (B)", "cold start (ms)"
    );
    let pair = |r: &serde_json::Value, k: &str| {
        format!("{:.1} / {:.1}", r[k]["p50"].as_f64().unwrap_or(0.0), r[k]["p90"].as_f64().unwrap_or(0.0))
    };
    for r in &rows {
        println!(
            "{:<14} {:>18} {:>18} {:>20} {:>14} {:>18}",
            r["engine"].as_str().unwrap_or(""),
            pair(r, "execTrivialUs"),
            pair(r, "nestedCallUs"),
            pair(r, "suspendResumeUs"),
            r["snapshotBytesOnePendingCall"],
            pair(r, "coldStartProcessMs"),
        );
    }
    println!(
        "\n{:<14} {:>22} {:>22} {:>22} {:>22}   (a 1,000-call cell's time per call, split by 3,000-call cells; a cell's first call over exec 1+1)",
        "engine", "nested call (µs, p50)", "one more call (µs)", "once a cell (µs)", "first call (µs)"
    );
    let or_na = |v: &serde_json::Value| v.as_f64().map_or("n/a".to_string(), |x| format!("{x:.2}"));
    for r in &rows {
        println!(
            "{:<14} {:>22.2} {:>22} {:>22} {:>22.2}",
            r["engine"].as_str().unwrap_or(""),
            r["nestedCallUs"]["p50"].as_f64().unwrap_or(0.0),
            or_na(&r["nestedCallMarginalUs"]),
            or_na(&r["nestedCellFixedUs"]),
            r["firstCallCostUs"].as_f64().unwrap_or(0.0),
        );
    }
    println!(
        "\n{:<14} {:>24} {:>24} {:>24}   (exec 1+1, µs median / p90; × the demo catalog)",
        "engine", "demo catalog", "+200 tools", "+1,000 tools"
    );
    for r in &rows {
        let sizes = r["execTrivialByCatalogSizeUs"].as_array().cloned().unwrap_or_default();
        let base = sizes.first().and_then(|s| s["p50"].as_f64()).unwrap_or(0.0);
        let cells: Vec<String> = sizes
            .iter()
            .map(|s| {
                let p50 = s["p50"].as_f64().unwrap_or(0.0);
                let ratio = if base > 0.0 { p50 / base } else { 0.0 };
                format!("{p50:.1} / {:.1} ({ratio:.2}×)", s["p90"].as_f64().unwrap_or(0.0))
            })
            .collect();
        println!(
            "{:<14} {:>24} {:>24} {:>24}",
            r["engine"].as_str().unwrap_or(""),
            cells.first().cloned().unwrap_or_default(),
            cells.get(1).cloned().unwrap_or_default(),
            cells.get(2).cloned().unwrap_or_default()
        );
    }
    println!(
        "\n{:<14} {:>12} {:>14} {:>12} {:>12} {:>10}   (trivial cells from N tasks at once)",
        "engine", "concurrency", "cells/s", "p50 (µs)", "p99 (µs)", "p99/p50"
    );
    for r in &rows {
        for t in r["throughput"].as_array().cloned().unwrap_or_default() {
            let (p50, p99) = (t["p50Us"].as_f64().unwrap_or(0.0), t["p99Us"].as_f64().unwrap_or(0.0));
            println!(
                "{:<14} {:>12} {:>14.0} {:>12.1} {:>12.1} {:>10.2}",
                r["engine"].as_str().unwrap_or(""),
                t["concurrency"],
                t["cellsPerSecond"].as_f64().unwrap_or(0.0),
                p50,
                p99,
                if p50 > 0.0 { p99 / p50 } else { 0.0 },
            );
        }
    }
    println!(
        "\n{:<14} {:>24} {:>24} {:>10}   (heavy: deep recursion and a grown heap, in this process)",
        "engine", "exec 1+1 before (µs)", "… after heavy (µs)", "× before"
    );
    for r in &rows {
        let before = r["execTrivialBeforeHeavyUs"]["p50"].as_f64().unwrap_or(0.0);
        let after = r["execTrivialAfterHeavyUs"]["p50"].as_f64().unwrap_or(0.0);
        println!(
            "{:<14} {:>24} {:>24} {:>10.2}",
            r["engine"].as_str().unwrap_or(""),
            pair(r, "execTrivialBeforeHeavyUs"),
            pair(r, "execTrivialAfterHeavyUs"),
            if before > 0.0 { after / before } else { 0.0 },
        );
    }
    println!(
        "\n{:<14} {:>16} {:>30}   (per suspended run, {FOOTPRINT_RUNS} held at once)",
        "engine", "store", "snapshot / resident (KiB)"
    );
    for r in &rows {
        for (label, key) in [("memory", "memoryStore"), ("directory", "directoryStore")] {
            let f = &r["suspendedRunMemory"][key];
            if f.is_null() {
                println!("{:<14} {:>16} {:>30}", r["engine"].as_str().unwrap_or(""), label, "n/a (live VMs)");
                continue;
            }
            let resident =
                f["residentBytes"].as_f64().map(|b| format!("{:.1}", b / 1024.0)).unwrap_or_else(|| "n/a".into());
            println!(
                "{:<14} {:>16} {:>30}",
                r["engine"].as_str().unwrap_or(""),
                label,
                format!("{:.1} / {resident}", f["snapshotBytes"].as_f64().unwrap_or(0.0) / 1024.0),
            );
        }
    }
    println!(
        "\n{:<14} {:>26} {:>22} {:>30}",
        "engine", "nested call + no-op hook (µs)", "hook cost (µs, p50)", "exec → approve → wait (µs)"
    );
    for r in &rows {
        let pair = |k: &str| {
            format!("{:.1} / {:.1}", r[k]["p50"].as_f64().unwrap_or(0.0), r[k]["p90"].as_f64().unwrap_or(0.0))
        };
        println!(
            "{:<14} {:>26} {:>22.2} {:>30}",
            r["engine"].as_str().unwrap_or(""),
            pair("nestedCallWithHookUs"),
            r["hookCostUs"].as_f64().unwrap_or(0.0),
            pair("approvalCycleUs"),
        );
    }
    println!(
        "\n{:<14} {:>26} {:>24} {:>16} {:>22} {:>28}",
        "engine",
        "exec 1+1, 2 namespaces (µs)",
        "namespaces cost/run (µs)",
        "× plain (p50)",
        "namespace call (µs)",
        "vs tools.* call (µs, p50)"
    );
    for r in &rows {
        let pair = |k: &str| {
            format!("{:.1} / {:.1}", r[k]["p50"].as_f64().unwrap_or(0.0), r[k]["p90"].as_f64().unwrap_or(0.0))
        };
        // Against the plain trivial cells interleaved with these.
        let plain = r["execTrivialInterleavedUs"]["p50"].as_f64().unwrap_or(0.0);
        let ratio =
            if plain > 0.0 { r["execTrivialWithNamespacesUs"]["p50"].as_f64().unwrap_or(0.0) / plain } else { 0.0 };
        println!(
            "{:<14} {:>26} {:>24.1} {:>16.2} {:>22} {:>28.2}",
            r["engine"].as_str().unwrap_or(""),
            pair("execTrivialWithNamespacesUs"),
            r["namespacesCostPerRunUs"].as_f64().unwrap_or(0.0),
            ratio,
            pair("namespaceCallUs"),
            r["namespaceCallCostUs"].as_f64().unwrap_or(0.0),
        );
    }
    println!(
        "\n{:<14} {:>30} {:>26} {:>30}",
        "engine", "nested call + trajectory (µs)", "trajectory cost (µs, p50)", "nested-call span (ns)"
    );
    for r in &rows {
        println!(
            "{:<14} {:>30} {:>26.2} {:>30.1}",
            r["engine"].as_str().unwrap_or(""),
            format!(
                "{:.1} / {:.1}",
                r["nestedCallWithTrajectoryUs"]["p50"].as_f64().unwrap_or(0.0),
                r["nestedCallWithTrajectoryUs"]["p90"].as_f64().unwrap_or(0.0)
            ),
            r["trajectoryCostUs"].as_f64().unwrap_or(0.0),
            r["nestedCallSpanNs"].as_f64().unwrap_or(0.0),
        );
    }
    println!(
        "(the span column is with export {})",
        if otel_on() { "ON (OTEL_EXPORTER_OTLP_ENDPOINT is set)" } else { "off" }
    );
    println!(
        "zero-token waiting — a cell of three slow calls (150 ms each, timeoutMs {}) and a filtered list, \
         as a model drives it",
        bench::SLOW_TIMEOUT_MS
    );
    println!(
        "{:<14} {:>10} {:>8} {:>18} {:>15} {:>17}",
        "engine", "mode", "turns", "result JSON bytes", "returnedBytes", "toolResultBytes"
    );
    for r in &rows {
        for mode in ["plain", "task", "autoWait"] {
            let c = &r["threeSlowCalls"][mode];
            if let Some(e) = c["error"].as_str() {
                println!("{:<14} {:>10}   failed: {e}", r["engine"].as_str().unwrap_or(""), mode);
                continue;
            }
            println!(
                "{:<14} {:>10} {:>8} {:>18} {:>15} {:>17}",
                r["engine"].as_str().unwrap_or(""),
                mode,
                c["turns"].as_u64().unwrap_or(0),
                c["resultJsonBytes"].as_u64().unwrap_or(0),
                c["returnedBytes"].as_u64().unwrap_or(0),
                c["toolResultBytes"].as_u64().unwrap_or(0)
            );
        }
    }
    println!(
        "(first exec in this process, incl. engine load: {})",
        rows.iter()
            .map(|r| format!(
                "{} {:.1} ms",
                r["engine"].as_str().unwrap_or(""),
                r["firstExecMs"].as_f64().unwrap_or(0.0)
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

/// Whether this process exports spans (the CLI installs the OTLP exporter when an endpoint is set).
fn otel_on() -> bool {
    ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}

/// `codemode bench --stores-redis URL`: suspend (an `exec` that yields: snapshot + store) and
/// resume (the `wait` that completes it: checkout + restore + settle) through each snapshot store,
/// on the default engine, interleaved so noise hits all alike; and the bytes one parked run takes
/// in Redis (`MEMORY USAGE` of its keys).
pub(crate) async fn stores(samples: usize, as_json: bool, redis_url: &str) -> Result<ExitCode> {
    use codemode::{CodeModeExecInput, CodeModeWaitInput, RunContext};
    use std::sync::Arc;
    let engine = "quickjs-wasi";
    let samples = samples.max(5);
    let dir = std::env::temp_dir().join(format!("codemode-bench-stores-{}", std::process::id()));
    let directory = Arc::new(
        codemode::DirectorySnapshotStore::new(&dir)
            .map_err(|e| anyhow::anyhow!("cannot use {}: {e}", dir.display()))?,
    );
    let config = codemode_snapshot::RedisStoreConfig {
        key_prefix: "codemode-bench:".into(),
        ..codemode_snapshot::RedisStoreConfig::new(redis_url)
    };
    let redis = Arc::new(
        codemode_snapshot::RedisSnapshotStore::connect(config).await.map_err(|e| anyhow::anyhow!("redis: {e}"))?,
    );
    let runtimes: Vec<(&str, codemode::CodeMode)> = vec![
        ("memory", bench::runtime(engine, 10_000)),
        ("directory", bench::runtime_with_store(engine, 10_000, directory)),
        ("redis", bench::runtime_with_store(engine, 10_000, redis.clone())),
    ];
    let ctx = RunContext::session("bench-stores");
    let mut suspend: Vec<Vec<Duration>> = vec![Vec::new(); runtimes.len()];
    let mut resume: Vec<Vec<Duration>> = vec![Vec::new(); runtimes.len()];
    for round in 0..samples + 3 {
        for (i, (_, cm)) in runtimes.iter().enumerate() {
            let t = Instant::now();
            let first = cm.exec(&ctx, &CodeModeExecInput::code(bench::SUSPEND_RESUME)).await;
            let s = t.elapsed();
            let id = first
                .run_id()
                .map(str::to_string)
                .ok_or_else(|| anyhow::anyhow!("not waiting: {}", first.to_json()))?;
            let t = Instant::now();
            let done = cm.wait(&ctx, &CodeModeWaitInput::new(id)).await;
            let r = t.elapsed();
            anyhow::ensure!(done.status() == "completed", "{}", done.to_json());
            if round >= 3 {
                suspend[i].push(s);
                resume[i].push(r);
            }
        }
    }
    // Bytes of one parked run in Redis.
    let redis_cm = &runtimes[2].1;
    let parked = redis_cm.exec(&ctx, &CodeModeExecInput::code(bench::SUSPEND_RESUME)).await;
    let parked_id = parked.run_id().unwrap_or_default().to_string();
    let parked_bytes = match codemode::RunId::parse(&parked_id) {
        Ok(id) => redis.run_bytes(&id).await.unwrap_or(0),
        Err(_) => 0,
    };
    let _ = redis_cm.wait(&ctx, &CodeModeWaitInput::new(parked_id)).await;
    let _ = std::fs::remove_dir_all(&dir);
    let pct = |v: &mut Vec<Duration>, q: f64| {
        v.sort();
        bench::percentile(v, q)
    };
    let mut rows = Vec::new();
    for (i, (name, _)) in runtimes.iter().enumerate() {
        rows.push(json!({
            "store": name,
            "suspendP50Us": us(pct(&mut suspend[i], 0.5)),
            "suspendP99Us": us(pct(&mut suspend[i], 0.99)),
            "resumeP50Us": us(pct(&mut resume[i], 0.5)),
            "resumeP99Us": us(pct(&mut resume[i], 0.99)),
        }));
    }
    if as_json {
        println!(
            "{}",
            json!({ "engine": engine, "samples": samples, "stores": rows, "redisBytesPerParkedRun": parked_bytes })
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("snapshot stores ({engine}, {samples} samples, µs)");
    println!("{:<10} {:>12} {:>12} {:>12} {:>12}", "store", "suspend p50", "suspend p99", "resume p50", "resume p99");
    for r in &rows {
        println!(
            "{:<10} {:>12.0} {:>12.0} {:>12.0} {:>12.0}",
            r["store"].as_str().unwrap_or(""),
            r["suspendP50Us"].as_f64().unwrap_or(0.0),
            r["suspendP99Us"].as_f64().unwrap_or(0.0),
            r["resumeP50Us"].as_f64().unwrap_or(0.0),
            r["resumeP99Us"].as_f64().unwrap_or(0.0)
        );
    }
    println!("bytes per parked run in Redis: {parked_bytes} (runs per GiB: {})", (1u64 << 30) / parked_bytes.max(1));
    Ok(ExitCode::SUCCESS)
}

/// A gateway over the demo catalog served on a loopback port, with the operator console or
/// without, and its listener's address.
async fn served_gateway(
    console: bool,
    stop: tokio_util::sync::CancellationToken,
) -> Result<(std::sync::Arc<codemode_mcp::server::Gateway>, std::net::SocketAddr)> {
    use codemode_mcp::console::{ConsoleSetup, auth, ledger};
    let file = codemode::config_file::ConfigFile::parse("{ tools: { codeMode: { enabled: true } } }")?;
    let ledger = console.then(|| ledger::Ledger::new(None, 900_000, None));
    let options = codemode_mcp::GatewayOptions {
        local: codemode_demo::demo_tools(),
        namespaces: codemode_demo::demo_namespaces(),
        console: ledger.clone(),
        ..Default::default()
    };
    let gw = codemode_mcp::build_gateway(&file, &codemode::PolicyTarget::default(), options).await?;
    crate::commands::prepare_engine(gw.code_mode()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let console = ledger.map(|ledger| ConsoleSetup {
        config: auth::ConsoleConfig {
            operators: vec![auth::Operator::new("bench", "bench-token-0123456789")],
            ..Default::default()
        },
        ledger,
    });
    let options = codemode_mcp::server::HttpOptions { approval_token: None, console };
    let served = gw.clone();
    tokio::spawn(async move {
        let _ = codemode_mcp::server::serve_http_with(served, listener, stop.cancelled_owned(), options).await;
    });
    Ok((gw, addr))
}

/// Logs in to the console at `addr` and reads its live event stream until the connection ends;
/// counts the ticks it read.
async fn console_listener(
    addr: std::net::SocketAddr,
    ticks: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> Result<()> {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
    let body = r#"{"name":"bench","token":"bench-token-0123456789"}"#;
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!(
        "POST /console/api/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).await?;
    let cookie = answer
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .ok_or_else(|| anyhow::anyhow!("console login failed: {answer}"))?
        .to_string();
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let req = format!("GET /console/api/events HTTP/1.1\r\nHost: {addr}\r\nCookie: {cookie}\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut lines = tokio::io::BufReader::new(s).lines();
    while let Some(line) = lines.next_line().await? {
        if line.starts_with("event: tick") {
            ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    Ok(())
}

/// `codemode bench --console`: what the operator console adds to an `exec`, in process. Two gateways
/// over the demo catalog, each served on a loopback port — one with the console and one live-update
/// client reading its event stream, one without — run trivial cells through the gateway's own
/// `exec` path (the one `codemode serve` takes for every request), in interleaved batches so noise
/// hits both alike. The difference per cell is the console's work (journal, trajectory records,
/// store writes, live ticks), to compare with what serving one cell costs over HTTP
/// (`make bench-serve`).
pub(crate) async fn console(samples: usize, as_json: bool) -> Result<ExitCode> {
    use std::sync::Arc;
    let stop = tokio_util::sync::CancellationToken::new();
    let (off, _) = served_gateway(false, stop.clone()).await?;
    let (on, addr) = served_gateway(true, stop.clone()).await?;
    let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let listener = tokio::spawn(console_listener(addr, ticks.clone()));
    let batch = 100usize;
    let batches = samples.max(5);
    let args = serde_json::json!({ "code": "return 1+1" });
    let mut n = 0u64;
    let mut cell = |gw: Arc<codemode_mcp::server::Gateway>| {
        n += 1;
        let args = args.clone();
        let id = format!("bench/{n}");
        async move {
            let r = gw.call_for("bench", None, Some(id), None, "exec", &args, None).await;
            anyhow::ensure!(r.as_ref().is_some_and(|r| r.status() == "completed"), "{:?}", r.map(|r| r.to_json()));
            Ok::<(), anyhow::Error>(())
        }
    };
    // Warm-up: engines loaded, first journals written, the listener connected.
    for _ in 0..batch {
        cell(off.clone()).await?;
        cell(on.clone()).await?;
    }
    // At least `batches` batches and 5 s, so the live-update client reads several ticks (the tick
    // reads every journal summary and replica report from the store once a second).
    let started = Instant::now();
    let (mut per_off, mut per_on) = (Vec::with_capacity(batches), Vec::with_capacity(batches));
    while per_off.len() < batches || started.elapsed() < Duration::from_secs(5) {
        for (gw, out) in [(&off, &mut per_off), (&on, &mut per_on)] {
            let t = Instant::now();
            for _ in 0..batch {
                cell(gw.clone()).await?;
            }
            out.push(t.elapsed() / batch as u32);
        }
    }
    let window = started.elapsed();
    stop.cancel();
    listener.abort();
    let (off_p50, _) = stats(per_off.clone());
    let (on_p50, _) = stats(per_on.clone());
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len().max(1) as u32;
    let (off_mean, on_mean) = (mean(&per_off), mean(&per_on));
    let ticks = ticks.load(std::sync::atomic::Ordering::Relaxed);
    let delta = us(on_p50) - us(off_p50);
    if as_json {
        let v = serde_json::json!({
            "cells": per_off.len() * batch * 2,
            "batch": batch,
            "off_us": { "p50": us(off_p50), "mean": us(off_mean) },
            "on_us": { "p50": us(on_p50), "mean": us(on_mean) },
            "console_us_per_cell": delta,
            "ticks_read": ticks,
            "seconds": window.as_secs_f64(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "the operator console's cost per `exec` (trivial cells through the gateway, {} batches of {batch} each way, interleaved, {:.1} s; one live-update client read {ticks} ticks)",
            per_off.len(),
            window.as_secs_f64()
        );
        println!("{:>22} {:>14} {:>14}", "", "p50 µs/cell", "mean µs/cell");
        println!("{:>22} {:>14.1} {:>14.1}", "console off", us(off_p50), us(off_mean));
        println!("{:>22} {:>14.1} {:>14.1}", "console on", us(on_p50), us(on_mean));
        println!(
            "console: {delta:+.1} µs per cell ({:+.1}% of an in-process cell); compare with the server's CPU per cell over HTTP in `make bench-serve`",
            100.0 * delta / us(off_p50).max(f64::MIN_POSITIVE)
        );
    }
    Ok(ExitCode::SUCCESS)
}
