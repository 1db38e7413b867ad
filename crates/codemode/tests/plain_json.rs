//! Plain data leaves the guest as JSON.stringify's text to the byte on every engine: both
//! QuickJS engines serialize plain data natively (`plainJson`: the quickjs-wasi shim in C inside the
//! sandbox, the native engine in Rust over QuickJS's C API); without it, the prelude's isPlain +
//! JSON.stringify do. Seeded random values (every escape class of strings, numbers
//! at their formatting edges, integer-like keys, null-prototype objects, nesting) are returned with
//! `maxOutputBytes` set to their JSON's UTF-8 length, computed in the guest from JSON.stringify:
//! the run must complete at exactly that length and fail with `output_limit_exceeded` one byte
//! below it. A serializer that wrote one byte more or less would cut elsewhere. The same values also
//! round-trip through a nested call (`callPlain` on both) equal to Boa's, which takes the prelude's
//! own path.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{CodeMode, CodeModeConfig, CodeModeErrorCode, CodeModeExecInput, CodeModeResult, RunContext};
use codemode_demo::demo_tools;
use serde_json::Value;

const ENGINES: [&str; 2] = ["quickjs-wasi", "quickjs"];

/// `SEED` and `MODE` are replaced: mode 0 returns the UTF-8 length of JSON.stringify(value), mode 1
/// the value itself, mode 2 the value after a round trip through `demo_echo`.
const CELL: &str = r#"
let seed = SEED;
function rnd() { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; }
const chars = ["a", "é", '"', "\\", "\n", "\t", "\b", "\u0001", "\u001f", "\u007f", "\uD800", "\uDFFF",
  "\uD83D\uDE00", "漢", " ", "\u2028", "0"];
function str() {
  let s = "";
  const n = Math.floor(rnd() * 6);
  for (let i = 0; i < n; i++) s += chars[Math.floor(rnd() * chars.length)];
  return s;
}
function num() {
  const k = Math.floor(rnd() * 8);
  return [0, -0, Math.floor(rnd() * 1e6) - 5e5, rnd() * 1e30, -rnd() * 1e-30, 2 ** Math.floor(rnd() * 70), rnd(), 1 / 3][k];
}
function val(d) {
  switch (Math.floor(rnd() * (d > 4 ? 5 : 8))) {
    case 0: return str();
    case 1: return num();
    case 2: return rnd() < 0.5;
    case 3: return null;
    case 4: return Math.floor(rnd() * 100);
    case 5: { const a = []; const n = Math.floor(rnd() * 4); for (let i = 0; i < n; i++) a.push(val(d + 1)); return a; }
    case 6: {
      const o = {};
      const n = Math.floor(rnd() * 4);
      for (let i = 0; i < n; i++) o[rnd() < 0.2 ? String(Math.floor(rnd() * 10)) : str()] = val(d + 1);
      return o;
    }
    default: { const o = Object.create(null); o[str()] = val(d + 1); return o; }
  }
}
const vs = [];
for (let i = 0; i < 40; i++) vs.push(val(0));
const value = { vs, pad: "p".repeat(1100) };
function utf8(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff) { n += 4; i++; } // JSON.stringify escapes lone surrogates
    else n += 3;
  }
  return n;
}
if (MODE === 0) return utf8(JSON.stringify(value));
if (MODE === 1) return value;
return await tools.demo_echo(value);
"#;

fn cell(seed: u32, mode: u32) -> String {
    CELL.replace("SEED", &seed.to_string()).replace("MODE", &mode.to_string())
}

fn runtime(engine: &str, max_output_bytes: u64) -> CodeMode {
    let config = CodeModeConfig { timeout_ms: 10_000, max_output_bytes, ..CodeModeConfig::enabled() };
    codemode_testing::builder(engine, config).build()
}

async fn run(engine: &str, max_output_bytes: u64, code: &str) -> CodeModeResult {
    runtime(engine, max_output_bytes).exec(&RunContext::session("plain-json"), &CodeModeExecInput::code(code)).await
}

