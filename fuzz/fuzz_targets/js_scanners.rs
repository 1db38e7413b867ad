//! cargo-fuzz target `js_scanners`: generated JavaScript → the module guard and the nesting
//! estimate (see codemode-fuzzing): neither panics, the estimate never invents depth.
#![no_main]

use codemode_fuzzing::{generators, oracles};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = arbitrary::Unstructured::new(data);
    oracles::js_scanners(&generators::js_source(&mut u));
});
