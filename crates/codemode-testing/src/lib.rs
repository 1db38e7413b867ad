//! # codemode-testing
//!
//! Test support and fixtures kept out of the product (as tower keeps `tower-test`): [`mock`], a tool
//! whose calls the test answers, holds or fails through a handle (tests order events with it
//! instead of sleeping); the built-in demo catalog that
//! `codemode demo`, `codemode run` and `codemode serve --demo-tools` show, the benchmark scenarios of
//! `codemode bench` and the criterion benches, and the realistic fixture catalog of
//! `codemode_catalog::fixtures`. The conformance suite, the engines' tests, the CLI and the benches
//! use it; an embedding application never needs it.
//!
//! Layering: above the facade (`codemode`), beside the CLI; nothing in the library crates depends
//! on it.
#![forbid(unsafe_code)]

pub mod bench;
pub mod demo;
pub mod mock;

/// A realistic catalog of many tools (names, descriptions and schemas shaped like real MCP
/// servers'), for surface-size tests, search benchmarks and `codemode catalog --fixture N`.
pub use codemode_catalog::fixtures;
