//! cargo-fuzz target `host_primitive_answering`: raw bytes → generated calls and a script of
//! inline answers → the oracle (see codemode-fuzzing).
#![no_main]

use codemode_fuzzing::{generators, oracles};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    let calls = generators::host_calls(&mut u);
    let script: Vec<u8> = u.arbitrary().unwrap_or_default();
    let _ = oracles::host_primitive_answering(&calls, &script);
});
