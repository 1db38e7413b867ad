//! The engine-generic conformance suite on the native quickjs engine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

codemode_conformance::conformance_suite!(std::sync::Arc::new(codemode_engine_quickjs::QuickJsEngine::new()));
