//! Requests answered inside the host primitive (`codemode_core::engine::Answerer`): on both
//! QuickJS engines a nested call whose tool returns at once, a search or a refusal settles without
//! the drive step ending. These tests run the same cells on them and on boa (which reports every
//! request at the step's end) and require the same results — values, errors, output,
//! loop-detection warnings and refusals, the outstanding-request limit, the counts, suspending and
//! resuming — and check what differs: the order of the run's events, which inline answers give as
//! things happened, and the calls a failing step had made.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode::{
    CodeMode, CodeModeConfig, CodeModeExecInput, CodeModeResult, CodeModeWaitInput, LoopPolicy, NestedToolCall,
    RunContext, RunEvent, RunObserver, ToolError, ToolErrorKind, ToolHook,
};
use codemode_demo::demo_tools;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The engines that answer inline, and last the one that does not (the reference).
const ENGINES: [&str; 3] = ["quickjs-wasi", "quickjs", "boa"];

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Refuses calls whose input says `{ "deny": true }`.
struct DenyMarked;

#[async_trait::async_trait]
impl ToolHook for DenyMarked {
    async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
        if call.input.get("deny") == Some(&json!(true)) {
            return Err(ToolError::new(ToolErrorKind::Denied, "marked for refusal"));
        }
        Ok(())
    }
}

fn runtime(engine: &str, loops: Value) -> CodeMode {
    codemode_testing::builder(engine, CodeModeConfig::enabled())
        .hook(Arc::new(DenyMarked))
        .loop_detection(LoopPolicy::from_document(&loops).unwrap())
        .build()
}

/// The demo catalog plus one plugin tool `demo.<name>` running `f`.
fn demo_with<F, Fut>(name: &str, f: F) -> codemode::LocalTools
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<codemode_core::executor::ToolResult, ToolError>> + Send + 'static,
{
    use codemode_core::catalog::{ToolDefinition, ToolSource};
    let mut tools = demo_tools();
    let def = ToolDefinition::new(ToolSource::Plugin, "demo", name).with_parameters(json!({ "type": "object" }));
    tools.add(Arc::new(codemode::FnTool::new(def.read_only(), f)));
    tools
}

/// Code mode enabled with a 100 ms `timeoutMs`.
fn short_timeout() -> CodeModeConfig {
    CodeModeConfig::from_value(Some(&json!({"enabled": true, "timeoutMs": 100})), "tools.codeMode").unwrap()
}

/// What a result must agree on across engines: status, value or error code, output, and the
/// counts of calls, failed calls, searches and lookups.
fn essence(r: &CodeModeResult) -> Value {
    let j = r.to_json();
    let t = &j["telemetry"];
    json!({
        "status": j["status"],
        "value": j["value"],
        "code": r.error_code().map(|c| c.as_str()),
        "output": j["output"],
        "counts": [t["callCount"], t["failedCallCount"], t["searchCount"], t["describeCount"]],
    })
}

/// The same cells give the same results on the three engines.
#[test]
fn inline_answers_leave_results_as_reported_requests_do() {
    let rt = rt();
    let cells = [
        // A loop of calls answered at once, with searches and lookups among them.
        "let s = 0; for (let i = 0; i < 200; i++) s += (await tools.demo_echo({ i })).i;\n\
         const hits = await tools.search('echo', 3); const d = await tools.describe('plugin:demo:demo_echo');\n\
         return [s, hits.length > 0, d.id];",
        // An un-awaited call's callback runs after the return value is taken.
        "const log = []; tools.demo_echo({ n: 1 }).then((r) => { log.push(r.n); text('callback ran'); }); return log;",
        // Refusals and failures: an unknown tool, a hook's denial, an input the schema refuses, a
        // tool that fails — caught in turn.
        "const out = [];\n\
         for (const f of [() => tools.call('plugin:demo:nope', {}), () => tools.demo_echo({ deny: true }), () => tools.demo_customer_get({ id: 7 }), () => tools.demo_fail({})]) {\n\
           try { await f(); out.push('ran'); } catch (e) { out.push(e.code); }\n\
         }\n\
         return out;",
        // Output between calls.
        "for (let i = 0; i < 3; i++) { text('before ' + i); const r = await tools.demo_echo({ i }); text('after ' + r.i); } return 'done';",
        // A hostile cell: a `then` getter on every object, which makes calls while the outcomes of
        // others are being settled.
        "let made = 0;\n\
         Object.defineProperty(Object.prototype, 'then', { configurable: true, get() {\n\
           if (made < 3) { made++; tools.demo_echo({ made }).then((r) => { globalThis.last = r.made; }); }\n\
           return undefined; } });\n\
         const r = await tools.demo_echo({ first: true });\n\
         for (let i = 0; i < 5; i++) await null;\n\
         delete Object.prototype.then; return [r.first, made, globalThis.last ?? null];",
        // A rejected un-awaited call nobody handles does not fail the cell; one awaited does.
        "tools.demo_echo({ deny: true }); await tools.demo_echo({ deny: true });",
    ];
    for cell in cells {
        let results: Vec<Value> = ENGINES
            .iter()
            .map(|engine| {
                let cm = runtime(engine, json!({}));
                essence(&rt.block_on(cm.exec(&RunContext::session("inline"), &CodeModeExecInput::code(cell))))
            })
            .collect();
        for (engine, result) in ENGINES.iter().zip(&results) {
            assert_eq!(result, &results[2], "{cell}\n{engine}: {result}\nboa: {}", results[2]);
        }
    }
}

