//! Oracles: what must hold for every input. Each panics (a fuzzer's crash, a test's failure) with a
//! message naming the input when it does not.

use codemode::{CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, RunContext};
use codemode_bridge::HostCallResult;
use codemode_bridge::adapter::{FORBIDDEN_KEYS, encode_for_guest, parse_guest_json, sanitize};
use codemode_bridge::host::BridgeHost;
use codemode_core::engine::GuestLimits;
use serde_json::Value;
use std::sync::OnceLock;

fn has_forbidden_key(v: &Value) -> bool {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(m) => {
                if m.keys().any(|k| FORBIDDEN_KEYS.contains(&k.as_str())) {
                    return true;
                }
                stack.extend(m.values());
            }
            Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    false
}

/// The JSON-safe adapter: a host value sent to the guest and read back is the sanitized value, or
/// a clean limit error; nothing panics.
pub fn adapter_round_trip(value: &Value) {
    let limits = GuestLimits::default();
    let Ok(text) = encode_for_guest(value, limits.max_delivery_bytes, limits.max_json_depth) else { return };
    let back = match parse_guest_json(&text, limits.max_message_bytes, limits.max_json_depth) {
        Ok(v) => v,
        Err(e) => panic!("encoded value does not parse back ({e}): {text}"),
    };
    let mut expected = value.clone();
    sanitize(&mut expected);
    assert_eq!(back, expected, "round trip changed {value}");
    assert!(!has_forbidden_key(&back), "a forbidden key crossed the bridge: {back}");
}

/// Guest JSON text: parsing never panics; what parses is within the depth limit and carries no
/// forbidden key.
pub fn guest_json(text: &str) {
    let limits = GuestLimits::default();
    if let Ok(v) = parse_guest_json(text, limits.max_message_bytes, limits.max_json_depth) {
        assert!(codemode_bridge::adapter::depth(&v) <= limits.max_json_depth as usize, "too deep: {text}");
        assert!(!has_forbidden_key(&v), "forbidden key kept from {text}");
    }
}

/// The host primitive under any call sequence: no panic; request ids strictly increase; the
/// outstanding count never exceeds its limit; every queued request is typed; a fatal limit stays
/// fatal.
pub fn host_primitive(calls: &[(String, String)]) {
    let limits = GuestLimits { max_outstanding_requests: 8, max_message_bytes: 4096, ..GuestLimits::default() };
    let mut host = BridgeHost::new(limits);
    host.begin_drive(16 * 1024);
    let mut last_id = 0;
    let mut issued = 0usize;
    let mut fatal = false;
    for (kind, payload) in calls {
        match host.host_call(kind, payload) {
            HostCallResult::Request(id) => {
                assert!(!fatal, "a request was accepted after a fatal limit");
                assert!(id > last_id, "ids must increase: {id} after {last_id}");
                last_id = id;
                issued += 1;
            }
            HostCallResult::Fatal => fatal = true,
            HostCallResult::Data(data) => {
                assert!(!fatal, "a pull was answered after a fatal limit");
                assert!(data.is_none(), "a pull with no boot source answers nothing");
            }
            HostCallResult::Accepted | HostCallResult::Throw { .. } => {}
            HostCallResult::Settled { .. } | HostCallResult::SettledValue { .. } => {
                panic!("settled at once without an answerer")
            }
        }
        assert!(host.outstanding() <= limits.max_outstanding_requests as usize);
    }
    let (requests, _output) = host.finish_drive();
    assert_eq!(requests.len(), issued, "every accepted request is reported once");
    for r in &requests {
        assert_eq!(r.kind().as_str(), r.request.kind().as_str());
    }
}

/// Answers requests as a script says (one byte each: settle, settle with a failure, start,
/// decline, stop the run, or settle another request's id) and records what it was handed.
#[derive(Debug)]
struct ScriptedAnswerer {
    script: Vec<u8>,
    seen: std::sync::Mutex<Vec<(codemode_core::engine::RequestId, u8)>>,
}

