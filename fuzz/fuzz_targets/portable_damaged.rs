//! cargo-fuzz target `portable_damaged`: a valid exported run, damaged as the bytes say → refused.
#![no_main]

use codemode_fuzzing::{generators, oracles};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    let damage = generators::damage(&mut u);
    let decisions: u8 = u.arbitrary().unwrap_or(0);
    let body: Vec<u8> = u.arbitrary().unwrap_or_default();
    oracles::portable_run_damaged(damage, &body, decisions);
});
