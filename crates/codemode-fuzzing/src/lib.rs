//! # codemode-fuzzing
//!
//! Generators and oracles for fuzzing codemode (docs/src/engines.md), in the layout of wasmtime's
//! `crates/fuzzing`: this is an ordinary crate; the cargo-fuzz targets in `fuzz/` are a few lines of
//! glue each (`make fuzz`), and this crate's own tests run every oracle on a few hundred generated
//! inputs, so CI exercises them without a fuzzer.
//!
//! - [`generators`]: structured inputs from raw bytes ([`arbitrary::Unstructured`]): JSON values, guest
//!   JSON text with hostile escapes, host-primitive call sequences, configuration files, cells,
//!   JavaScript-like source for the static scanners, damage to exported runs, quickjs-wasi snapshot
//!   page tables.
//! - [`oracles`]: what must hold for any input — the JSON-safe adapter round-trips and never
//!   panics, the host primitive never panics and keeps its invariants, configuration parsing never
//!   panics and always clamps, the two QuickJS engines agree on every cell, the exported-run
//!   decoder never panics on untrusted bytes and refuses every damaged export, the quickjs-wasi
//!   snapshot decoder (header and page table, reached behind a valid digest) never panics and
//!   accepts only runs inside its memory, and the module guard and nesting estimate never panic.
//!
//! Layering: on top of the facade (with both QuickJS engines and the demo catalog); nothing
//! depends on it.
#![forbid(unsafe_code)]

pub mod generators;
pub mod oracles;

/// A deterministic byte stream (xorshift) for running generators without a fuzzer: `bytes(seed,
/// n)` is what a fuzzer would have handed the target.
pub fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