impl codemode_core::engine::Answerer for ScriptedAnswerer {
    fn answer(
        &self,
        request: codemode_core::engine::BridgeRequest,
        notes: &mut Vec<String>,
    ) -> codemode_core::engine::Answer {
        use codemode_core::engine::{Answer, Delivery, GuestError, GuestFailure};
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let choice = self.script.get(seen.len()).copied().unwrap_or(0) % 7;
        seen.push((request.id, choice));
        let id = request.id;
        match choice {
            0 => Answer::Settled(Delivery { id, outcome: Ok(serde_json::json!({ "id": id })) }),
            1 => Answer::Settled(Delivery { id, outcome: Err(GuestError::new("ToolError", "no", None)) }),
            2 => Answer::Started,
            3 => Answer::Declined(request),
            4 => Answer::Stop(GuestFailure { code: None, message: "stopped".into() }),
            5 => Answer::Settled(Delivery { id: id + 1000, outcome: Ok(Value::Null) }),
            _ => {
                notes.push("a note".into());
                Answer::Started
            }
        }
    }
}

/// The host primitive with a step's answerer (requests answered inside the primitive), under any
/// call sequence, any script of answers and any count of outcomes the guest holds: no panic; ids
/// strictly increase; outstanding requests plus held outcomes never exceed the limit once a
/// request is accepted; a settled answer is valid JSON and its request is neither reported nor
/// outstanding; a started one stays outstanding and is not reported; a declined one is reported;
/// the answerer is handed nothing after the step's first output or reported request, and never a
/// yield; a stop or an answer for another id is fatal, and fatal stays fatal. For an odd number of
/// calls the bridge hands resolved values over as they are (`take_values`, the native engine's bridge):
/// a small one must come as a value, and only then. Returns how many requests the answerer was
/// handed and how many outcomes came as values (so a test can tell the oracle was exercised).
pub fn host_primitive_answering(calls: &[(String, String)], script: &[u8]) -> (usize, usize) {
    use codemode_core::engine::RequestId;
    use std::collections::BTreeSet;
    let limits = GuestLimits { max_outstanding_requests: 3, max_message_bytes: 4096, ..GuestLimits::default() };
    let mut host = BridgeHost::new(limits);
    // Half the scripts run against an engine that takes resolved values as they are.
    let takes_values = calls.len() % 2 == 1;
    if takes_values {
        host.take_values();
    }
    host.begin_drive(16 * 1024);
    let answerer = std::sync::Arc::new(ScriptedAnswerer { script: script.to_vec(), seen: Default::default() });
    host.set_answerer(Some(answerer.clone()));
    let (mut last_id, mut fatal, mut closed) = (0, false, false);
    let (mut settled, mut started) = (BTreeSet::<RequestId>::new(), BTreeSet::<RequestId>::new());
    let mut values = 0;
    for (i, (kind, payload)) in calls.iter().enumerate() {
        let held = script.get(script.len().saturating_sub(1 + i)).map_or(0, |b| usize::from(b % 4));
        let handed = answerer.seen.lock().map_or(0, |s| s.len());
        let answer = host.host_call_holding(kind, payload, held);
        let newly: Vec<(RequestId, u8)> = answerer.seen.lock().map(|s| s[handed..].to_vec()).unwrap_or_default();
        assert!(newly.len() <= 1, "one request handed at a time");
        if let Some(&(id, choice)) = newly.first() {
            assert!(!closed, "request {id} handed after the step's output or a reported request");
            assert_ne!(kind, "yield", "a yield was handed to the answerer");
            match (&answer, choice) {
                (HostCallResult::Settled { id: got, json, .. }, 0 | 1) => {
                    assert_eq!(*got, id);
                    assert!(
                        !(takes_values && choice == 0),
                        "a small resolved value went as text to an engine taking values"
                    );
                    assert!(serde_json::from_str::<Value>(json).is_ok(), "settled with invalid JSON: {json}");
                    settled.insert(id);
                }
                (HostCallResult::SettledValue { id: got, value }, 0) => {
                    assert_eq!(*got, id);
                    assert!(takes_values, "a value handed to an engine that does not take values");
                    assert_eq!(*value, serde_json::json!({ "id": id }));
                    settled.insert(id);
                    values += 1;
                }
                (HostCallResult::Request(got), 2 | 3 | 6) => {
                    assert_eq!(*got, id);
                    if choice == 3 {
                        closed = true;
                    } else {
                        started.insert(id);
                    }
                    if choice == 6 {
                        closed = true; // the note is output
                    }
                }
                (HostCallResult::Fatal, 4 | 5) => {}
                (other, c) => panic!("answer {c} for request {id} became {other:?}"),
            }
        }
        match answer {
            HostCallResult::Request(id)
            | HostCallResult::Settled { id, .. }
            | HostCallResult::SettledValue { id, .. } => {
                assert!(!fatal, "a request was accepted after a fatal limit");
                assert!(id > last_id, "ids must increase: {id} after {last_id}");
                last_id = id;
                assert!(
                    host.outstanding() + held <= limits.max_outstanding_requests as usize,
                    "{} outstanding and {held} held over the limit",
                    host.outstanding()
                );
                if newly.is_empty() {
                    closed = true; // reported
                }
            }
            HostCallResult::Fatal => fatal = true,
            HostCallResult::Accepted => closed = true,
            HostCallResult::Data(_) | HostCallResult::Throw { .. } => {}
        }
    }
    let (requests, _output) = host.finish_drive();
    let reported: BTreeSet<RequestId> = requests.iter().map(|r| r.id).collect();
    assert!(settled.is_disjoint(&reported), "a settled request was also reported");
    assert!(started.is_disjoint(&reported), "a started request was also reported");
    for id in &settled {
        assert!(
            host.prepare_delivery(&codemode_core::engine::Delivery { id: *id, outcome: Ok(Value::Null) }).is_none()
        );
    }
    (answerer.seen.lock().map_or(0, |s| s.len()), values)
}

