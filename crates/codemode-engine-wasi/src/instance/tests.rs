//! Unit tests of one guest instance: requests settled inline and across steps, snapshots through the
//! page tables, values as `JSON.parse` makes them, and what heavy runs leave in their slot.

#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::hygiene::STACK_KEEP;
use super::*;
use codemode_bridge::random_seed;
use codemode_core::engine::{BridgeRequest, Delivery, DriveOutcome};

fn fresh_memory(loaded: &Arc<Loaded>) -> Vec<u8> {
    let vm = Vm::new(loaded.clone(), GuestLimits::default(), None).unwrap();
    vm.memory.data(&vm.store).to_vec()
}

/// Memory of an instance no guest code ran in (not even the limits' configuration).
fn raw_memory(loaded: &Arc<Loaded>) -> Vec<u8> {
    let mut store = Store::new(&loaded.engine, HostState::new(GuestLimits::default()));
    let instance = loaded.pre.instantiate(&mut store).unwrap();
    instance.get_memory(&mut store, "memory").unwrap().data(&store).to_vec()
}

fn run_to_end(loaded: &Arc<Loaded>, code: &str) -> DriveOutcome {
    ran(loaded, code).0
}

/// Runs `code` to its end and hands back the instance, not yet dropped.
fn ran(loaded: &Arc<Loaded>, code: &str) -> (DriveOutcome, WasiInstance) {
    let mut instance = fresh_instance(loaded, code);
    let input = DriveInput::new(Vec::new(), Instant::now() + Duration::from_secs(30), 1 << 20);
    let outcome = instance.drive(input).unwrap().outcome;
    (outcome, instance)
}

/// A fresh VM with the default limits.
fn fresh_vm(loaded: &Arc<Loaded>) -> Vm {
    Vm::new(loaded.clone(), GuestLimits::default(), Some(random_seed())).unwrap()
}

