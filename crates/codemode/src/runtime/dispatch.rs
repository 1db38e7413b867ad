//! The answer to each typed guest request (`GuestRequest`): lookups at once, tool calls started,
//! yields recorded.

use super::calls::{CallOrigin, CallSpec};
use super::gates::resolve_tool;
use super::run::Run;
use super::{Inner, guest_error, unknown_tool};
use codemode_core::engine::{BridgeRequest, Delivery, RequestId};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::guest::{CallMode, GuestRequest};
use codemode_core::store::PendingRequest;
use serde_json::{Value, json};
use tokio::runtime::Handle;

impl Inner {
    /// Answers one bridge request. Returns whether it was a yield.
    pub(super) fn handle_request(&self, rt: &Handle, run: &mut Run, req: BridgeRequest) -> Result<bool, CodeModeError> {
        let BridgeRequest { id, request } = req;
        match request {
            GuestRequest::Search { query, limit } => {
                run.telemetry.search_count += 1;
                let max = self.config.max_search_limit;
                let limit = match limit {
                    Some(n) if n.is_finite() => (n.max(1.0) as u64).min(max),
                    _ => self.config.search_default_limit,
                };
                let hits = run.catalog.search(&query, limit as usize);
                run.ready.push(Delivery { id, outcome: Ok(json!(hits)) });
            }
            GuestRequest::Describe { id: tool_id } => {
                run.telemetry.describe_count += 1;
                let outcome = match run.catalog.describe(&tool_id) {
                    Some(d) => {
                        let declaration = run
                            .catalog
                            .guest_tool(&tool_id)
                            .and_then(|t| codemode_catalog::declarations::Declaration::of(&t.def.parameters).inline());
                        let mut d = json!(d);
                        if let Value::Object(m) = &mut d {
                            // The input's full TypeScript declaration.
                            if let Some(text) = declaration {
                                m.insert("declaration".into(), Value::String(text));
                            }
                            // The type learned from this tool's results, marked observed.
                            if let Some(observed) = self.observed_output(&tool_id) {
                                m.insert("observedOutput".into(), observed);
                            }
                        }
                        Ok(d)
                    }
                    None => Err(unknown_tool(&tool_id, CodeModeErrorCode::InvalidInput)),
                };
                run.ready.push(Delivery { id, outcome });
            }
            GuestRequest::Namespace { namespace, path, args, line, unwrap } => {
                // contract L6: a namespace call becomes a catalog tool call by exact id; from here on it
                // is that call (same gates, limits, telemetry and suspend/resume).
                match run.namespaces.resolve(&namespace, &path, &args) {
                    Ok(call) => {
                        let request = if call.source == codemode_core::ToolSource::Mcp {
                            GuestRequest::Mcp { server: call.owner, tool: call.tool, input: call.input, line, unwrap }
                        } else {
                            GuestRequest::Call {
                                id: codemode_core::catalog::catalog_id(call.source, &call.owner, &call.tool),
                                input: call.input,
                                mode: CallMode::Value,
                                line,
                            }
                        };
                        self.tool_request(rt, run, id, request)?;
                    }
                    Err(e) => {
                        // The attempt is recorded: a forged namespace path leaves an
                        // audit record, while the guest sees only the refusal.
                        let target = format!("namespace:{namespace}:{path}");
                        let err = guest_error(CodeModeErrorCode::NestedToolFailed, e.to_string());
                        run.refuse(id, &target, Some(&Value::Array(args)), err);
                    }
                }
            }
            request @ (GuestRequest::Call { .. } | GuestRequest::Mcp { .. }) => {
                self.tool_request(rt, run, id, request)?
            }
            GuestRequest::McpApi { server, tool, schema } => {
                let outcome = codemode_catalog::mcp_api::api_header(&run.catalog, &server, tool.as_deref(), schema)
                    .map(|mut header| {
                        self.add_observed_outputs(&server, &mut header);
                        header
                    })
                    .ok_or_else(|| {
                        guest_error(
                            CodeModeErrorCode::InvalidInput,
                            format!(
                                "unknown MCP server or tool `{server}{}`; see API.list(\"mcp\")",
                                tool.as_deref().map(|t| format!(".{t}")).unwrap_or_default()
                            ),
                        )
                    });
                run.ready.push(Delivery { id, outcome });
            }
            request @ GuestRequest::Yield { .. } => {
                run.pending.insert(PendingRequest {
                    id,
                    tool_id: None,
                    request,
                    read_only: true,
                    issued_at_ms: self.now_ms(),
                    awaiting_approval: false,
                    asked: None,
                });
                return Ok(true);
            }
            other => {
                run.ready.push(Delivery {
                    id,
                    outcome: Err(guest_error(
                        CodeModeErrorCode::InvalidInput,
                        format!("unsupported bridge request `{}`", other.kind().as_str()),
                    )),
                });
            }
        }
        Ok(false)
    }

    /// Adds the learned result type (`observedOutput`) to each tool of an `$api()` header.
    fn add_observed_outputs(&self, server: &str, header: &mut Value) {
        let Some(tools) = header.get_mut("tools").and_then(Value::as_array_mut) else { return };
        for t in tools {
            let Some(name) = t.get("name").and_then(Value::as_str) else { continue };
            let id = codemode_core::catalog::catalog_id(codemode_core::ToolSource::Mcp, server, name);
            if let (Some(observed), Value::Object(m)) = (self.observed_output(&id), t) {
                m.insert("observedOutput".into(), observed);
            }
        }
    }

    /// Starts a catalog or MCP tool call (`Call` / `Mcp`) through the gates (`gates.rs`), or answers
    /// it at once when it is refused.
    fn tool_request(
        &self,
        rt: &Handle,
        run: &mut Run,
        id: RequestId,
        request: GuestRequest,
    ) -> Result<(), CodeModeError> {
        let (tool, mode) = match resolve_tool(&run.catalog, &request) {
            Ok(found) => found,
            Err((tool_id, err)) => {
                run.telemetry.record_call(&tool_id);
                // Unknown, denied and hidden ids are recorded as `denied` attempts;
                // the guest's answer is the same for all of them, so a guessed id reveals nothing.
                run.refuse(id, &tool_id, request.tool_input(), err);
                return Ok(());
            }
        };
        run.telemetry.record_call(&tool.id);
        self.start_call(rt, run, CallSpec { id, request, tool, mode, origin: CallOrigin::New })
    }
}