/// A configuration file: parsing never panics, and whatever parses has every number clamped.
pub fn config(text: &str) {
    use codemode_core::config as c;
    let Ok(file) = codemode::config_file::ConfigFile::parse(text) else { return };
    let cm = &file.code_mode;
    let within = |v: u64, clamp: c::Clamp| (clamp.min..=clamp.max).contains(&v);
    assert!(within(cm.timeout_ms, c::TIMEOUT_MS), "{text}");
    assert!(within(cm.memory_limit_bytes, c::MEMORY_LIMIT_BYTES), "{text}");
    assert!(within(cm.max_output_bytes, c::MAX_OUTPUT_BYTES), "{text}");
    assert!(within(cm.max_snapshot_bytes, c::MAX_SNAPSHOT_BYTES), "{text}");
    assert!(within(cm.max_pending_tool_calls, c::MAX_PENDING_TOOL_CALLS), "{text}");
    assert!(within(cm.snapshot_ttl_seconds, c::SNAPSHOT_TTL_SECONDS), "{text}");
    assert!(within(cm.max_search_limit, c::MAX_SEARCH_LIMIT), "{text}");
    assert!(cm.search_default_limit >= 1 && cm.search_default_limit <= cm.max_search_limit, "{text}");
}

struct Pair {
    rt: tokio::runtime::Runtime,
    wasi: CodeMode,
    native: CodeMode,
}

fn pair() -> &'static Pair {
    static PAIR: OnceLock<Pair> = OnceLock::new();
    PAIR.get_or_init(|| {
        let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
            Ok(rt) => rt,
            Err(e) => panic!("cannot start a tokio runtime: {e}"),
        };
        let build = |engine: &str| {
            let mut config = CodeModeConfig::enabled();
            config.timeout_ms = 5_000;
            config.memory_limit_bytes = 32 << 20;
            CodeMode::builder(config).engine_name(engine).local_tools(codemode_demo::demo_tools()).build()
        };
        Pair { rt, wasi: build("quickjs-wasi"), native: build("quickjs") }
    })
}