/// More un-awaited calls than the bridge lets be outstanding stop the cell the same way on every
/// engine. What differs is what ran before: a call answered inline ran when the cell made it,
/// while boa, handling a step's requests after the step, drops the requests of a step that fails
/// (here every one of them).
#[test]
fn the_outstanding_limit_stops_a_cell_alike() {
    let rt = rt();
    let cell = "for (let i = 0; i < 1100; i++) tools.demo_echo({ i }); return 'all issued';";
    let mut calls = Vec::new();
    for engine in ENGINES {
        let cm = runtime(engine, json!({}));
        let r = rt.block_on(cm.exec(&RunContext::session("limit"), &CodeModeExecInput::code(cell)));
        assert_eq!(
            r.error_code().map(|c| c.as_str()),
            Some("too_many_pending_tool_calls"),
            "{engine}: {}",
            r.to_json()
        );
        calls.push(r.telemetry().call_count);
    }
    let limit = codemode_core::engine::GuestLimits::default().max_outstanding_requests;
    assert_eq!(calls, vec![limit, limit, 0], "the QuickJS engines ran the calls within the limit; boa none");
}

/// Outcomes waiting to be settled count as outstanding while they wait, also while earlier ones are
/// being settled: a `then` getter that runs during a settlement (reading `then` of the first
/// result) and makes calls can make exactly as many on every engine. On boa the outcomes are a
/// step's deliveries, each counted until it is delivered; on the QuickJS engines they are outcomes
/// answered inline, which must be counted the same way: with `K` outcomes to settle, the getter
/// run while the first is settled can make `limit - (K - 1)` calls and not one more. (Before this
/// test, quickjs-wasi still counted the outcome being settled, one call too few, and the native
/// engine none of the batch, `K - 1` calls too many.)
#[test]
fn outcomes_waiting_to_be_settled_count_against_the_limit_alike() {
    let rt = rt();
    let limit = codemode_core::engine::GuestLimits::default().max_outstanding_requests as usize;
    let k = 1000;
    // The reference's count: after the first delivery, `k - 1` wait, so `limit - (k - 1)` calls fit.
    let fits = limit - (k - 1);
    let cell = |n: usize| {
        format!(
            "const ps = [];\n\
             for (let i = 0; i < {k}; i++) ps.push(tools.demo_echo({{ i }}));\n\
             let made = 0, armed = true;\n\
             Object.defineProperty(Object.prototype, 'then', {{ configurable: true, get() {{\n\
               if (armed) {{ armed = false; for (let j = 0; j < {n}; j++) {{ tools.demo_echo({{ j }}); made++; }} }}\n\
               return undefined;\n\
             }} }});\n\
             await Promise.all(ps);\n\
             delete Object.prototype.then;\n\
             return made;"
        )
    };
    for engine in ENGINES {
        let cm = runtime(engine, json!({}));
        let ok = rt.block_on(cm.exec(&RunContext::session("settling"), &CodeModeExecInput::code(cell(fits))));
        assert_eq!(essence(&ok)["value"], json!(fits), "{engine}: {fits} calls must fit: {}", ok.to_json());
        let over = rt.block_on(cm.exec(&RunContext::session("settling"), &CodeModeExecInput::code(cell(fits + 1))));
        assert_eq!(
            over.error_code().map(|c| c.as_str()),
            Some("too_many_pending_tool_calls"),
            "{engine}: {} calls must not fit: {}",
            fits + 1,
            over.to_json()
        );
    }
}

