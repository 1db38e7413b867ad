//! The engine-generic conformance suite on the boa engine, with its expected-failures baseline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

codemode_conformance::conformance_suite!(std::sync::Arc::new(codemode_engine_boa::BoaEngine::new()));