fn value(r: &CodeModeResult) -> Value {
    assert!(matches!(r, CodeModeResult::Completed { .. }), "{}", r.to_json());
    r.to_json()["value"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_data_is_serialized_to_the_byte_on_every_engine() {
    for seed in 1..=12u32 {
        let len = value(&run("quickjs", 1 << 20, &cell(seed, 0)).await).as_u64().unwrap();
        assert!(len > 1024, "seed {seed}: the value must exceed the smallest maxOutputBytes ({len} bytes)");
        let mut echoed = Vec::new();
        for engine in ENGINES {
            let fits = run(engine, len, &cell(seed, 1)).await;
            assert!(
                matches!(fits, CodeModeResult::Completed { .. }),
                "{engine} seed {seed}: {len} bytes did not fit in {len}: {}",
                fits.to_json()
            );
            let over = run(engine, len - 1, &cell(seed, 1)).await;
            assert_eq!(
                over.error_code(),
                Some(CodeModeErrorCode::OutputLimitExceeded),
                "{engine} seed {seed}: {len} bytes fit in {}: {}",
                len - 1,
                over.to_json()
            );
            echoed.push(value(&run(engine, 1 << 20, &cell(seed, 2)).await));
        }
        // The reference: Boa has no native serializer, so its call message is the prelude's own
        // isPlain + JSON.stringify (both QuickJS engines write theirs with `callPlain`).
        let reference = value(&run("boa", 1 << 20, &cell(seed, 2)).await);
        assert_eq!(
            echoed[0], reference,
            "seed {seed}: quickjs-wasi and the prelude's path disagree on the echoed value"
        );
        assert_eq!(echoed[1], reference, "seed {seed}: quickjs and the prelude's path disagree on the echoed value");
    }
}

/// quickjs-wasi's native serializer builds its text in the guest heap, next to the value. When
/// that runs out of heap, the prelude's own path serializes the value instead (it needs less room
/// at once), so a return value that fit under `memoryLimitBytes` before the shortcut still does.
/// 1.25 MB of strings in a 4 MiB heap: the shortcut alone failed with `memory_limit_exceeded`
/// from about 1.1 MB; the prelude's path fits up to about 1.5 MB. The native engine's serializer
/// builds its text in host memory and copies it into the guest heap once; it must fit too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_heap_in_the_native_serializer_falls_back_to_the_prelude() {
    for engine in ENGINES {
        let config = CodeModeConfig {
            timeout_ms: 10_000,
            memory_limit_bytes: 4 << 20,
            max_output_bytes: 10 << 20,
            ..CodeModeConfig::enabled()
        };
        let cm = CodeMode::builder(config).engine_name(engine).local_tools(demo_tools()).build();
        let code = "const a = []; for (let i = 0; i < 40; i++) a.push('x'.repeat(31250) + i); return a;";
        let r = cm.exec(&RunContext::session("plain-json"), &CodeModeExecInput::code(code)).await;
        let v = value(&r);
        assert_eq!(v.as_array().map(Vec::len), Some(40), "{engine}");
        assert_eq!(v[39].as_str().map(str::len), Some(31252), "{engine}");
    }
}

/// A hostile cell hands the serializer a small value that stands for an enormous text: 40 levels
/// of an array holding the level below twice (2^40 leaves, a few kilobytes of heap). The run must
/// end with `timeout` (the prelude's walk is stopped by the interrupt handler) or
/// `memory_limit_exceeded` — no crash, no text built outside the limit — and the engine must serve
/// the next cell. How long the worker stays busy is measured, not asserted (no timed assertions):
/// without the native serializer's interrupt check this test took 11.4 s instead of 1.6 s, the
/// worker held ~5 s past a 300 ms deadline per cell; it passes either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exponentially_shared_value_ends_at_the_deadline_or_the_memory_limit() {
    for engine in ENGINES {
        let config = CodeModeConfig { timeout_ms: 300, ..CodeModeConfig::enabled() };
        let cm = CodeMode::builder(config).engine_name(engine).local_tools(demo_tools()).build();
        for code in [
            "let x = [1, 'two']; for (let i = 0; i < 40; i++) x = [x, x]; return x;",
            "let x = { a: 'b' }; for (let i = 0; i < 40; i++) x = { l: x, r: x }; await tools.demo_echo(x);",
        ] {
            let r = cm.exec(&RunContext::session("plain-json"), &CodeModeExecInput::code(code)).await;
            assert!(
                matches!(r.error_code(), Some(CodeModeErrorCode::Timeout | CodeModeErrorCode::MemoryLimitExceeded)),
                "{engine}: {code}: {}",
                r.to_json()
            );
        }
        let after = cm.exec(&RunContext::session("plain-json"), &CodeModeExecInput::code("return [1, 2];")).await;
        assert_eq!(value(&after), serde_json::json!([1, 2]), "{engine}");
    }
}

/// Text that never went through JSON (an error's message) reaches the host with each lone UTF-16
/// surrogate as one U+FFFD on every engine, as values and output text do (contract O3; the conformance
/// case `text_lone_surrogates` covers output text, and compares failures by code only). Before,
/// the native engine lost such a message entirely and quickjs-wasi wrote three U+FFFD for each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_surrogates_in_error_messages_become_one_replacement_character() {
    for engine in ENGINES {
        let r = run(engine, 1 << 20, r#"throw new Error("bad \uD800 input \uDFFF");"#).await;
        let error = r.to_json()["error"].as_str().unwrap_or_default().to_string();
        assert!(error.contains("bad \u{FFFD} input \u{FFFD}"), "{engine}: {}", r.to_json());
    }
}
