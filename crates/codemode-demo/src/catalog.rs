//! The built-in demo plugin (`plugin:demo:*`): a small, deterministic catalog that shows every part of
//! code mode without any external service — search → call → filter, joins, parallel fan-out, a slow
//! tool that makes a run suspend, a failing tool, and a side-effecting tool.

use codemode::{FnTool, LocalTools};
use codemode_core::catalog::{ToolDefinition, ToolSource};
use codemode_core::executor::{ToolError, ToolErrorKind, ToolResult};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The plugin id (owner) of the demo tools.
pub const PLUGIN_ID: &str = "demo";

/// Longest sleep `demo_sleep` accepts, in milliseconds.
pub const MAX_SLEEP_MS: u64 = 120_000;

/// The shipments returned by `demo_shipping_list`: `(id, customerId, paid, tons)`.
const SHIPMENTS: [(&str, &str, bool, f64); 10] = [
    ("SHP-1001", "C-01", true, 12.5),
    ("SHP-1002", "C-02", false, 4.0),
    ("SHP-1003", "C-03", false, 18.25),
    ("SHP-1004", "C-01", true, 7.75),
    ("SHP-1005", "C-04", false, 22.0),
    ("SHP-1006", "C-02", true, 15.5),
    ("SHP-1007", "C-05", false, 9.5),
    ("SHP-1008", "C-03", false, 11.0),
    ("SHP-1009", "C-04", true, 3.25),
    ("SHP-1010", "C-05", false, 30.0),
];

/// The customers returned by `demo_customer_get`: `(id, name, email, tier)`.
const CUSTOMERS: [(&str, &str, &str, &str); 5] = [
    ("C-01", "Acme Logistics", "billing@acme.example", "gold"),
    ("C-02", "Borealis Foods", "ap@borealis.example", "silver"),
    ("C-03", "Cobalt Mining", "finance@cobalt.example", "gold"),
    ("C-04", "Delta Textiles", "accounts@delta.example", "bronze"),
    ("C-05", "Evergreen Paper", "pay@evergreen.example", "silver"),
];

fn def(name: &str, label: &str, description: &str, parameters: Value) -> ToolDefinition {
    ToolDefinition::new(ToolSource::Plugin, PLUGIN_ID, name)
        .with_label(label)
        .with_description(description)
        .with_parameters(parameters)
}

fn invalid(msg: impl Into<String>) -> ToolError {
    ToolError::new(ToolErrorKind::InvalidInput, msg)
}

/// Shipments, with those marked paid by `demo_shipping_mark_paid` shown as paid, filtered by
/// `paid` and `minTons` when given.
fn shipments(marked: &Mutex<HashSet<String>>, input: &Value) -> Result<Value, ToolError> {
    let paid_filter = match input.get("paid") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(invalid("`paid` must be a boolean")),
    };
    let min_tons = match input.get("minTons") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_f64().ok_or_else(|| invalid("`minTons` must be a number"))?),
    };
    let marked = marked.lock().unwrap_or_else(|p| p.into_inner());
    Ok(Value::Array(
        SHIPMENTS
            .iter()
            .map(|(id, customer, paid, tons)| (id, customer, *paid || marked.contains(*id), tons))
            .filter(|(_, _, paid, tons)| paid_filter.is_none_or(|p| p == *paid) && min_tons.is_none_or(|m| **tons > m))
            .map(|(id, customer, paid, tons)| json!({ "id": id, "customerId": customer, "paid": paid, "tons": tons }))
            .collect(),
    ))
}

/// The closed output schema of `demo_shipping_list` (contract §8).
pub fn shipment_list_schema() -> Value {
    json!({
        "type": "array",
        "items": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "id": { "type": "string" },
                "customerId": { "type": "string" },
                "paid": { "type": "boolean" },
                "tons": { "type": "number" }
            },
            "required": ["id", "customerId", "paid", "tons"]
        }
    })
}

