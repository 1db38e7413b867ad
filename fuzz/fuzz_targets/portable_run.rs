//! cargo-fuzz target `portable_run`: raw bytes as an exported run → the decoder's oracle (see
//! codemode-fuzzing): never panics; what it accepts round-trips.
#![no_main]

use codemode_fuzzing::oracles;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    oracles::portable_run_bytes(data);
});