/// A fresh VM with its boot data set and a drive begun (a 30 s deadline), ready to start a cell.
fn ready_vm(loaded: &Arc<Loaded>) -> Vm {
    let mut vm = fresh_vm(loaded);
    vm.boot = Some(Arc::from(r#"{"maxDepth":64}"#));
    vm.with_bridge(|b| b.begin_drive(1 << 20));
    vm.set_deadline(Instant::now() + Duration::from_secs(30));
    vm
}

/// A fresh instance that will start `code` at its first drive.
fn fresh_instance(loaded: &Arc<Loaded>, code: &str) -> WasiInstance {
    let vm = fresh_vm(loaded);
    WasiInstance::fresh(vm, Arc::from(r#"{"maxDepth":64}"#), codemode_bridge::wrap_code(code))
}

/// The texts' length `cm_start` passes is the one JavaScript gives them (UTF-16 units: `é` one,
/// `𝄞` two), whatever the head and index hold, and zero without texts.
#[test]
fn texts_are_counted_in_utf16_units() {
    assert_eq!(texts_units("{\"maxDepth\":64}\nA 5\n{\"a\":1}"), 7);
    assert_eq!(texts_units("{\"é\":1}\nŜ 6\n\"é𝄞\""), 5);
    assert_eq!(texts_units("{\"maxDepth\":64}"), 0);
    assert_eq!(texts_units("{}\n\n"), 0);
}

/// The shim settles requests from its own table of pending promises (in the guest's memory):
/// an id settled a second time, or one it never handed out, reaches nothing and the first
/// outcome stands; a failure arrives as the coded error the prelude's `hostError` makes; and a
/// snapshot taken while requests wait carries the table to a fresh instance.
#[test]
fn requests_are_settled_by_id_once_and_survive_a_snapshot() {
    let loaded = crate::loaded().unwrap();
    let mut vm = ready_vm(&loaded);
    let code = codemode_bridge::wrap_code(
        "const p = [tools.call('a', {}), tools.call('b', {}), tools.call('c', {})];\n\
         const out = [];\n\
         for (const x of p) { try { out.push(await x); } catch (e) { out.push(`${e.name}/${e.code}/${e.message}`); } }\n\
         return out;",
    );
    vm.start_cell(&code).unwrap();
    vm.run_jobs().unwrap();
    assert_eq!(vm.poll().unwrap(), None, "the cell waits for its three calls");
    let ids: Vec<RequestId> = vm.with_bridge(|b| b.finish_drive()).0.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 3, "three requests: {ids:?}");
    let bytes = vm.snapshot().unwrap();
    let mut vm = Vm::restore(loaded, &bytes, GuestLimits::default()).unwrap();
    vm.with_bridge(|b| b.begin_drive(1 << 20));
    vm.set_deadline(Instant::now() + Duration::from_secs(30));
    vm.settle(ids[1], true, r#"{"v":2}"#).unwrap();
    vm.settle(ids[1], true, r#"{"v":"again"}"#).unwrap();
    vm.settle(ids[2] + 1000, true, r#""never issued""#).unwrap();
    vm.settle(ids[0], false, r#"{"name":"ToolError","message":"nope","code":"nested_tool_failed"}"#).unwrap();
    vm.run_jobs().unwrap();
    assert_eq!(vm.poll().unwrap(), None, "the third call is still pending");
    vm.settle(ids[2], true, "3").unwrap();
    vm.settle(ids[0], true, r#""too late""#).unwrap();
    vm.run_jobs().unwrap();
    let state = vm.poll().unwrap().expect("the cell completed");
    let value: serde_json::Value = serde_json::from_str(state.strip_prefix('1').expect("completed")).unwrap();
    assert_eq!(value, serde_json::json!(["ToolError/nested_tool_failed/nope", { "v": 2 }, 3]));
}

/// A fresh instance that started `cell` (in one step) and waits for the calls it made: the
/// instance, with its next drive begun, and the ids of the calls.
fn waiting(loaded: &Arc<Loaded>, cell: &str) -> (Vm, Vec<RequestId>) {
    let mut vm = ready_vm(loaded);
    assert_eq!(vm.start_and_poll(&codemode_bridge::wrap_code(cell)).unwrap(), None, "{cell}");
    let ids: Vec<RequestId> = vm.with_bridge(|b| b.finish_drive()).0.iter().map(|r| r.id).collect();
    vm.with_bridge(|b| b.begin_drive(1 << 20));
    (vm, ids)
}

/// What the tests' tools answer: a call to `t` gives back its input, a call to `bad` fails, a
/// call to `slow` is under way (settled by the next step), anything else gives `null`.
fn outcome_of(request: &BridgeRequest) -> Delivery {
    use codemode_core::guest::GuestRequest;
    let outcome = match &request.request {
        GuestRequest::Call { id, input, .. } if id == "t" || id == "slow" => Ok(input.clone()),
        GuestRequest::Call { id, .. } if id == "bad" => Err(codemode_core::engine::GuestError::new(
            "ToolError",
            "it broke",
            Some(codemode_core::error::CodeModeErrorCode::NestedToolFailed),
        )),
        _ => Ok(serde_json::Value::Null),
    };
    Delivery { id: request.id, outcome }
}

/// Answers every request at once, except calls to `slow` (started, kept for the next step).
#[derive(Debug, Default)]
struct AtOnce {
    answered: std::sync::Mutex<usize>,
    started: std::sync::Mutex<Vec<BridgeRequest>>,
}

impl codemode_core::engine::Answerer for AtOnce {
    fn answer(&self, request: BridgeRequest, _notes: &mut Vec<String>) -> codemode_core::engine::Answer {
        use codemode_core::guest::GuestRequest;
        if matches!(&request.request, GuestRequest::Call { id, .. } if id == "slow") {
            self.started.lock().unwrap().push(request);
            return codemode_core::engine::Answer::Started;
        }
        *self.answered.lock().unwrap() += 1;
        codemode_core::engine::Answer::Settled(outcome_of(&request))
    }
}

/// Drives `cell` to its end, delivering each step's reported (and started) requests in the
/// next step: the outcome, the number of steps and of requests answered inline.
fn drive_to_end(loaded: &Arc<Loaded>, cell: &str, answerer: Option<Arc<AtOnce>>) -> (DriveOutcome, usize, usize) {
    let mut instance = fresh_instance(loaded, cell);
    let mut deliveries = Vec::new();
    for steps in 1..=1000 {
        let mut input = DriveInput::new(deliveries, Instant::now() + Duration::from_secs(30), 1 << 20);
        input.answerer = answerer.clone().map(|a| a as Arc<dyn codemode_core::engine::Answerer>);
        let report = instance.drive(input).unwrap();
        let started = answerer.as_ref().map(|a| std::mem::take(&mut *a.started.lock().unwrap())).unwrap_or_default();
        deliveries = report.requests.iter().chain(&started).map(outcome_of).collect();
        if !matches!(report.outcome, DriveOutcome::Pending) && deliveries.is_empty() {
            let inline = answerer.map_or(0, |a| *a.answered.lock().unwrap());
            return (report.outcome, steps, inline);
        }
    }
    panic!("{cell}: no end in 1000 steps");
}

/// Requests answered inside the host primitive (the step's answerer) leave the cell exactly
/// what the host's delivery in a later step leaves it — the same value, the same failures,
/// callbacks run in the same order (an un-awaited call's callback after the return value is
/// taken; a `then` getter on every object, which makes calls while outcomes are settled) — in
/// fewer steps: a loop of calls answered at once runs in one.
#[test]
fn requests_answered_inline_leave_the_cell_what_later_steps_leave_it() {
    let loaded = crate::loaded().unwrap();
    let cells = [
        "let s = 0; for (let i = 0; i < 50; i++) s += (await tools.call('t', { i })).i; return s;",
        "const log = []; tools.call('t', { n: 1 }).then((r) => log.push(r.n)); return log;",
        "const log = [];\n\
         const all = Promise.all([1, 2, 3].map((i) => tools.call('t', { i }).then((r) => { log.push(r.i); return r.i * 10; })));\n\
         log.push('sync'); const got = await all; await null; return [log, got];",
        "const out = []; try { await tools.call('bad', {}); } catch (e) { out.push(`${e.name}/${e.code}/${e.message}`); }\n\
         out.push((await tools.call('t', { after: 1 })).after); return out;",
        "const big = 'x'.repeat(10000) + '\\u00e9'; const r = await tools.call('t', { big }); return [r.big.length, r.big.at(-1)];",
        "const a = tools.call('slow', { s: 1 }); const b = await tools.call('t', { f: 2 });\n\
         return [b.f, (await a).s];",
        "let made = 0;\n\
         Object.defineProperty(Object.prototype, 'then', { configurable: true, get() {\n\
           if (made < 3) { made++; tools.call('t', { made }).then((r) => { globalThis.last = r.made; }); }\n\
           return undefined; } });\n\
         const r = await tools.call('t', { first: true });\n\
         for (let i = 0; i < 5; i++) await null;\n\
         delete Object.prototype.then; return [r.first, made, globalThis.last];",
    ];
    for cell in cells {
        let (stepwise, stepwise_steps, _) = drive_to_end(&loaded, cell, None);
        let (inline, inline_steps, answered) = drive_to_end(&loaded, cell, Some(Arc::new(AtOnce::default())));
        assert_eq!(inline, stepwise, "{cell}");
        assert!(matches!(inline, DriveOutcome::Completed(_)), "{cell}: {inline:?}");
        assert!(answered > 0, "{cell}: nothing was answered inline");
        // (With a call under way the step waits for it either way.)
        assert!(
            inline_steps < stepwise_steps || (cell.contains("slow") && inline_steps == stepwise_steps),
            "{cell}: {inline_steps} steps inline, {stepwise_steps} stepwise"
        );
    }
    let (outcome, steps, answered) = drive_to_end(&loaded, cells[0], Some(Arc::new(AtOnce::default())));
    assert_eq!((outcome, steps, answered), (DriveOutcome::Completed(serde_json::json!(1225)), 1, 50));
}

/// A step's end (`settle_and_poll`, one call into the guest: `cm_step`) delivers, runs the jobs
/// and polls as `settle`, `run_jobs` and `poll` do one by one: a cell still waiting polls as
/// pending (the shim then answers from the cell's promise without calling the prelude), a step
/// with nothing to deliver changes nothing, the last delivery completes the cell, and a
/// delivery the guest refuses fails the step with the guest's error (the jobs after it do not
/// run).
#[test]
fn a_steps_end_delivers_runs_and_polls_in_one_call() {
    let loaded = crate::loaded().unwrap();
    let start = |cell: &str| waiting(&loaded, cell);
    let cell = "const a = tools.call('a', {}), b = tools.call('b', {});\n\
                const x = await a; globalThis.seen = x; return [x, await b, globalThis.seen];";
    let (mut vm, ids) = start(cell);
    assert_eq!(ids.len(), 2);
    assert_eq!(vm.settle_and_poll(None).unwrap(), None, "nothing delivered: still running");
    assert_eq!(vm.settle_and_poll(Some((ids[0], true, r#"{"v":1}"#))).unwrap(), None, "waits for b");
    let state = vm.settle_and_poll(Some((ids[1], true, "[2]"))).unwrap().expect("the cell completed");
    let value: serde_json::Value = serde_json::from_str(state.strip_prefix('1').expect("completed")).unwrap();
    assert_eq!(value, serde_json::json!([{ "v": 1 }, [2], { "v": 1 }]));
    assert_eq!(vm.settle_and_poll(None).unwrap(), Some(state), "a finished cell keeps its state");

    let (mut vm, ids) = start(cell);
    match vm.settle_and_poll(Some((ids[0], true, "{not json"))) {
        Err(VmFault::Failure(f)) => assert!(f.message.contains("SyntaxError"), "{f:?}"),
        other => panic!("a refused delivery fails the step: {other:?}"),
    }

    // A cell that fails: its rejection is the state once the jobs have run.
    let (mut vm, ids) = start("await tools.call('a', {}); throw new TypeError('after the call');");
    let state = vm.settle_and_poll(Some((ids[0], true, "1"))).unwrap().expect("the cell failed");
    assert!(state.starts_with('0') && state.contains("after the call"), "{state}");
}

/// A snapshot that compares only the pages the page tables say were written is byte for byte
/// the one that compares every page: for a small cell, one that grows the memory, one that
/// writes a megabyte and sets it back to zeros (pages written, content equal to the image),
/// one that builds a large string and drops it, and for each of them again in an instance
/// taken from a pool slot the previous cells wrote (its pages reset by copying the image
/// back). Where the page tables can be read, some pages are skipped, so the shortcut is what
/// is compared here. The snapshot of the suspended cell resumes to the right answer.
#[test]
fn snapshots_through_the_page_tables_equal_comparing_every_page() {
    let loaded = crate::loaded().unwrap();
    let cells = [
        "const r = await tools.call('a', {}); return [r, 1];",
        "globalThis.big = Array.from({ length: 300000 }, (_, i) => i * 2);\n\
         const r = await tools.call('a', {}); return [r, big.length, big[299999]];",
        "const u = new Uint8Array(1 << 20); u.fill(7); u.fill(0);\n\
         const r = await tools.call('a', {}); return [r, u.length, u[12345]];",
        "let s = 'x'.repeat(2_000_000) + 'y'; const n = s.length; s = null;\n\
         const r = await tools.call('a', {}); return [r, n];",
    ];
    let expected = [
        serde_json::json!([5, 1]),
        serde_json::json!([5, 300000, 599998]),
        serde_json::json!([5, 1048576, 0]),
        serde_json::json!([5, 2000001]),
    ];
    let mut skipped_some = false;
    for round in 0..2 {
        for (cell, want) in cells.iter().zip(&expected) {
            let (mut vm, ids) = waiting(&loaded, cell);
            assert_eq!(ids.len(), 1, "{cell}");
            if let Some(flags) = crate::written::may_differ(vm.memory.data(&vm.store), 0) {
                skipped_some |= flags.iter().any(|f| !f);
            }
            let read = vm.encode_with(true).unwrap();
            let compared = vm.encode_with(false).unwrap();
            assert!(read == compared, "round {round}: the snapshots differ for {cell}");
            drop(vm);
            let mut vm = Vm::restore(loaded.clone(), &read, GuestLimits::default()).unwrap();
            vm.with_bridge(|b| b.begin_drive(1 << 20));
            vm.set_deadline(Instant::now() + Duration::from_secs(30));
            let state = vm.settle_and_poll(Some((ids[0], true, "5"))).unwrap().expect("the cell completed");
            let value: serde_json::Value = serde_json::from_str(state.strip_prefix('1').expect("completed")).unwrap();
            assert_eq!(&value, want, "{cell}");
        }
    }
    assert_eq!(skipped_some, crate::written::usable(), "pages are skipped exactly where the tables are read");
}

/// Starts `cell`, settles the calls it makes at once with `texts` in order, and runs it to its
/// end: the cell's state (`1` + value), or the fault of a settle or of the run.
fn settled_with(loaded: &Arc<Loaded>, cell: &str, texts: &[&str]) -> Result<String, VmFault> {
    let mut vm = ready_vm(loaded);
    vm.start_cell(&codemode_bridge::wrap_code(cell)).unwrap();
    vm.run_jobs().unwrap();
    let ids: Vec<RequestId> = vm.with_bridge(|b| b.finish_drive()).0.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), texts.len(), "one call per text: {cell}");
    vm.with_bridge(|b| b.begin_drive(1 << 20));
    for (id, text) in ids.iter().zip(texts) {
        vm.settle(*id, true, text)?;
    }
    vm.run_jobs()?;
    Ok(vm.poll()?.expect("the cell completed"))
}

/// A cell comparing the value its call settles with against `JSON.parse` of the same text, by
/// type, `Object.is`, prototype, own keys in order and their descriptors: `null` when equal,
/// else where they differ.
fn compared_with_json_parse(text: &str) -> String {
    let literal = serde_json::to_string(text).unwrap();
    format!(
        "function same(a, b, at) {{\n\
           if (typeof a !== typeof b) return at + ': ' + typeof a + ' vs ' + typeof b;\n\
           if (a === null || typeof a !== 'object') return Object.is(a, b) ? null : at + ': ' + String(a) + ' vs ' + String(b);\n\
           if (b === null || Array.isArray(a) !== Array.isArray(b)) return at + ': kind';\n\
           if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return at + ': prototype';\n\
           if (Object.isExtensible(a) !== Object.isExtensible(b)) return at + ': extensible';\n\
           const ka = Reflect.ownKeys(a), kb = Reflect.ownKeys(b);\n\
           if (ka.length !== kb.length) return at + ': keys ' + JSON.stringify(ka) + ' vs ' + JSON.stringify(kb);\n\
           for (let i = 0; i < ka.length; i++) {{\n\
             if (ka[i] !== kb[i]) return at + ': key ' + i + ' ' + JSON.stringify(ka[i]) + ' vs ' + JSON.stringify(kb[i]);\n\
             const da = Object.getOwnPropertyDescriptor(a, ka[i]), db = Object.getOwnPropertyDescriptor(b, kb[i]);\n\
             if (da.writable !== db.writable || da.enumerable !== db.enumerable || da.configurable !== db.configurable || 'get' in da) return at + ': descriptor of ' + String(ka[i]);\n\
             const d = same(da.value, db.value, at + '.' + String(ka[i]));\n\
             if (d !== null) return d;\n\
           }}\n\
           return null;\n\
         }}\n\
         const got = await tools.call('a', {{}});\n\
         return same(got, JSON.parse({literal}), '$')"
    )
}

/// A tiny deterministic generator of JSON values (xorshift), for the settle test below: keys and
/// strings with escapes, control characters, non-ASCII and astral characters, numeric and
/// special keys; integers, fractions, exponents, long and negative numbers, `-0`; nesting.
struct Gen(u64);
impl Gen {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
    fn string(&mut self) -> String {
        // Pieces, `|`-separated (one is empty).
        const PIECES: &str = "a|i|0|12|__proto__|constructor|toJSON||é|𝄞|\n|\"|\\|\u{1}|\u{2028}|\u{7f}";
        let pieces: Vec<&str> = PIECES.split('|').collect();
        (0..self.next(4)).map(|_| pieces[self.next(pieces.len() as u64) as usize]).collect()
    }
    fn value(&mut self, depth: u32) -> serde_json::Value {
        use serde_json::{Value, json};
        match self.next(if depth == 0 { 5 } else { 7 }) {
            0 => Value::Null,
            1 => Value::Bool(self.next(2) == 1),
            2 => match self.next(6) {
                0 => json!(self.next(1 << 20)),
                1 => json!(-(self.next(u64::MAX >> 1) as i64)),
                2 => json!(self.next(u64::MAX)),
                3 => json!(-0.0),
                4 => json!(self.next(1_000_000) as f64 / 7.0),
                _ => json!(f64::from_bits(self.next(0x7fe0_0000_0000_0000))),
            },
            3 | 4 => Value::String(self.string()),
            5 => Value::Array((0..self.next(4)).map(|_| self.value(depth - 1)).collect()),
            _ => Value::Object((0..self.next(4)).map(|_| (self.string(), self.value(depth - 1))).collect()),
        }
    }
}

/// What a settled call delivers is what `JSON.parse` makes of the same text: the shim reads the
/// host's compact JSON itself (`codemode_json_read`) and hands anything else (whitespace, bad
/// input) to QuickJS's parser. Compact texts of every kind, the same texts pretty-printed, and
/// texts the reader must give up on; a text JSON.parse refuses fails the settle as before; a
/// short text after a longer one in the same input buffer is read to its own end only.
#[test]
fn settled_values_are_what_json_parse_makes() {
    let loaded = crate::loaded().unwrap();
    let mut texts: Vec<String> = [
        r#"{"i":1}"#,
        "5",
        "-0",
        "-0.0",
        "0.1",
        "1e300",
        "-1.5E-7",
        "123456789012345678901234567890",
        "1.7976931348623157e308",
        r#""""#,
        r#""\u0000\ud800\udc00\ud800x\udfff\/\b\f\n\r\t""#,
        r#"{"__proto__":{"polluted":true},"0":1,"4294967295":2,"01":3,"-1":4,"":5,"é":6}"#,
        r#"{"a":1,"a":2}"#,
        "[[],{},[[[]]],[null,true,false]]",
        " {\"i\" : 1 } ",
        "[1, 2,\n3]",
        "\"\u{7f}\u{80}é𝄞\"",
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    texts.push(format!("{}1{}", "[".repeat(200), "]".repeat(200)));
    texts.push(format!("\"{}\"", "x".repeat(5000)));
    let mut g = Gen(0x2545_F491_4F6C_DD1D);
    for _ in 0..120 {
        let v = g.value(4);
        texts.push(serde_json::to_string(&v).unwrap());
        texts.push(serde_json::to_string_pretty(&v).unwrap());
    }
    for text in &texts {
        let state = settled_with(&loaded, &compared_with_json_parse(text), &[text]).unwrap();
        assert_eq!(state, "1null", "settled with {text}");
    }
    for bad in ["", "{", r#"{"a":}"#, "[1,]", "01", "1.", "-", "tru", r#""\x""#, "\"a\u{1}\"", r#"{"a":1}x"#, "NaN"] {
        assert!(
            settled_with(&loaded, "return await tools.call('a', {})", &[bad]).is_err(),
            "JSON.parse refuses {bad:?}, so must the settle"
        );
    }
    let state = settled_with(
        &loaded,
        "const p = [tools.call('a', {}), tools.call('b', {})]; return [await p[0], await p[1]]",
        &["\"123456789\"", "1"],
    )
    .unwrap();
    assert_eq!(state, r#"1["123456789",1]"#);
}

/// Inputs that fit the shim's input buffer go there; larger ones (here a 40 KB cell and boot
/// data) take a guest allocation, freed afterwards, and arrive whole either way.
#[test]
fn inputs_larger_than_the_input_buffer_arrive_whole() {
    let loaded = crate::loaded().unwrap();
    for n in [10, 20_000, 40_000] {
        let code = format!("const s = '{}'; return s.length", "x".repeat(n));
        let outcome = run_to_end(&loaded, &code);
        match outcome {
            DriveOutcome::Completed(v) => assert_eq!(v, serde_json::json!(n), "cell of {} bytes", code.len()),
            other => panic!("cell of {} bytes: {other:?}", code.len()),
        }
    }
    let cap = loaded.statics.get().copied().map_or(0, |s| s.in_buf.1) as usize;
    assert!(cap > 0 && cap < 40_000, "the 40 KB cell took the allocation path (buffer {cap} B)");
}

const DEEP: &str =
    "function deep(n) { return n === 0 ? 0 : 1 + deep(n - 1); } try { return deep(1e6) } catch (e) { return e.name }";

/// The deep-stack probe reads zeros in every instance no deep run has used: the whole stack
/// below the kept depth is zero in the image (pre-initialization did not reach it), so an
/// ordinary run never looks deep, and releasing those pages gives back exactly the image.
#[test]
fn the_stack_below_the_kept_depth_is_zero_in_the_image() {
    let loaded = crate::loaded().unwrap();
    let memory = raw_memory(&loaded);
    let vm = Vm::new(loaded.clone(), GuestLimits::default(), None).unwrap();
    let below = vm.statics.stack_top.checked_sub(STACK_KEEP).expect("the stack is deeper than the kept depth") as usize;
    assert!(below >= 4096 && below.is_multiple_of(4096), "page-aligned probe: {below:#x}");
    assert!(memory[..below].iter().all(|&b| b == 0), "the image holds data below the kept stack depth");
    for (code, deep) in [("return 1+1", false), ("return JSON.stringify([[[[[[[[1]]]]]]]])", false), (DEEP, true)] {
        let (outcome, instance) = ran(&loaded, code);
        assert!(matches!(outcome, DriveOutcome::Completed(_)), "{code}: {outcome:?}");
        let vm = instance.vm.as_ref().expect("the instance keeps its vm");
        assert_eq!(vm.stack_went_deep(), deep, "{code}");
    }
}

/// Flags of the pages at `at..at + len` of this process, from `/proc/self/pagemap`: how many
/// are resident, private and written (present, exclusively mapped, not file-backed).
#[cfg(target_os = "linux")]
fn written_pages(at: usize, len: usize) -> usize {
    use std::os::unix::fs::FileExt;
    let map = std::fs::File::open("/proc/self/pagemap").unwrap();
    let mut raw = vec![0u8; len / 4096 * 8];
    map.read_exact_at(&mut raw, (at / 4096 * 8) as u64).unwrap();
    raw.chunks_exact(8)
        .map(|e| u64::from_le_bytes(e.try_into().unwrap()))
        .filter(|e| e & (1 << 63) != 0 && e & (1 << 56) != 0 && e & (1 << 61) == 0)
        .count()
}

/// Pages a heavy run wrote beyond what ordinary runs write do not outlive it in the pool's
/// slot: without the release, the slot keeps them resident and wasmtime copies every one of them
/// back at the end of each later run in that slot. An ordinary run's pages stay (wasmtime resets
/// them in place; releasing them would make the next run fault them in again). Read from the
/// kernel's page table, after each instance is gone.
#[cfg(target_os = "linux")]
#[test]
fn heavy_runs_leave_no_written_pages_beyond_the_ordinary_in_their_slot() {
    let loaded = crate::loaded().unwrap();
    assert!(loaded.pooled, "this machine grants the pooling allocator");
    let statics = Vm::new(loaded.clone(), GuestLimits::default(), None).unwrap().statics;
    let deep_stack = (statics.stack_top - STACK_KEEP) as usize;
    let grow = "const a = []; for (let i = 0; i < 20000; i++) a.push({ i, s: 'x' + i }); return a.length";
    // (cell, its result, the range checked, written pages expected there after the instance ends)
    let cases: [(&str, serde_json::Value, usize, bool); 3] = [
        (DEEP, serde_json::json!("RangeError"), deep_stack, false),
        (grow, serde_json::json!(20000), statics.initial_memory, false),
        ("return 1+1", serde_json::json!(2), statics.initial_memory, true),
    ];
    for (code, result, range, kept) in cases {
        let (outcome, instance) = ran(&loaded, code);
        assert_eq!(outcome, DriveOutcome::Completed(result), "{code}");
        let vm = instance.vm.as_ref().expect("the instance keeps its vm");
        let at = vm.memory.data_ptr(&vm.store) as usize;
        let before = written_pages(at, range);
        assert!(before >= 8, "{code}: the run wrote {before} pages of the range");
        drop(instance);
        // The slot stays mapped in the pool; only its page-table entries are read.
        let after = written_pages(at, range);
        if kept {
            assert!(after >= 8, "{code}: an ordinary run's pages were released ({after} left)");
        } else {
            assert_eq!(after, 0, "{code}: written pages left in the slot");
        }
    }
}

/// The pooling allocator resets only the pages a run wrote (`pagemap_scan`), keeping them
/// resident: after runs that dirtied the deep stack (below the image), grew the heap and
/// rewrote the image's own pages, every new instance's memory is still byte for byte what an
/// instance that never ran a cell holds, and an unconfigured one is the base snapshots are
/// diffed against.
#[test]
fn a_new_instance_starts_from_the_pristine_image_whatever_earlier_runs_wrote() {
    let loaded = crate::loaded().unwrap();
    let base = loaded.base().unwrap().memory.clone();
    let pristine = fresh_memory(&loaded);
    let hostile = [
        // Recursion to the stack limit (caught): the deepest stack pages, below the image.
        DEEP,
        "globalThis.leak = 'x'.repeat(3 << 20); const a = []; for (let i = 0; i < 50000; i++) a.push({ i }); return a.length",
        "Object.prototype.polluted = 1; Array.prototype.push = null; JSON.stringify = null; return 1",
    ];
    for round in 0..4 {
        for code in hostile {
            let outcome = run_to_end(&loaded, code);
            assert!(matches!(outcome, DriveOutcome::Completed(_)), "round {round}: {code}: {outcome:?}");
        }
        let now = fresh_memory(&loaded);
        assert_eq!(now.len(), pristine.len(), "round {round}: memory size");
        let differing = now.chunks(4096).zip(pristine.chunks(4096)).filter(|(a, b)| a != b).count();
        assert_eq!(differing, 0, "round {round}: {differing} pages differ from the pristine image");
    }
    assert!(raw_memory(&loaded) == base, "an unconfigured instance is the base snapshots are diffed against");
}
