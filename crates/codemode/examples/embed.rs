//! Embedding codemode: tools implemented in Rust, a hook that sees every nested call, an approval
//! policy with an approver, and the `exec` → `wait` loop a host runs for its model.
//!
//! Run: `cargo run -p codemode --example embed`
//!
//! The cell the "model" wrote looks up customers, sends an invoice (gated: the approver decides),
//! and returns a summary. The hook refuses one input, and the cell catches that refusal.

use codemode::{
    ApprovalDecision, ApprovalPolicy, ApprovalRequest, Approver, CodeMode, CodeModeConfig, CodeModeExecInput,
    CodeModeResult, CodeModeWaitInput, FnTool, LocalTools, NestedToolCall, RunContext, ToolDefinition, ToolError,
    ToolErrorKind, ToolHook, ToolResult, ToolSource,
};
use serde_json::json;
use std::sync::Arc;

/// The host's tools: a read-only lookup and a side-effecting send.
fn tools() -> LocalTools {
    let mut tools = LocalTools::new();
    let lookup = ToolDefinition::new(ToolSource::Plugin, "crm", "customer_lookup")
        .with_description("Find a customer by id.")
        .with_parameters(json!({ "type": "object", "properties": { "id": { "type": "string" } }, "required": ["id"] }))
        .read_only();
    tools.add(Arc::new(FnTool::new(lookup, |input| async move {
        let id = input["id"].as_str().unwrap_or_default().to_string();
        Ok(ToolResult::value(json!({ "id": id, "name": format!("Customer {id}"), "owes": 120 })))
    })));
    let send = ToolDefinition::new(ToolSource::Plugin, "billing", "invoice_send")
        .with_description("Send an invoice.")
        .with_parameters(json!({ "type": "object", "properties": { "customer": { "type": "string" }, "amount": { "type": "number" } } }));
    tools.add(Arc::new(FnTool::new(send, |input| async move {
        Ok(ToolResult::value(json!({ "sent": true, "to": input["customer"], "amount": input["amount"] })))
    })));
    tools
}

/// Sees every nested call: here it logs them and refuses one customer id.
struct Audit;

#[async_trait::async_trait]
impl ToolHook for Audit {
    async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
        println!("hook: {} {}", call.tool_id, call.input);
        if call.input["id"] == "blocked" {
            return Err(ToolError::new(ToolErrorKind::Denied, "this customer is blocked"));
        }
        Ok(())
    }
}

/// Decides gated calls at once: invoices up to 500 are approved, larger ones denied. (Returning
/// `None` would park the call until `CodeMode::decide` records a human's decision.)
struct Budget;

#[async_trait::async_trait]
impl Approver for Budget {
    async fn decide(&self, request: &ApprovalRequest) -> Option<ApprovalDecision> {
        println!("approver: {} (line {:?}): {}", request.tool_id, request.cell_line, request.input_preview);
        let amount = serde_json::from_str::<serde_json::Value>(&request.input_preview)
            .ok()
            .and_then(|v| v["amount"].as_f64())
            .unwrap_or(f64::MAX);
        Some(if amount <= 500.0 { ApprovalDecision::Approve } else { ApprovalDecision::deny("over budget") })
    }
}

const CELL: &str = r#"
const c = await tools.customer_lookup({ id: "C-7" });
let blocked;
try { await tools.customer_lookup({ id: "blocked" }); } catch (e) { blocked = e.message; }
const small = await tools.invoice_send({ customer: c.id, amount: c.owes });
let big;
try { await tools.invoice_send({ customer: c.id, amount: 9000 }); } catch (e) { big = e.message; }
return { customer: c.name, sent: small.sent, blocked, big };
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cm = CodeMode::builder(CodeModeConfig::enabled())
        .local_tools(tools())
        .hook(Arc::new(Audit))
        .approvals(ApprovalPolicy::require(["plugin:billing:invoice_send"]))
        .approver(Arc::new(Budget))
        .build();
    // Loads (or builds and caches) the engine before the first request.
    cm.prepare_engine().await?;
    let ctx = RunContext::session("example");
    let mut result = cm.exec(&ctx, &CodeModeExecInput::code(CELL)).await;
    // A `waiting` result is handed back to the model, which calls `wait`; a host can also loop — or
    // let `exec` resume the run itself (`CodeModeBuilder::auto_wait`: zero-token waiting).
    while let CodeModeResult::Waiting { run_id, .. } = &result {
        result = cm.wait(&ctx, &CodeModeWaitInput::new(run_id.clone())).await;
    }
    println!("{}", serde_json::to_string_pretty(&result.to_json())?);
    match result {
        CodeModeResult::Completed { .. } => Ok(()),
        other => Err(format!("the cell did not complete: {}", other.to_json()).into()),
    }
}
