//! cargo-fuzz target `wasi_snapshot_page_table`: bytes as a quickjs-wasi snapshot's page table
//! behind a valid header and digest → the decoder's oracle (see codemode-fuzzing): never panics;
//! what it accepts stays inside the memory and survives re-encoding.
#![no_main]

use codemode_fuzzing::oracles;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((pages, table)) = data.split_first() {
        let _ = oracles::wasi_snapshot_page_table(*pages, table);
    }
});
