//! cargo-fuzz target `adapter`: raw bytes → a generated input → the oracle (see codemode-fuzzing).
#![no_main]

use codemode_fuzzing::{generators, oracles};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    oracles::adapter_round_trip(&generators::json_value(&mut u, 6));
});
