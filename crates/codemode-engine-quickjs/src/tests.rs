//! Unit tests of the native engine: VMs fresh and recycled, limits, the warm pool, the interrupt.

use super::*;
use codemode_bridge::driver::GuestVm;
use codemode_core::engine::DriveOutcome;
use serde_json::{Value as Json, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

/// Runs `code` as a cell on `vm` (fresh or recycled) to its first report, for at most `within`.
fn drive_on(vm: &mut Vm, code: &str, within: Duration) -> Result<DriveReport, EngineError> {
    vm.begin_run();
    vm.boot = Some("{}".into());
    let input = DriveInput::new(Vec::new(), Instant::now() + within, 1 << 20);
    drive(vm, &mut Some(codemode_bridge::wrap_code(code)), input)
}

/// [`drive_on`] with ten seconds, to an outcome.
fn run_on(vm: &mut Vm, code: &str) -> DriveOutcome {
    drive_on(vm, code, Duration::from_secs(10)).unwrap().outcome
}

fn completed(outcome: DriveOutcome) -> Json {
    match outcome {
        DriveOutcome::Completed(v) => v,
        other => panic!("not completed: {other:?}"),
    }
}

const PLANT: &str = r#"globalThis.planted = "secret"; Object.prototype.polluted = 1;
    globalThis.keep = []; for (let i = 0; i < 2000; i++) keep.push({ i, s: "s" + i });
    Promise.resolve().then(() => { globalThis.late = 1; });
    return Math.random();"#;
const CHECK: &str = r#"return [typeof planted, ({}).polluted, typeof keep, typeof late, Math.random()];"#;

/// The build compiles the prelude (the tests never cross-compile), from exactly [`PRELUDE`],
/// to the bytes a run-time compile makes (both call `prelude_compile::compile`): a layer the
/// build script missed, a file name of its own, or a bytecode that is not deterministic would
/// each fail here.
#[test]
fn the_build_made_the_prelude_bytecode_a_run_time_compile_makes() {
    let built = built_prelude_bytecode().expect("build.rs embedded bytecode of this very prelude");
    let compiled = compile_prelude().unwrap();
    // (Not `assert_eq!`: it would print 25 KB of bytes.)
    assert!(built == compiled.as_slice(), "{} bytes built, {} compiled, not the same", built.len(), compiled.len());
    assert_eq!(prelude_bytecode().unwrap().as_ptr(), built.as_ptr(), "the engine loads the build's bytes");
}

#[test]
fn a_recycled_vm_is_its_booted_image_again_byte_for_byte() {
    let mut vm = Vm::new(GuestLimits::default()).unwrap();
    let image = vm.arena.as_ref().expect("a reusable VM").image_len();
    // The booted runtime, context and prelude: a few hundred KiB (what a reset copies back).
    assert!((64 << 10..4 << 20).contains(&image), "image of {image} bytes");
    let first = completed(run_on(&mut vm, PLANT));
    let carved = vm.arena.as_ref().unwrap().carved();
    assert!(carved > image, "the run carved beyond the image");
    assert!(vm.recycle());
    // Every byte the run could have written: the image's, and the zeroed rest up to its reach.
    assert!(vm.arena.as_ref().unwrap().is_pristine(carved + (1 << 16)));
    let seen = completed(run_on(&mut vm, CHECK));
    assert_eq!(
        seen.as_array().unwrap()[..4],
        [json!("undefined"), Json::Null, json!("undefined"), json!("undefined")],
        "{seen}"
    );
    assert_ne!(seen[4], first, "Math.random is reseeded for the new run");
    // And again from the same image.
    assert!(vm.recycle());
    assert_eq!(completed(run_on(&mut vm, "return typeof planted")), json!("undefined"));
}

/// The page keepers (`ffi::PageKeepers`): from the booted image, a short-lived block of any
/// size class takes a place in a page that stays. Without them, a class whose pages were full
/// at boot made a page for it and freed it again (this prelude leaves one such class, an
/// object's, which every nested call met); keeping one block per class, without the pair,
/// still left two classes whose last free place the keeper itself took.
#[test]
fn a_short_lived_block_of_any_class_makes_no_page() {
    let vm = Vm::new(GuestLimits::default()).unwrap();
    let pages = |vm: &Vm| vm.arena.as_ref().expect("a reusable VM").pages_made();
    let before = pages(&vm);
    vm.ctx.with(|ctx| ffi::PageKeepers::churn(&ctx));
    assert_eq!(pages(&vm), before, "pages made for short-lived blocks");
}

/// A catalog source that records every key the guest pulls.
#[derive(Debug)]
struct Recording(Arc<dyn codemode_core::engine::BootSource>, Mutex<Vec<String>>);

impl codemode_core::engine::BootSource for Recording {
    fn pull(&self, key: &str) -> Option<Arc<str>> {
        self.1.lock().unwrap().push(key.to_string());
        self.0.pull(key)
    }
}

/// The guest pulls only what a cell reaches: one tool of a 40-tool MCP server makes that tool
/// alone (one `mcptool:` pull, never the server's list), and neither it nor a convenience
/// function asks on its first call whether the approval policy gates it (the name's answer
/// said). Enumerating the namespace then pulls the list and makes every tool.
#[test]
fn a_cell_pulls_only_the_tools_it_reaches() {
    use codemode_core::guest::{BootData, McpServerView, McpToolView};
    let tools = (0..40).map(|i| McpToolView { name: format!("t{i}"), alias: None, explicit: false }).collect();
    let boot = BootData {
        conveniences: vec![("demo_echo".into(), "plugin:demo:demo_echo".into())],
        max_depth: 64,
        mcp: vec![McpServerView {
            name: "srv".into(),
            alias: None,
            tools,
            resources: false,
            prompts: false,
            down: None,
        }],
        ..BootData::default()
    };
    let source = Arc::new(Recording(codemode_bridge::BootText::new(&boot).source(), Mutex::new(Vec::new())));
    // Each cell on a fresh VM: its outcome, and the keys it pulled.
    let run = |code: &str| {
        let mut vm = Vm::new(GuestLimits::default()).unwrap();
        vm.begin_run();
        vm.boot = Some("{}".into());
        let mut input = DriveInput::new(Vec::new(), Instant::now() + Duration::from_secs(10), 1 << 20);
        input.boot_source = Some(source.clone());
        let report = drive(&mut vm, &mut Some(codemode_bridge::wrap_code(code)), input).unwrap();
        (completed(report.outcome), std::mem::take(&mut *source.1.lock().unwrap()))
    };
    let (value, keys) = run("const f = MCP.srv.t7; const same = f === MCP.srv.t7; f({}); tools.demo_echo({}); \
         return [typeof f, same, f.name, typeof tools.demo_echo]");
    assert_eq!(value, json!(["function", true, "t7", "function"]));
    assert_eq!(keys, ["mcpserver:srv", "mcptool:3:srvt7", "conv:demo_echo"]);
    let (value, keys) = run(r#"return Object.keys(MCP.srv).filter((k) => !k.startsWith("$")).length"#);
    assert_eq!(value, json!(40));
    assert_eq!(keys, ["mcpserver:srv", "mcp:srv"]);
}

/// A run that makes a few tens of KiB of objects does not collect: the booted image's GC
/// threshold is half again the booted heap, as QuickJS sets it after a collection, not its
/// initial 256 KiB a few KiB above the heap (which every reset restored, so such runs
/// collected every time).
#[test]
fn a_small_run_does_not_collect() {
    let mut vm = Vm::new(GuestLimits::default()).unwrap();
    let threshold = |vm: &Vm| vm.ctx.with(|ctx| ffi::gc_threshold(&ctx));
    let before = threshold(&vm);
    let cell = "const a = []; for (let i = 0; i < 500; i++) a.push({ i, s: 'x' + i }); return a.length";
    for _ in 0..3 {
        assert_eq!(completed(run_on(&mut vm, cell)), json!(500));
        assert_eq!(threshold(&vm), before, "a collection ran (it sets a new threshold)");
        assert!(vm.recycle());
    }
}

/// When the host will not lend a region (here: a heap limit so large that twice it cannot be
/// mapped), the VM takes its memory from the guarded system allocator instead and serves one
/// run; it is never reset for another.
#[test]
fn a_vm_whose_region_cannot_be_mapped_serves_one_run() {
    let limits = GuestLimits { memory_limit_bytes: 1 << 62, ..GuestLimits::default() };
    let mut vm = Vm::new(limits).unwrap();
    assert!(vm.arena.is_none(), "a 2^63-byte region was mapped");
    assert_eq!(completed(run_on(&mut vm, "return [1 + 1, 'x'.repeat(1 << 20).length]")), json!([2, 1 << 20]));
    assert!(!vm.recycle(), "a VM without a region is not reused");
    // A VM with ordinary limits still gets its region.
    assert!(Vm::new(GuestLimits::default()).unwrap().arena.is_some());
}

/// `callPlain`'s request buffer is the VM's between calls: handed out empty each time (no byte
/// of one request reaches the next), and not kept once a request made it large.
#[test]
fn the_request_buffer_is_emptied_for_each_call_and_not_kept_large() {
    let vm = Vm::new(GuestLimits::default()).unwrap();
    let state = &*vm.context_state;
    let first = {
        let mut m = ffi::KeptMessage::take(state);
        m.0.extend_from_slice(br#"{"id":"plugin:demo:demo_echo","input":{"secret":1}}"#);
        m.0.as_ptr()
    };
    {
        let m = ffi::KeptMessage::take(state);
        assert!(m.0.is_empty(), "{:?}", String::from_utf8_lossy(&m.0));
        assert_eq!(m.0.as_ptr(), first, "the buffer is reused, not made again");
        // Taken again while out (a call within a call): a buffer of its own.
        let inner = ffi::KeptMessage::take(state);
        assert!(inner.0.is_empty() && inner.0.as_ptr() != first);
    }
    {
        let mut m = ffi::KeptMessage::take(state);
        m.0.resize(ffi::MESSAGE_KEPT_BYTES + 1, b'x');
    }
    let m = ffi::KeptMessage::take(state);
    assert!(m.0.is_empty() && m.0.capacity() < ffi::MESSAGE_KEPT_BYTES, "a large buffer was kept");
}

#[test]
fn a_vm_whose_run_carved_far_into_its_region_is_not_reused() {
    let mut vm = Vm::new(GuestLimits::default()).unwrap();
    // Many small objects: carved from the region (past the reuse bound).
    let many = "globalThis.k = []; for (let i = 0; i < 100000; i++) k.push({ i, s: 's' + i }); return k.length";
    assert_eq!(completed(run_on(&mut vm, many)), json!(100000));
    assert!(!vm.recycle(), "dropped instead of reset: its pages would stay resident in the pool");
}

#[test]
fn big_strings_and_buffers_do_not_stop_reuse_and_are_freed_by_the_reset() {
    let mut vm = Vm::new(GuestLimits::default()).unwrap();
    let big = "globalThis.b = 'x'.repeat(8 << 20); globalThis.u = new Uint8Array(4 << 20); u[7] = 1; return b.length + u.length";
    assert_eq!(completed(run_on(&mut vm, big)), json!(12 << 20));
    assert!(vm.recycle(), "large blocks live outside the region");
    assert_eq!(
        completed(run_on(&mut vm, "return [typeof b, typeof u, new Uint8Array(4 << 20)[7]]")),
        json!(["undefined", "undefined", 0])
    );
    // The heap accounting starts again from the image: a run may use most of the limit again.
    for _ in 0..4 {
        assert!(vm.recycle());
        assert_eq!(completed(run_on(&mut vm, "return 'y'.repeat(40 << 20).length")), json!(40 << 20));
    }
}

#[test]
fn a_vm_stopped_at_its_memory_limit_or_deadline_comes_back_clean() {
    let limits = GuestLimits { memory_limit_bytes: 2 << 20, ..GuestLimits::default() };
    let mut vm = Vm::new(limits).unwrap();
    let oom = run_on(&mut vm, "globalThis.a = []; for (;;) a.push({ s: 'x'.repeat(100) + a.length });");
    assert!(matches!(oom, DriveOutcome::Failed(_)), "{oom:?}");
    assert!(vm.recycle(), "a 2 MiB heap stays under the reuse bound");
    assert_eq!(
        completed(run_on(&mut vm, "return [typeof a, 'y'.repeat(1 << 20).length]")),
        json!(["undefined", 1 << 20])
    );
    assert!(vm.recycle());
    let spin = drive_on(&mut vm, "globalThis.spun = 1; for (;;) {}", Duration::from_millis(50));
    assert!(spin.is_err() || matches!(spin.as_ref().unwrap().outcome, DriveOutcome::Failed(_)), "{spin:?}");
    assert!(vm.recycle());
    assert_eq!(completed(run_on(&mut vm, "return typeof spun")), json!("undefined"));
}

/// The region never merges blocks, so a cell that keeps a few MiB alive in a new size class
/// below 16 KiB each round (larger blocks come from the system allocator, which merges) can
/// exhaust the region's fixed capacity (twice the limit plus 16 MiB) before its live bytes
/// reach the limit. That ends the run like a memory bomb — a clean `memory_limit_exceeded`
/// failure, the VM dropped rather than reused — and the next run is unaffected.
#[test]
fn fragmenting_the_region_fails_the_run_cleanly() {
    let limits = GuestLimits { memory_limit_bytes: 4 << 20, ..GuestLimits::default() };
    let mut vm = Vm::new(limits).unwrap();
    let fragmenting = "let keep = [];
        for (let round = 0; round < 60; round++) {
          const size = 600 + round * 250;
          keep = [];
          for (let i = 0; i < (2 << 20) / size; i++) keep.push('x'.repeat(size) + i);
        }
        return keep.length;";
    let outcome = run_on(&mut vm, fragmenting);
    assert!(
        matches!(&outcome, DriveOutcome::Failed(f) if f.code == Some(codemode_core::CodeModeErrorCode::MemoryLimitExceeded)),
        "{outcome:?}"
    );
    assert!(vm.memory_refused());
    assert!(!vm.recycle(), "a VM whose region filled up is dropped");
    let mut fresh = Vm::new(limits).unwrap();
    assert_eq!(completed(run_on(&mut fresh, "return 'y'.repeat(2 << 20).length")), json!(2 << 20));
}
