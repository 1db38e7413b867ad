//! Every oracle on a few hundred generated inputs (deterministic seeds), so CI exercises the
//! fuzzing oracles without a fuzzer. Crash inputs found by `make fuzz` are kept in `regressions`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use arbitrary::Unstructured;
use codemode_fuzzing::generators as g;
use codemode_fuzzing::{bytes, oracles};

fn each(cases: u64, size: usize, mut f: impl FnMut(&mut Unstructured<'_>)) {
    for seed in 0..cases {
        let data = bytes(seed, size);
        f(&mut Unstructured::new(&data));
    }
}

#[test]
fn adapter_round_trips() {
    each(400, 512, |u| oracles::adapter_round_trip(&g::json_value(u, 5)));
}

#[test]
fn guest_json_is_parsed_safely() {
    each(400, 512, |u| oracles::guest_json(&g::guest_json_text(u)));
}

#[test]
fn host_primitive_keeps_its_invariants() {
    each(400, 1024, |u| oracles::host_primitive(&g::host_calls(u)));
}

#[test]
fn host_primitive_with_an_answerer_keeps_its_invariants() {
    let (mut handed, mut values) = (0, 0);
    each(2000, 1024, |u| {
        let calls = g::host_calls(u);
        let script: Vec<u8> = u.arbitrary().unwrap_or_default();
        let (h, v) = oracles::host_primitive_answering(&calls, &script);
        handed += h;
        values += v;
    });
    assert!(handed > 400, "the answerer was handed only {handed} requests");
    assert!(values > 100, "only {values} outcomes came as values");
}

#[test]
fn config_parsing_never_panics_and_clamps() {
    each(400, 512, |u| oracles::config(&g::config_text(u)));
}

#[test]
fn both_quickjs_engines_agree() {
    each(150, 1024, |u| oracles::differential(&g::cell(u)));
}

#[test]
fn exported_runs_from_untrusted_bytes_never_panic() {
    each(400, 512, |u| {
        let bytes: Vec<u8> = u.arbitrary().unwrap_or_default();
        oracles::portable_run_bytes(&bytes);
    });
    // Bytes that start like an export (either version) reach the decoder's later checks.
    for prefix in [&b"codemode-run/2\n"[..], b"codemode-run/1\n"] {
        each(200, 256, |u| {
            let mut bytes = prefix.to_vec();
            bytes.extend(u.arbitrary::<Vec<u8>>().unwrap_or_default());
            oracles::portable_run_bytes(&bytes);
        });
    }
}

#[test]
fn every_damaged_export_is_refused() {
    each(400, 256, |u| {
        let damage = g::damage(u);
        let body: Vec<u8> = u.arbitrary().unwrap_or_default();
        let decisions: u8 = u.arbitrary().unwrap_or(0);
        oracles::portable_run_damaged(damage, &body, decisions);
    });
}

#[test]
fn the_javascript_scanners_never_panic() {
    each(1000, 512, |u| oracles::js_scanners(&g::js_source(u)));
}

/// Inputs that once broke an oracle (found while writing it or by `make fuzz`).
#[test]
fn regressions() {
    // A lone surrogate used to make guest JSON unparsable (now U+FFFD).
    oracles::guest_json(r#"{"s":"\ud800"}"#);
    oracles::differential("return ['a\\uD800b', await tools.demo_echo({ s: '\\uDC00' })];");
    // `make fuzz` (guest_json) reported this input as a 65 s slow unit while a build saturated the
    // machine; alone it runs in well under a millisecond. Kept as a case all the same.
    let slow_unit: [u8; 30] = [
        0xde, 0xde, 0xde, 0xde, 0xde, 0xde, 0xde, 0xde, 0xde, 0xde, 0x9e, 0xde, 0xde, 0xde, 0xde, 0xde, 0xde, 0xde,
        0xd6, 0xde, 0xde, 0xde, 0xde, 0x32, 0xde, 0xde, 0xfe, 0xde, 0xe8, 0x7b,
    ];
    oracles::guest_json(&g::guest_json_text(&mut Unstructured::new(&slow_unit)));
}

#[test]
fn wasi_snapshot_page_tables_are_checked() {
    let (mut accepted, mut runs) = (0, 0);
    each(600, 1024, |u| {
        let pages: u8 = u.arbitrary().unwrap_or(0);
        let table = g::wasi_page_table(u, u32::from(pages % 4) + 1);
        if oracles::wasi_snapshot_page_table(pages, &table) {
            accepted += 1;
            runs += usize::from(!table.is_empty());
        }
    });
    // The generator reaches both sides of the checks: tables refused and tables (with runs) accepted.
    assert!((60..540).contains(&accepted), "{accepted} of 600 tables accepted");
    assert!(runs >= 30, "{runs} accepted tables had runs");
    // Raw bytes as a table, too.
    each(200, 256, |u| {
        let table: Vec<u8> = u.arbitrary().unwrap_or_default();
        let _ = oracles::wasi_snapshot_page_table(0, &table);
    });
}

#[test]
fn wasi_snapshot_headers_are_checked() {
    use codemode_engine_wasi::snapshot_fuzzing as f;
    let valid = f::header_json(65536);
    // One byte of a valid header changed, anywhere.
    each(600, 64, |u| {
        let mut header = valid.clone();
        let at: usize = u.arbitrary().unwrap_or(0);
        let to: u8 = u.arbitrary().unwrap_or(0);
        let n = header.len();
        header[at % n] = to;
        oracles::wasi_snapshot_header(&header, &[]);
    });
    // Headers that parse but describe what the engine could not have are refused.
    let text = String::from_utf8(valid).unwrap();
    for (from, to) in [
        ("\"memoryBytes\":65536", "\"memoryBytes\":1099511627776"),
        ("\"memoryBytes\":65536", "\"memoryBytes\":65537"),
        ("\"pageSize\":4096", "\"pageSize\":8192"),
        ("\"format\":2", "\"format\":3"),
        ("\"build\":\"fuzz\"", "\"build\":\"other\""),
        ("\"engine\":\"quickjs-wasi\"", "\"engine\":\"quickjs\""),
    ] {
        assert!(text.contains(from), "{text} has {from}");
        let bytes = f::seal_raw(text.replace(from, to).as_bytes(), &[]);
        assert!(f::decode_runs(&bytes, &[0; 65536]).is_err(), "accepted a header with {to}");
    }
    // And the intact header with an empty table is accepted (the oracle reaches the decoder).
    assert!(f::decode_runs(&f::seal_raw(text.as_bytes(), &[]), &[0; 65536]).is_ok());
}
