//! V16: the TypeScript transformer is never loaded on JavaScript-only paths; it is loaded by the first
//! TypeScript cell. (Its own test binary, so no other test has loaded it.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, RunContext};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v16_typescript_loads_only_for_typescript_cells() {
    let cm = CodeMode::builder(CodeModeConfig::enabled()).local_tools(codemode::demo::demo_tools()).build();
    let ctx = RunContext::session("ts");
    for _ in 0..3 {
        let r = cm.exec(&ctx, &CodeModeExecInput::code("const x = 1; return x + 1")).await;
        assert_eq!(r.to_json()["value"], 2);
    }
    let off = CodeMode::builder(CodeModeConfig::default()).build();
    let ts = CodeModeExecInput { language: Some("typescript".into()), ..CodeModeExecInput::code("return 1 as number") };
    assert_eq!(off.exec(&ctx, &ts).await.status(), "failed", "code mode disabled");
    assert!(!codemode::typescript::is_loaded(), "not loaded by JavaScript cells or a disabled runtime");
    let r = cm.exec(&ctx, &ts).await;
    assert_eq!(r.to_json()["value"], 1);
    assert!(codemode::typescript::is_loaded());
}
