//! `codemode demo`: a short scripted showcase on the built-in demo catalog.

use crate::{CommonArgs, build_traced_runtime, load_config, trace_writer};
use anyhow::Result;
use codemode::trajectory::TraceRecord;
use codemode::{
    ApprovalDecision, ApprovalPolicy, CodeMode, CodeModeExecInput, CodeModeOutput, CodeModeResult, CodeModeWaitInput,
    PendingCallKind, RunContext, RunEvent, RunId, RunObserver,
};
use std::process::ExitCode;
use std::time::Instant;

struct Scene {
    title: &'static str,
    note: &'static str,
    code: &'static str,
    /// The scene shows a failure on purpose.
    fails: bool,
}

const SCENES: [Scene; 8] = [
    Scene {
        title: "Search → call → filter, in one cell",
        note: "The model never saw the shipping tool's schema: the cell finds it, calls it, and filters the result.",
        code: r#"const [shipmentTool] = await tools.search("list shipments");
const shipments = await tools.callValue(shipmentTool.id, {});
return shipments.filter((s) => !s.paid && s.tons > 10).map((s) => s.id);"#,
        fails: false,
    },
    Scene {
        title: "Parallel fan-out and a join",
        note: "Six nested calls at once with Promise.all; only the joined answer goes back to the model.",
        code: r#"const unpaid = (await tools.demo_shipping_list({})).filter((s) => !s.paid);
const ids = [...new Set(unpaid.map((s) => s.customerId))];
const customers = await Promise.all(ids.map((id) => tools.demo_customer_get({ id })));
const byId = Object.fromEntries(customers.map((c) => [c.id, c]));
const owed = {};
for (const s of unpaid) owed[byId[s.customerId].name] = (owed[byId[s.customerId].name] ?? 0) + s.tons;
text(`${unpaid.length} unpaid shipments across ${ids.length} customers`);
return owed;"#,
        fails: false,
    },
    Scene {
        title: "A plugin namespace: short domain verbs that stay catalog calls",
        note: "The demo plugin registers `Shipping` (contract §10): the exec description teaches Shipping.unpaidOver(tons) and Shipping.markPaid(id); each is a call of a demo catalog tool, with the same hooks, approvals and limits.",
        code: r#"const heavy = await Shipping.unpaidOver(20);
const paid = await Promise.all(heavy.map((s) => Shipping.markPaid(s.id)));
const left = await Shipping.unpaid();
return { paid: paid.map((p) => p.id), stillUnpaid: left.length, unit: Shipping.unit };"#,
        fails: false,
    },
    Scene {
        title: "A slow tool: the run suspends, `wait` resumes it",
        note: "demo_sleep outlives the exec call's time limit: exec returns `waiting`, the call keeps running, and `wait` delivers its result into the restored VM.",
        code: r#"text("asking a slow tool…");
const { slept } = await tools.demo_sleep({ ms: 900 });
text(`back after ${slept} ms`);
return { slept };"#,
        fails: false,
    },
    Scene {
        title: "Checkpoints with yield_control()",
        note: "The cell hands control back to the model mid-way; its state survives the suspension.",
        code: r#"let total = 0;
for (const s of await tools.demo_shipping_list({})) total += s.tons;
text(`total so far: ${total} t`);
await yield_control("report progress");
return { total, perShipment: total / 10 };"#,
        fails: false,
    },
    Scene {
        title: "A human approves a call made from inside the code",
        note: "The demo config gates demo_invoice_send (`approvals.require`). The run suspends exactly at that call, listed with kind \"approval\"; a human decides (here the demo, as `codemode approve RUN_ID REQUEST_ID` would) and the same run continues.",
        code: r#"const [first] = (await tools.demo_shipping_list({})).filter((s) => !s.paid);
text(`invoicing ${first.id}…`);
const invoice = await tools.demo_invoice_send({ shipmentId: first.id, amount: first.tons * 100 });
return invoice;"#,
        fails: false,
    },
    Scene {
        title: "Failures are plain errors",
        note: "A failing tool throws an ordinary Error the cell can catch.",
        code: r#"try {
  await tools.demo_fail({ message: "warehouse offline" });
} catch (e) {
  return `${e.name}: ${e.message} (code ${e.code})`;
}"#,
        fails: false,
    },
    Scene {
        title: "Hostile code hits limits, not the host",
        note: "No modules, files, network or host objects: this cell is refused before it runs (and a busy loop would end as `timeout`).",
        code: r#"const fs = await import("node:fs");
return fs.readFileSync("/etc/passwd", "utf8");"#,
        fails: true,
    },
];

fn indent(s: &str, by: &str) -> String {
    s.lines().map(|l| format!("{by}{l}")).collect::<Vec<_>>().join("\n")
}