/// Builds the demo tools. Each call of this function has its own invoice counter.
pub fn demo_tools() -> LocalTools {
    let mut tools = LocalTools::new();

    // Shipments marked paid by `demo_shipping_mark_paid` (per `demo_tools()` instance).
    let marked = Arc::new(Mutex::new(HashSet::new()));
    let list_marked = marked.clone();
    tools.add(Arc::new(FnTool::new(
        def(
            "demo_shipping_list",
            "List shipments",
            "List shipments with their id, customer id, paid status and weight in tons; optionally only paid or unpaid ones, or those over `minTons`.",
            json!({ "type": "object", "properties": {
                "paid": { "type": "boolean", "description": "Only paid (true) or unpaid (false) shipments" },
                "minTons": { "type": "number", "description": "Only shipments heavier than this" }
            }, "additionalProperties": false }),
        )
        .with_output_schema(shipment_list_schema())
        .read_only(),
        move |input| {
            let marked = list_marked.clone();
            async move { Ok(ToolResult::value(shipments(&marked, &input)?)) }
        },
    )));

    tools.add(Arc::new(FnTool::new(
        def(
            "demo_shipping_mark_paid",
            "Mark shipment paid",
            "Mark a shipment as paid (a side effect: not read-only). Returns the shipment's id and new status.",
            json!({ "type": "object", "properties": { "id": { "type": "string", "description": "Shipment id, e.g. SHP-1002" } }, "required": ["id"], "additionalProperties": false }),
        ),
        move |input| {
            let marked = marked.clone();
            async move {
                let id = input.get("id").and_then(Value::as_str).ok_or_else(|| invalid("`id` (string) is required"))?;
                if !SHIPMENTS.iter().any(|s| s.0 == id) {
                    return Err(ToolError::failed(format!("no shipment `{id}`")));
                }
                marked.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string());
                Ok(ToolResult::value(json!({ "id": id, "paid": true })))
            }
        },
    )));

    tools.add(Arc::new(FnTool::new(
        def(
            "demo_customer_get",
            "Get customer",
            "Look up a customer by id (e.g. C-01): name, billing email and tier.",
            json!({ "type": "object", "properties": { "id": { "type": "string", "description": "Customer id" } }, "required": ["id"] }),
        )
        .with_output_schema(json!({
            "type": "object", "additionalProperties": false,
            "properties": { "id": {"type": "string"}, "name": {"type": "string"}, "email": {"type": "string"}, "tier": {"enum": ["gold", "silver", "bronze"]} },
            "required": ["id", "name", "email", "tier"]
        }))
        .read_only(),
        |input| async move {
            let id = input.get("id").and_then(Value::as_str).ok_or_else(|| invalid("`id` (string) is required"))?;
            let (id, name, email, tier) =
                CUSTOMERS.iter().find(|c| c.0 == id).ok_or_else(|| ToolError::failed(format!("no customer `{id}`")))?;
            Ok(ToolResult::value(json!({ "id": id, "name": name, "email": email, "tier": tier })))
        },
    )));

    tools.add(Arc::new(FnTool::new(
        def(
            "demo_echo",
            "Echo",
            "Return the input object unchanged.",
            json!({ "type": "object", "additionalProperties": true }),
        )
        .read_only(),
        |input| async move { Ok(ToolResult::value(input)) },
    )));

    tools.add(Arc::new(FnTool::new(
        def(
            "demo_sleep",
            "Sleep",
            "Wait `ms` milliseconds, then return {slept: ms}. Slow calls make a cell suspend and resume with wait.",
            json!({ "type": "object", "properties": { "ms": { "type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS } }, "required": ["ms"] }),
        )
        .with_output_schema(json!({ "type": "object", "additionalProperties": false, "properties": { "slept": {"type": "integer"} }, "required": ["slept"] }))
        .read_only(),
        |input| async move {
            let ms = input.get("ms").and_then(Value::as_u64).ok_or_else(|| invalid("`ms` (non-negative integer) is required"))?;
            if ms > MAX_SLEEP_MS {
                return Err(invalid(format!("`ms` must be at most {MAX_SLEEP_MS}")));
            }
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(ToolResult::value(json!({ "slept": ms })))
        },
    )));

    tools.add(Arc::new(FnTool::new(
        def(
            "demo_fail",
            "Fail",
            "Always fail with the given message (to see nested failures).",
            json!({ "type": "object", "properties": { "message": { "type": "string" } } }),
        )
        .read_only(),
        |input| async move {
            let msg = input.get("message").and_then(Value::as_str).unwrap_or("demo failure");
            Err(ToolError::failed(msg.to_string()))
        },
    )));

    let invoices = Arc::new(AtomicU64::new(0));
    tools.add(Arc::new(FnTool::new(
        def(
            "demo_invoice_send",
            "Send invoice",
            "Send an invoice for a shipment (a side effect: not read-only). Returns the invoice id. `delayMs` simulates a slow billing system.",
            json!({ "type": "object", "properties": {
                "shipmentId": { "type": "string" }, "amount": { "type": "number" },
                "delayMs": { "type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS }
            }, "required": ["shipmentId", "amount"] }),
        ),
        move |input| {
            let invoices = invoices.clone();
            async move {
                let shipment =
                    input.get("shipmentId").and_then(Value::as_str).ok_or_else(|| invalid("`shipmentId` (string) is required"))?;
                let amount = input.get("amount").and_then(Value::as_f64).ok_or_else(|| invalid("`amount` (number) is required"))?;
                if !SHIPMENTS.iter().any(|s| s.0 == shipment) {
                    return Err(ToolError::failed(format!("no shipment `{shipment}`")));
                }
                let delay = input.get("delayMs").and_then(Value::as_u64).unwrap_or(0).min(MAX_SLEEP_MS);
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                let n = invoices.fetch_add(1, Ordering::SeqCst) + 1;
                Ok(ToolResult::value(json!({ "invoiceId": format!("INV-{n:04}"), "shipmentId": shipment, "amount": amount, "status": "sent" })))
            }
        },
    )));

    tools
}

/// The id of the demo plugin's namespace.
pub const SHIPPING_NAMESPACE_ID: &str = "demo-shipping";

/// The demo plugin's namespace (contract §10): `Shipping.unpaid()`, `Shipping.unpaidOver(tons)` and
/// `Shipping.markPaid(id)`, each a call of a demo catalog tool.
pub fn shipping_namespace() -> codemode_namespaces::NamespaceRegistration {
    use codemode_namespaces::{NamespaceRegistration, ScopeValue, namespace_tool_with};
    NamespaceRegistration::new(SHIPPING_NAMESPACE_ID, "Shipping", "Shipment helpers of the demo plugin.")
        .require("demo_shipping_list")
        .require("demo_shipping_mark_paid")
        .prompt(
            "Use await Shipping.unpaid(), await Shipping.unpaidOver(tons) (unpaid shipments heavier than tons) and \
             await Shipping.markPaid(id); Shipping.unit is the weight unit.",
        )
        .scope(|_ctx| {
            Ok(ScopeValue::object([
                ("unit", ScopeValue::from("tons")),
                ("unpaid", namespace_tool_with("demo_shipping_list", |_| Ok(json!({ "paid": false }))).into()),
                (
                    "unpaidOver",
                    namespace_tool_with("demo_shipping_list", |args| match args.first().and_then(Value::as_f64) {
                        Some(tons) => Ok(json!({ "paid": false, "minTons": tons })),
                        None => Err("unpaidOver(tons): `tons` must be a number".into()),
                    })
                    .into(),
                ),
                (
                    "markPaid",
                    namespace_tool_with("demo_shipping_mark_paid", |args| match args.first().and_then(Value::as_str) {
                        Some(id) => Ok(json!({ "id": id })),
                        None => Err("markPaid(id): `id` must be a shipment id string".into()),
                    })
                    .into(),
                ),
            ]))
        })
}

/// A registry holding the demo plugin's namespace.
pub fn demo_namespaces() -> codemode_namespaces::Namespaces {
    let registry = codemode_namespaces::Namespaces::new();
    if let Err(e) = registry.register_for_plugin(PLUGIN_ID, shipping_namespace()) {
        // The registration is fixed and valid (a unit test checks it); never reached.
        tracing::error!(error = %e, "demo namespace refused");
    }
    registry
}