/// Loop detection's warnings, refusals and circuit breaker reach the cell the same way.
#[test]
fn loop_detection_acts_alike_through_inline_answers() {
    let rt = rt();
    let loops = json!({"tools": {"loopDetection": {"enabled": true, "warningThreshold": 3, "criticalThreshold": 5, "globalCircuitBreakerThreshold": 9}}});
    let cell = "const out = [];\n\
        for (let i = 0; i < 7; i++) {\n\
          try { await tools.demo_echo({ q: 1 }); out.push('ok'); } catch (e) { out.push(e.code); }\n\
        }\n\
        return out;";
    let mut seen = Vec::new();
    for engine in ENGINES {
        let cm = runtime(engine, loops.clone());
        let ctx = RunContext::session("loops");
        let first = essence(&rt.block_on(cm.exec(&ctx, &CodeModeExecInput::code(cell))));
        let broken = essence(&rt.block_on(cm.exec(&ctx, &CodeModeExecInput::code(cell))));
        assert_eq!(first["value"][4], "nested_tool_failed", "{engine}: {first}");
        assert_eq!(first["output"].as_array().map(Vec::len), Some(1), "{engine}: one warning: {first}");
        assert_eq!(broken["code"], "nested_tool_failed", "{engine}: the breaker ends the run: {broken}");
        seen.push((first, broken));
    }
    assert_eq!(seen[0], seen[2]);
    assert_eq!(seen[1], seen[2]);
}

/// A run suspends on a slow call between calls answered at once, and resumes (from its snapshot)
/// to the same result on every engine.
#[test]
fn a_run_suspends_and_resumes_between_inline_answers() {
    let rt = rt();
    let cell = "let s = 0; for (let i = 0; i < 20; i++) s += (await tools.demo_echo({ i })).i;\n\
                const slow = await tools.demo_sleep({ ms: 400 });\n\
                for (let i = 0; i < 20; i++) s += (await tools.demo_echo({ i })).i;\n\
                return [s, slow.slept];";
    let mut results = Vec::new();
    for engine in ENGINES {
        let cm = CodeMode::builder(short_timeout()).engine_name(engine).local_tools(demo_tools()).build();
        let ctx = RunContext::session("suspend");
        let mut r = rt.block_on(cm.exec(&ctx, &CodeModeExecInput::code(cell)));
        let mut waits = 0;
        while let CodeModeResult::Waiting { run_id, .. } = &r {
            waits += 1;
            // The slow call is over by the time `wait` runs, so the calls after it have the whole
            // 100 ms (a run busy at its deadline with nothing outstanding fails with `timeout`).
            std::thread::sleep(std::time::Duration::from_millis(450));
            r = rt.block_on(cm.wait(&ctx, &CodeModeWaitInput::new(run_id.clone())));
        }
        assert!(waits > 0, "{engine}: the slow call made the run wait");
        assert_eq!(r.to_json()["value"], json!([380, 400]), "{engine}: {}", r.to_json());
        results.push(essence(&r));
    }
    assert_eq!(results[0], results[2]);
    assert_eq!(results[1], results[2]);
}

/// Collects the run's call and output events, in order.
#[derive(Default)]
struct Events(Mutex<Vec<String>>);

impl RunObserver for Events {
    fn on_event(&self, event: RunEvent) {
        let e = match event {
            RunEvent::CallStarted { request_id, .. } => format!("started {request_id}"),
            RunEvent::CallFinished { request_id, .. } => format!("finished {request_id}"),
            RunEvent::Output { item, .. } => format!("output {}", serde_json::to_value(item).unwrap()["text"]),
            _ => return,
        };
        self.0.lock().unwrap().push(e);
    }
}

/// The run's events: with inline answers a call's events come when it is made, before the output
/// the cell writes after making it; boa reports a step's output first and then the requests made
/// in the step. (This is also how the tests see that the QuickJS engines answer inline.)
#[test]
fn inline_answers_report_events_as_they_happen() {
    let rt = rt();
    let cell = "const p = tools.demo_echo({ a: 1 }); text('written after the call'); await p; return 1;";
    let mut orders = Vec::new();
    for engine in ENGINES {
        let cm = runtime(engine, json!({}));
        let events = Arc::new(Events::default());
        let r = rt.block_on(cm.exec_observed(
            &RunContext::session("events"),
            &CodeModeExecInput::code(cell),
            Some(events.clone()),
        ));
        assert_eq!(r.to_json()["value"], 1, "{engine}: {}", r.to_json());
        orders.push(std::mem::take(&mut *events.0.lock().unwrap()));
    }
    let output = "output \"written after the call\"".to_string();
    let inline = vec!["started 1".to_string(), "finished 1".into(), output.clone()];
    assert_eq!(orders[0], inline, "quickjs-wasi");
    assert_eq!(orders[1], inline, "quickjs");
    assert_eq!(orders[2], vec![output, "started 1".into(), "finished 1".into()], "boa");
}

