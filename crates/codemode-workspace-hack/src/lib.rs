//! # codemode-workspace-hack
//!
//! No code. The language packages (`codemode-python`, `codemode-node`) depend on this crate only
//! for the features it turns on in dependencies they share with the rest of the workspace: the
//! features the workspace's test build turns on. Cargo unifies a dependency's features over the
//! packages one command builds, so a build of one package alone (maturin's, napi's) would
//! otherwise compile the shared dependencies — wasmtime, swc, rquickjs among them — a second time
//! with other features. With them equal, those builds reuse what the test build compiled.
//!
//! Layering (docs/src/layout.md): a leaf below the language packages; nothing else depends on it.
//! `scripts/check-unified-features.py` fails when the two feature sets drift apart.
#![forbid(unsafe_code)]
