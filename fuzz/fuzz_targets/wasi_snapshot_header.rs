//! cargo-fuzz target `wasi_snapshot_header`: bytes as a quickjs-wasi snapshot's header (and the
//! rest as its page table) behind a valid digest → the decoder's oracle (see codemode-fuzzing).
#![no_main]

use codemode_fuzzing::oracles;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.first().map_or(0, |n| usize::from(*n)).min(data.len());
    let (header, table) = data.split_at(split);
    oracles::wasi_snapshot_header(header, table);
});
