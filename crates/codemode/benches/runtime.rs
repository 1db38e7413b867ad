//! Criterion benchmarks of the runtime, per engine: trivial exec latency, per-nested-call overhead,
//! a suspend + resume cycle, a trivial exec with two visible namespaces, and a trivial exec after
//! heavy cells (deep recursion, a grown heap) ran in the same runtime. Run with
//! `cargo bench -p codemode --features engine-wasi,engine-quickjs,engine-boa --bench runtime`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use codemode_demo::bench;
use criterion::{Criterion, criterion_group, criterion_main};
use std::time::Duration;

fn engines() -> Vec<String> {
    codemode::Engines::compiled()
}

/// Sum of `n` runs of a scenario (each returns its own measured time).
fn repeat<F: std::future::Future<Output = Duration>>(
    rt: &tokio::runtime::Runtime,
    n: u64,
    scenario: impl Fn() -> F,
) -> Duration {
    rt.block_on(async {
        let mut t = Duration::ZERO;
        for _ in 0..n {
            t += scenario().await;
        }
        t
    })
}

fn bench_engines(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for engine in engines() {
        let cm = bench::runtime(&engine, 10_000);
        // Load and warm the engine (module cache, first instance) and `demo_echo`'s input schema
        // outside the measurement: `scripts/count-instructions.sh` counts one iteration of each
        // scenario after this.
        rt.block_on(bench::warm_up(&cm));
        let mut g = c.benchmark_group(engine.as_str());
        g.bench_function("exec_trivial", |b| b.iter_custom(|n| repeat(&rt, n, || bench::trivial(&cm))));
        g.bench_function("exec_one_call", |b| b.iter_custom(|n| repeat(&rt, n, || bench::one_call(&cm))));
        g.bench_function("nested_call", |b| b.iter_custom(|n| repeat(&rt, n, || bench::nested(&cm))));
        g.bench_function("suspend_resume", |b| b.iter_custom(|n| repeat(&rt, n, || bench::suspend_resume(&cm))));
        let with_ns = bench::runtime_with_namespaces(&engine, 10_000);
        rt.block_on(bench::trivial(&with_ns));
        g.bench_function("exec_trivial_namespaces", |b| b.iter_custom(|n| repeat(&rt, n, || bench::trivial(&with_ns))));
        // Last: what heavy cells leave behind for the ordinary cells after them. The heavy cells run
        // only when this scenario is selected, so they never weigh in the instruction counts of the
        // other scenarios (`scripts/count-instructions.sh` runs one scenario per process).
        let mut heavy_done = false;
        g.bench_function("exec_trivial_after_heavy", |b| {
            if !heavy_done {
                rt.block_on(bench::heavy(&cm, 8));
                heavy_done = true;
            }
            b.iter_custom(|n| repeat(&rt, n, || bench::trivial(&cm)))
        });
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(4));
    targets = bench_engines
}
criterion_main!(benches);
