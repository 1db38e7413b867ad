//! The engine-generic conformance suite on the quickjs-wasi engine (the same corpus and snapshots as
//! the native engine: any difference between the engines fails here).
#![allow(clippy::unwrap_used, clippy::expect_used)]

codemode_conformance::conformance_suite!(std::sync::Arc::new(codemode_engine_wasi::QuickJsWasiEngine::new()));
