//! V16: the TypeScript transformer is never loaded on JavaScript-only paths or by a disabled
//! runtime; the first TypeScript cell loads it. (Its own test binary, so no other test has loaded
//! it.)
//!
//! "Loaded" is read from the operating system, not from a flag the transformer keeps: the transform
//! runs on threads of its own, started with the first TypeScript cell, and Linux lists a process's
//! threads with their names in `/proc/self/task/*/comm`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, RunContext};

/// How many threads of this process carry the transform threads' name.
#[cfg(target_os = "linux")]
fn transform_threads() -> usize {
    let name = &codemode::typescript::TRANSFORM_THREAD[..codemode::typescript::TRANSFORM_THREAD.len().min(15)];
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count()
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v16_typescript_loads_only_for_typescript_cells() {
    let cm = CodeMode::builder(CodeModeConfig::enabled()).local_tools(codemode_demo::demo_tools()).build();
    let ctx = RunContext::session("ts");
    for _ in 0..3 {
        let r = cm.exec(&ctx, &CodeModeExecInput::code("const x = 1; return x + 1")).await;
        assert_eq!(r.to_json()["value"], 2);
    }
    let off = CodeMode::builder(CodeModeConfig::default()).build();
    let ts = CodeModeExecInput { language: Some("typescript".into()), ..CodeModeExecInput::code("return 1 as number") };
    assert_eq!(off.exec(&ctx, &ts).await.status(), "failed", "code mode disabled");
    // Threads were started by now (the guest workers, tokio's): only the transformer's are absent.
    assert!(std::fs::read_dir("/proc/self/task").unwrap().count() > 2);
    assert_eq!(transform_threads(), 0, "not loaded by JavaScript cells or a disabled runtime");
    let r = cm.exec(&ctx, &ts).await;
    assert_eq!(r.to_json()["value"], 1);
    // One per core, at most MAX_TRANSFORM_THREADS, all started together. A thread names itself once
    // it runs, so one the first cell did not need may still carry the process's name for a moment
    // (seen on a loaded machine): wait for the names, a few seconds at most.
    let expected = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, codemode::typescript::MAX_TRANSFORM_THREADS);
    let named_by = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while transform_threads() < expected && std::time::Instant::now() < named_by {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let started = transform_threads();
    assert_eq!(started, expected, "{started} transform threads");
    // Later TypeScript cells reuse them.
    for _ in 0..4 {
        assert_eq!(cm.exec(&ctx, &ts).await.to_json()["value"], 1);
    }
    assert_eq!(transform_threads(), started);
}