/// A tool whose future panics (a plugin bug) while its call is answered inline fails that run
/// with `internal_error` on every engine, and the runtime goes on: the next cell runs.
#[test]
fn a_tool_that_panics_fails_only_its_run() {
    let rt = rt();
    for engine in ENGINES {
        let tools = demo_with("demo_panics", |_| async move {
            if std::hint::black_box(true) {
                panic!("a plugin bug");
            }
            Ok(codemode_core::executor::ToolResult::value(json!(null)))
        });
        let cm = CodeMode::builder(CodeModeConfig::enabled()).engine_name(engine).local_tools(tools).build();
        let ctx = RunContext::session("panics");
        let r = rt.block_on(cm.exec(
            &ctx,
            &CodeModeExecInput::code(
                "await tools.demo_echo({ a: 1 }); try { await tools.demo_panics({}); } catch (e) { return 'caught'; }",
            ),
        ));
        assert_eq!(r.error_code().map(|c| c.as_str()), Some("internal_error"), "{engine}: {}", r.to_json());
        let r = rt.block_on(cm.exec(&ctx, &CodeModeExecInput::code("return (await tools.demo_echo({ a: 2 })).a")));
        assert_eq!(r.to_json()["value"], 2, "{engine}: {}", r.to_json());
    }
}

/// A tool that holds the worker thread past the call's deadline (its future blocks, as a Python
/// `inline` tool does) is not settled inline: the step's end sees an outcome that came too late
/// with nothing outstanding and fails the run with `timeout`, on every engine alike.
#[test]
fn an_outcome_past_the_deadline_is_left_to_the_steps_end() {
    let rt = rt();
    for engine in ENGINES {
        let tools = demo_with("demo_blocks", |_| async move {
            std::thread::sleep(std::time::Duration::from_millis(300));
            Ok(codemode_core::executor::ToolResult::value(json!("late")))
        });
        let cm = CodeMode::builder(short_timeout()).engine_name(engine).local_tools(tools).build();
        let r = rt.block_on(
            cm.exec(&RunContext::session("late"), &CodeModeExecInput::code("return await tools.demo_blocks({})")),
        );
        assert_eq!(r.error_code().map(|c| c.as_str()), Some("timeout"), "{engine}: {}", r.to_json());
    }
}

/// Each call reaches the tool it names: twelve tools, each returning its own name, called in a
/// different rotation in each of eight cells of one runtime (so the native engine runs later cells
/// on VMs reset to their booted image, where a run's strings land where the last run's were). The
/// native engine keeps the texts of the strings `callPlain` reads (a tool's message head and tail)
/// for a few tools and recognizes them by address: a text kept past a reset, or across more tools
/// than it keeps, would send a call to another tool.
#[test]
fn every_call_reaches_the_tool_it_names_across_many_tools_and_reused_vms() {
    use codemode_core::catalog::{ToolDefinition, ToolSource};
    let rt = rt();
    for engine in ENGINES {
        let mut tools = demo_tools();
        for k in 0..12 {
            let name = format!("demo_t{k}");
            let def =
                ToolDefinition::new(ToolSource::Plugin, "demo", &name).with_parameters(json!({ "type": "object" }));
            let answer = name.clone();
            tools.add(Arc::new(codemode::FnTool::new(def.read_only(), move |input: Value| {
                let answer = answer.clone();
                async move { Ok(codemode_core::executor::ToolResult::value(json!({ "tool": answer, "i": input["i"] }))) }
            })));
        }
        let cm = CodeMode::builder(CodeModeConfig::enabled()).engine_name(engine).local_tools(tools).build();
        for run in 0..8 {
            let step = [1, 5, 7, 11][run % 4];
            let cell = format!(
                "const seen = []; for (let i = 0; i < 36; i++) {{ const k = (i * {step} + {run}) % 12; \
                 const r = await tools['demo_t' + k]({{ i }}); \
                 if (r.tool !== 'demo_t' + k || r.i !== i) seen.push([k, i, r]); }} return seen"
            );
            let r = rt.block_on(cm.exec(&RunContext::session("many-tools"), &CodeModeExecInput::code(&cell)));
            assert_eq!(r.to_json()["value"], json!([]), "{engine}, cell {run}: {}", r.to_json());
        }
    }
}
