//! # codemode-demo
//!
//! What the `codemode` command ships besides the product itself: the built-in demo catalog
//! ([`catalog`], re-exported here) that `codemode demo`, `codemode run` and
//! `codemode serve --demo-tools` show, the benchmark scenarios ([`bench`]) shared by
//! `codemode bench` and the criterion benches so both measure the same cells the same way, and the
//! realistic fixture catalog of `codemode_catalog::fixtures` (`codemode catalog --fixture N`).
//!
//! Layering: above the facade (`codemode`), beside the CLI; no library crate depends on it. Test
//! support (mock tools with handles, shared runtime builders) is `codemode-testing`, which uses the
//! demo catalog as the tools most suites run against.
#![forbid(unsafe_code)]

pub mod bench;
pub mod catalog;

pub use catalog::*;

/// A realistic catalog of many tools (names, descriptions and schemas shaped like real MCP
/// servers'), for surface-size tests, search benchmarks and `codemode catalog --fixture N`.
pub use codemode_catalog::fixtures;