fn show_result(step: &str, r: &CodeModeResult, ms: u128) {
    let t = r.telemetry();
    let counts = format!("{} search, {} describe, {} call", t.search_count, t.describe_count, t.call_count);
    match r {
        CodeModeResult::Completed { value, .. } => {
            println!("  {step} → completed in {ms} ms ({counts})");
            let pretty = serde_json::to_string_pretty(value).unwrap_or_default();
            println!("{}", indent(&pretty, "      "));
        }
        CodeModeResult::Waiting { reason, pending_tool_calls, .. } => {
            let pending: Vec<String> = pending_tool_calls
                .iter()
                .map(|p| match p.kind {
                    PendingCallKind::Approval => format!("{} (awaiting approval, request {})", p.tool_id, p.request_id),
                    _ => p.tool_id.clone(),
                })
                .collect();
            let reason =
                serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            println!("  {step} → waiting ({reason}) after {ms} ms; pending: {pending:?}");
        }
        CodeModeResult::Failed { error, code, .. } => {
            println!("  {step} → failed ({}) after {ms} ms: {error}", code.map(|c| c.as_str()).unwrap_or("uncaught"));
        }
        // A status added later: shown by name.
        other => println!("  {step} → {} after {ms} ms", other.status()),
    }
    for item in r.output() {
        match item {
            CodeModeOutput::Text { text } => println!("      text: {text}"),
            CodeModeOutput::Json { value } => println!("      json: {value}"),
            other => println!("      {}", serde_json::to_string(other).unwrap_or_default()),
        }
    }
}

/// Collects one scene's trajectory records (to print them under the scene).
#[derive(Default)]
struct Trajectory(std::sync::Mutex<Vec<TraceRecord>>);

impl RunObserver for Trajectory {
    fn on_event(&self, event: RunEvent) {
        if let RunEvent::Trace(r) = event {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).push(*r);
        }
    }
}

/// The scene's nested calls, one line each, under the model call that drove them.
fn show_trajectory(t: &Trajectory) {
    let records = t.0.lock().unwrap_or_else(|p| p.into_inner());
    let nested: Vec<_> =
        records.iter().filter_map(|r| if let TraceRecord::Nested(e) = r { Some(e) } else { None }).collect();
    if nested.is_empty() {
        return;
    }
    println!("  trajectory (`codemode run --trace` writes these as JSON lines):");
    for e in nested {
        let took = e.duration_ms.map(|d| format!(" after {d} ms")).unwrap_or_default();
        println!(
            "    {:<12} {:<36} #{:<3} {:?}{took}",
            e.parent_tool_call_id.as_deref().unwrap_or("-"),
            e.tool_id,
            e.request_id,
            e.outcome
        );
    }
}

async fn play(cm: &CodeMode, scene: &Scene, n: usize) -> bool {
    println!("\n━━ {n}. {} ━━", scene.title);
    println!("{}", indent(scene.note, "  "));
    println!("{}", indent(scene.code, "  │ "));
    // Scene N's model calls are `sN-exec`, `sN-wait-1`, … (the trajectory's parent ids).
    let ctx = RunContext { tool_call_id: Some(format!("s{n}-exec")), ..RunContext::session("demo") };
    let mut waits = 0;
    let started = Instant::now();
    let trajectory = std::sync::Arc::new(Trajectory::default());
    let observer = Some(trajectory.clone() as std::sync::Arc<dyn RunObserver>);
    let mut r = cm.exec_observed(&ctx, &CodeModeExecInput::code(scene.code), observer.clone()).await;
    show_result("exec", &r, started.elapsed().as_millis());
    for _ in 0..20 {
        let Some(id) = r.run_id().map(str::to_string) else {
            break;
        };
        for p in r.pending_tool_calls().iter().filter(|p| p.kind == PendingCallKind::Approval) {
            println!(
                "  human → approves request {} ({}): `codemode approve {id} {}`",
                p.request_id, p.tool_id, p.request_id
            );
            if let Ok(run) = RunId::parse(&id)
                && let Err(e) = cm.decide(&run, p.request_id, ApprovalDecision::Approve).await
            {
                println!("  (the decision could not be recorded: {})", e.message);
            }
        }
        let started = Instant::now();
        waits += 1;
        let ctx = RunContext { tool_call_id: Some(format!("s{n}-wait-{waits}")), ..ctx.clone() };
        r = cm.wait_observed(&ctx, &CodeModeWaitInput::new(id), observer.clone()).await;
        show_result("wait", &r, started.elapsed().as_millis());
    }
    show_trajectory(&trajectory);
    matches!(r, CodeModeResult::Completed { .. }) != scene.fails
}

pub(crate) async fn run(common: CommonArgs, trace: bool) -> Result<ExitCode> {
    let mut config = load_config(&common)?;
    // Short enough that the slow tool of scene 3 outlives one exec call.
    config.code_mode.timeout_ms = config.code_mode.timeout_ms.min(500);
    // Scene 6 shows an approval: sending an invoice waits for a human (unless the config has its own
    // approval policy).
    if config.approvals.is_off() {
        config.approvals = ApprovalPolicy::require(["plugin:demo:demo_invoice_send"]);
    }
    let writer = trace_writer(trace.then_some(std::path::Path::new("-")))?;
    let gw =
        build_traced_runtime(config, &common, writer.clone().map(|w| w as std::sync::Arc<dyn codemode::RunObserver>))
            .await?;
    let cm = gw.cm().clone();
    crate::commands::prepare_engine(&cm).await;
    println!(
        "codemode demo — engine `{}`, {} demo tools, timeoutMs {}",
        cm.engine_name(),
        cm.catalog().len(),
        cm.config().timeout_ms
    );
    println!("The model sees two tools, exec and wait. Everything below is what it would send as `exec` code.");
    let mut ok = true;
    for (i, scene) in SCENES.iter().enumerate() {
        ok &= play(&cm, scene, i + 1).await;
    }
    println!();
    gw.close().await;
    if let Some(w) = writer {
        w.close();
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
