//! cargo-fuzz target `host_primitive`: raw bytes → a generated input → the oracle (see codemode-fuzzing).
#![no_main]

use codemode_fuzzing::{generators, oracles};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    oracles::host_primitive(&generators::host_calls(&mut u));
});
