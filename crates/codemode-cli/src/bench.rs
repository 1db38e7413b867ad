//! `codemode bench`: the runtime's benchmark scenarios (see `codemode::bench`) on every compiled
//! engine, side by side, plus the snapshot size and the cold start of a whole `codemode run` process.

use anyhow::{Context as _, Result};
use codemode::bench;
use serde_json::json;
use std::io::Write as _;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Fixture tools added for the "large catalog" exec row.
const LARGE_CATALOG: usize = 200;

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn stats(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let p = |q: f64| v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default();
    (p(0.5), p(0.9))
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

pub(crate) async fn run(engines: Vec<String>, samples: usize, as_json: bool) -> Result<ExitCode> {
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
        let big = bench::runtime_with_fixture(engine, 10_000, LARGE_CATALOG);
        bench::trivial(&big).await;
        // Interleaved, so machine noise hits both alike.
        let mut trivial = Vec::with_capacity(samples);
        let mut trivial_big = Vec::with_capacity(samples);
        for _ in 0..samples {
            trivial.push(bench::trivial(&cm).await);
            trivial_big.push(bench::trivial(&big).await);
        }
        let mut nested = Vec::new();
        for _ in 0..(samples / 20).max(5) {
            nested.push(bench::nested(&cm).await);
        }
        let mut cycle = Vec::with_capacity(samples);
        for _ in 0..samples {
            cycle.push(bench::suspend_resume(&cm).await);
        }
        // Hooks and approvals (issue 11): nested calls with and without a no-op hook, interleaved.
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
        // Namespaces (issue 12): a trivial exec with two visible namespaces, and namespace calls, each
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
        // Tracing (issue 13): nested calls with a trajectory sink, interleaved with plain ones; the
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
        let (t50, t90) = stats(trivial);
        let (b50, b90) = stats(trivial_big);
        let (n50, n90) = stats(nested);
        let (c50, c90) = stats(cycle);
        let (s50, s90) = stats(cold);
        let (p50, _) = stats(plain);
        let (h50, h90) = stats(with_hook);
        let (a50, a90) = stats(approvals);
        let (tp50, _) = stats(trivial_plain);
        let (tn50, tn90) = stats(trivial_ns);
        let (cp50, _) = stats(calls_plain);
        let (cn50, cn90) = stats(calls_ns);
        let (u50, _) = stats(untraced_calls);
        let (tr50, tr90) = stats(traced_calls);
        rows.push(json!({
            "engine": engine,
            "firstExecMs": first.as_secs_f64() * 1e3,
            "execTrivialUs": { "p50": us(t50), "p90": us(t90) },
            "execTrivialLargeCatalogUs": { "p50": us(b50), "p90": us(b90) },
            "nestedCallUs": { "p50": us(n50), "p90": us(n90) },
            "suspendResumeUs": { "p50": us(c50), "p90": us(c90) },
            "snapshotBytesOnePendingCall": snapshot,
            "coldStartProcessMs": { "p50": s50.as_secs_f64() * 1e3, "p90": s90.as_secs_f64() * 1e3 },
            "nestedCallWithHookUs": { "p50": us(h50), "p90": us(h90) },
            "hookCostUs": us(h50) - us(p50),
            "approvalCycleUs": { "p50": us(a50), "p90": us(a90) },
            "execTrivialWithNamespacesUs": { "p50": us(tn50), "p90": us(tn90) },
            "namespacesCostPerRunUs": us(tn50) - us(tp50),
            "namespaceCallUs": { "p50": us(cn50), "p90": us(cn90) },
            "namespaceCallCostUs": us(cn50) - us(cp50),
            "nestedCallWithTrajectoryUs": { "p50": us(tr50), "p90": us(tr90) },
            "trajectoryCostUs": us(tr50) - us(u50),
            "nestedCallSpanNs": span_ns,
        }));
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("codemode bench — {samples} back-to-back samples per latency (median / p90), this machine, now");
    println!(
        "{:<14} {:>18} {:>22} {:>18} {:>20} {:>14} {:>18}",
        "engine",
        "exec 1+1 (µs)",
        "…with 200 more tools",
        "nested call (µs)",
        "suspend+resume (µs)",
        "snapshot (B)",
        "cold start (ms)"
    );
    for r in &rows {
        let pair = |k: &str, s: f64| {
            format!("{:.1} / {:.1}", r[k]["p50"].as_f64().unwrap_or(0.0) * s, r[k]["p90"].as_f64().unwrap_or(0.0) * s)
        };
        println!(
            "{:<14} {:>18} {:>22} {:>18} {:>20} {:>14} {:>18}",
            r["engine"].as_str().unwrap_or(""),
            pair("execTrivialUs", 1.0),
            pair("execTrivialLargeCatalogUs", 1.0),
            pair("nestedCallUs", 1.0),
            pair("suspendResumeUs", 1.0),
            r["snapshotBytesOnePendingCall"],
            pair("coldStartProcessMs", 1.0),
        );
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
        "\n{:<14} {:>26} {:>24} {:>22} {:>28}",
        "engine",
        "exec 1+1, 2 namespaces (µs)",
        "namespaces cost/run (µs)",
        "namespace call (µs)",
        "vs tools.* call (µs, p50)"
    );
    for r in &rows {
        let pair = |k: &str| {
            format!("{:.1} / {:.1}", r[k]["p50"].as_f64().unwrap_or(0.0), r[k]["p90"].as_f64().unwrap_or(0.0))
        };
        println!(
            "{:<14} {:>26} {:>24.1} {:>22} {:>28.2}",
            r["engine"].as_str().unwrap_or(""),
            pair("execTrivialWithNamespacesUs"),
            r["namespacesCostPerRunUs"].as_f64().unwrap_or(0.0),
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