/// What two engines' results must agree on: status, value, code, error (by name: engines may word
/// errors differently), output and the call counters.
fn comparable(r: &CodeModeResult) -> Value {
    let mut v = r.to_json();
    if let Some(m) = v.as_object_mut() {
        m.remove("runId");
        if let Some(e) = m.get_mut("error") {
            let name = e.as_str().and_then(|t| t.split(':').next()).unwrap_or("").to_string();
            *e = Value::String(name);
        }
        if let Some(Value::Object(t)) = m.get_mut("telemetry") {
            t.retain(|k, _| matches!(k.as_str(), "callCount" | "failedCallCount" | "nestedToolIds"));
        }
    }
    v
}

/// Differential: the same cell on `quickjs-wasi` and native `quickjs` ends the same way.
pub fn differential(cell: &str) {
    let p = pair();
    let ctx = RunContext::session("fuzz");
    let input = CodeModeExecInput::code(cell);
    let (a, b) = p.rt.block_on(async { (p.wasi.exec(&ctx, &input).await, p.native.exec(&ctx, &input).await) });
    // A cell that ran out of time on a loaded machine says nothing about agreement.
    if a.error_code() == Some(codemode::CodeModeErrorCode::Timeout)
        || b.error_code() == Some(codemode::CodeModeErrorCode::Timeout)
    {
        return;
    }
    assert_eq!(comparable(&a), comparable(&b), "engines disagree on the cell:\n{cell}");
}

/// The signing key of the portable-run oracles (any 32 bytes: the oracle is about the format).
fn run_keys() -> codemode_snapshot::RunKeys {
    codemode_snapshot::RunKeys::configured(b"the fuzzing oracles' key, 32+ bytes")
        .unwrap_or_else(|e| panic!("a valid key: {e}"))
}

/// The exported-run decoder on untrusted bytes: it never panics, and whatever it accepts encodes
/// back to bytes it accepts again as the same run.
pub fn portable_run_bytes(bytes: &[u8]) {
    use codemode_snapshot::portable::{PortableRun, decode, encode};
    let keys = run_keys();
    let Ok(PortableRun { run, decisions }) = decode(bytes, &keys, 0) else { return };
    let id = run.run_id.clone();
    let again = encode(PortableRun { run, decisions }, &keys).unwrap_or_else(|e| panic!("re-encoding {id}: {e}"));
    let back = decode(&again, &keys, 0).unwrap_or_else(|e| panic!("a run just encoded is refused: {e}"));
    assert_eq!(back.run.run_id, id);
}

/// An exported run damaged in any way (one bit flipped anywhere, cut short, extended) is refused:
/// the signature covers every byte, and nothing panics on the way.
pub fn portable_run_damaged(damage: crate::generators::Damage, body: &[u8], decisions: u8) {
    use crate::generators::Damage;
    use codemode_snapshot::portable::{PortableRun, decode, encode};
    let keys = run_keys();
    let mut run = codemode_snapshot::conformance::suspended("cm_fuzz", "s", u64::MAX / 2, body.to_vec(), &[(1, true)]);
    run.ready.clear();
    let decisions = (0..decisions % 3)
        .map(|i| (u64::from(i), codemode_core::approval::ApprovalDecision::deny(format!("no {i}"))))
        .collect();
    let bytes = encode(PortableRun { run, decisions }, &keys).unwrap_or_else(|e| panic!("encoding: {e}"));
    assert!(decode(&bytes, &keys, 0).is_ok(), "an intact export is accepted");
    let mut damaged = bytes.clone();
    match damage {
        Damage::Flip { at, bit } => damaged[at % bytes.len()] ^= 1 << (bit % 8),
        Damage::Truncate(len) => damaged.truncate(len % bytes.len()),
        Damage::Extend(n) => damaged.extend(std::iter::repeat_n(0u8, n)),
    }
    assert!(decode(&damaged, &keys, 0).is_err(), "a damaged export ({damage:?}) was accepted");
}

/// The static module guard and the nesting estimate on any source: neither panics, and the
/// estimate is at most the top level plus one level per character (it never invents depth).
pub fn js_scanners(src: &str) {
    let _ = codemode_bridge::modules::find_module_access(src);
    let depth = codemode_bridge::nesting::nesting_estimate(src);
    let chars = src.chars().count();
    assert!(depth <= chars + 1, "a nesting of {depth} in {chars} characters: {src:?}");
}

/// The base image of the quickjs-wasi snapshot oracles: one 64 KiB wasm page of a fixed pattern.
fn wasi_base() -> Vec<u8> {
    (0..65536u32).map(|i| (i.wrapping_mul(31) % 251) as u8).collect()
}

/// Checks what the quickjs-wasi snapshot decoder accepted: runs inside the memory and inside one
/// page each, whole words, non-empty, ascending and never touching within a page; returns the
/// memory they describe (the base image grown to `memory_bytes`, the runs written over it).
fn wasi_memory(base: &[u8], memory_bytes: u64, runs: &[(usize, Vec<u8>)]) -> Vec<u8> {
    use codemode_engine_wasi::snapshot_fuzzing::PAGE_SIZE;
    let size = usize::try_from(memory_bytes).unwrap_or(usize::MAX);
    let mut memory = base.to_vec();
    memory.resize(size.max(base.len()), 0);
    let mut previous: Option<usize> = None;
    for (at, content) in runs {
        let (at, len) = (*at, content.len());
        assert!(at % 8 == 0 && len > 0 && len % 8 == 0, "a run of {len} bytes at {at}");
        assert!(at + len <= size, "a run at {at} of {len} bytes outside a memory of {size}");
        assert_eq!(at / PAGE_SIZE, (at + len - 1) / PAGE_SIZE, "a run at {at} of {len} bytes crosses a page");
        if let Some(end) = previous {
            let gap = if end / PAGE_SIZE == at / PAGE_SIZE && end % PAGE_SIZE != 0 { end + 8 } else { end };
            assert!(at >= gap, "a run at {at} after one ending at {end}");
        }
        previous = Some(at + len);
        memory[at..at + len].copy_from_slice(content);
    }
    memory
}

/// The quickjs-wasi snapshot decoder on a page table of any bytes behind a valid header and digest
/// (so the table's own checks are reached): it never panics; what it accepts describes runs inside
/// the memory (see [`wasi_memory`]), and the memory it describes survives encoding and decoding
/// again unchanged. Returns whether the table was accepted (so a test can tell its generator
/// reaches past the checks).
pub fn wasi_snapshot_page_table(pages: u8, table: &[u8]) -> bool {
    use codemode_engine_wasi::snapshot_fuzzing as f;
    let memory_bytes = (u64::from(pages % 4) + 1) * 65536;
    let base = wasi_base();
    let bytes = f::seal_raw(&f::header_json(memory_bytes), table);
    let Ok((size, runs)) = f::decode_runs(&bytes, &base) else { return false };
    assert_eq!(size, memory_bytes);
    let memory = wasi_memory(&base, size, &runs);
    let again = f::encode_memory(&base, &memory).unwrap_or_else(|e| panic!("re-encoding an accepted memory: {e}"));
    let (size2, runs2) =
        f::decode_runs(&again, &base).unwrap_or_else(|e| panic!("a snapshot just encoded is refused: {e}"));
    assert_eq!(wasi_memory(&base, size2, &runs2), memory, "the memory changed through encoding");
    true
}

/// The quickjs-wasi snapshot decoder on any header bytes (behind a valid digest) with any page
/// table: it never panics, and what it accepts states a memory of whole 64 KiB pages, of the
/// engine and build it was asked for, whose runs stay inside it.
pub fn wasi_snapshot_header(header: &[u8], table: &[u8]) {
    use codemode_engine_wasi::snapshot_fuzzing as f;
    let base = wasi_base();
    let bytes = f::seal_raw(header, table);
    let Ok((size, runs)) = f::decode_runs(&bytes, &base) else { return };
    assert!(size % 65536 == 0, "a memory of {size} bytes");
    let _ = wasi_memory(&base, size, &runs);
}
