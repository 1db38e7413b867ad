//! Activation and the model surface (contract §4): given the host's resolved tools, the policy and the
//! config, decide what the model sees — exactly `exec` and `wait` (plus retained direct-only tools)
//! when code mode is active, the unchanged list otherwise — and guard the final provider payload.

use codemode_catalog::Catalog;
use codemode_catalog::policy::{PolicyContext, PolicyOutcome, ToolPolicy};
use codemode_catalog::quick_index::exec_description_with;
use codemode_core::catalog::{ToolDefinition, ToolSource};
use codemode_core::config::CodeModeConfig;
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::namespace::{NamespaceInfo, NamespaceRegistry};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The model-visible name of the code-mode tool.
pub const EXEC: &str = "exec";
/// The model-visible name of the resume tool.
pub const WAIT: &str = "wait";

/// A tool definition as sent to the model provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelTool {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the input.
    pub input_schema: Value,
}

impl ModelTool {
    /// The direct (non-code-mode) form of a host tool.
    pub fn direct(def: &ToolDefinition) -> Self {
        ModelTool { name: def.name.clone(), description: def.description.clone(), input_schema: def.parameters.clone() }
    }
}

/// The `exec` input schema (contract §5.1): `language` is a flat string enum, never `oneOf`/`anyOf` (X4).
pub fn exec_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": { "type": "string", "description": "JavaScript (or TypeScript) code: the body of an async function; use await and return." },
            "language": { "type": "string", "enum": ["javascript", "typescript"], "description": "Default: javascript." }
        },
        "required": ["code"],
        "additionalProperties": false
    })
}

/// The `wait` input schema (contract §5.3).
pub fn wait_input_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "runId": { "type": "string", "description": "The runId of a `waiting` result." } },
        "required": ["runId"],
        "additionalProperties": false
    })
}

/// The `wait` tool's description.
pub const WAIT_DESCRIPTION: &str = "Resume a code-mode run that `exec` (or an earlier `wait`) returned as `waiting`: \
     nested tool calls it was waiting for are delivered and the program continues. Returns the same kind of result as exec.";

/// The `exec` model tool for a catalog.
pub fn exec_tool(catalog: &Catalog, namespaces: &[NamespaceInfo], mcp_servers: &[String]) -> ModelTool {
    exec_tool_with(catalog, namespaces, mcp_servers, &std::collections::BTreeMap::new())
}

/// [`exec_tool`] whose quick index also shows the result types learned so far (tool id → type),
/// marked observed. They appear when a client next lists the tools; no `tools/list_changed` is
/// sent for them (a learned type is a hint, not a reason to invalidate a client's prompt cache).
pub fn exec_tool_with(
    catalog: &Catalog,
    namespaces: &[NamespaceInfo],
    mcp_servers: &[String],
    observed: &std::collections::BTreeMap<String, String>,
) -> ModelTool {
    ModelTool {
        name: EXEC.into(),
        description: exec_description_with(catalog, namespaces, mcp_servers, observed),
        input_schema: exec_input_schema(),
    }
}

/// The `wait` model tool.
pub fn wait_tool() -> ModelTool {
    ModelTool { name: WAIT.into(), description: WAIT_DESCRIPTION.into(), input_schema: wait_input_schema() }
}

/// What the host knows about the run when it assembles the model request.
#[derive(Clone, Default)]
pub struct ActivationRequest<'a> {
    /// Every resolved tool (core, plugins, MCP, client), before policy (A1–A3).
    pub tools: Vec<ToolDefinition>,
    /// Agent, provider and model, for the policy.
    pub policy_context: PolicyContext<'a>,
    /// A raw model call without tools.
    pub raw: bool,
    /// The run disabled tools.
    pub disable_tools: bool,
    /// Whether the configured engine is available (compiled in and loadable).
    pub engine_available: bool,
    /// Names of the MCP servers whose tools are in the list (for the `exec` description).
    pub mcp_servers: Vec<String>,
    /// The namespace registry: the namespaces the run's catalog makes visible are listed in the
    /// `exec` description (contract §10 "Prompts"; never those whose backing tools the policy removed).
    pub namespaces: Option<&'a dyn NamespaceRegistry>,
}

/// The result of activation.
#[derive(Debug, Clone)]
pub enum Activation {
    /// Code mode is off (or the run is intentionally tool-less): these tools, unchanged.
    Direct {
        /// The model-visible tools after policy.
        tools: Vec<ModelTool>,
        /// What the policy removed and warned about.
        policy: PolicyOutcome,
    },
    /// Code mode is active.
    CodeMode {
        /// `exec`, `wait` and the retained direct-only tools.
        tools: Vec<ModelTool>,
        /// The run's hidden catalog.
        catalog: Box<Catalog>,
        /// What the policy removed and warned about.
        policy: PolicyOutcome,
    },
}

impl Activation {
    /// The model-visible tools.
    pub fn tools(&self) -> &[ModelTool] {
        match self {
            Activation::Direct { tools, .. } | Activation::CodeMode { tools, .. } => tools,
        }
    }

    /// Whether the code-mode surface is active.
    pub fn is_code_mode(&self) -> bool {
        matches!(self, Activation::CodeMode { .. })
    }
}

/// Runs contract §4's activation order (A4–A8). Fails closed (`runtime_unavailable`) when code mode is
/// enabled, the run has tools, and the engine is not available — normal tools are never exposed as a
/// fallback (C4).
pub fn activate(
    config: &CodeModeConfig,
    policy: &ToolPolicy,
    req: ActivationRequest<'_>,
) -> Result<Activation, CodeModeError> {
    // A4: policy.
    let outcome = policy.apply(req.tools, req.policy_context);
    let tool_less = req.raw || req.disable_tools || outcome.intentionally_empty || outcome.kept.is_empty();
    // A5 (and tool-less runs, contract §4 rules): unchanged exposure.
    if !config.enabled || tool_less {
        let tools = if req.raw || req.disable_tools {
            Vec::new()
        } else {
            outcome.kept.iter().map(ModelTool::direct).collect()
        };
        return Ok(Activation::Direct { tools, policy: outcome });
    }
    if !req.engine_available {
        return Err(CodeModeError::new(
            CodeModeErrorCode::RuntimeUnavailable,
            format!("code mode is enabled but its runtime `{}` is unavailable; failing closed", config.runtime),
        ));
    }
    // A6–A8.
    let direct: Vec<ModelTool> = outcome.kept.iter().filter(|t| t.direct_only).map(ModelTool::direct).collect();
    let catalog = Catalog::build(outcome.kept.iter().cloned());
    let visible = req.namespaces.map(|r| r.visible(&catalog)).unwrap_or_default();
    let mut tools = vec![exec_tool(&catalog, &visible, &req.mcp_servers), wait_tool()];
    tools.extend(direct);
    Ok(Activation::CodeMode { tools, catalog: Box::new(catalog), policy: outcome })
}

/// contract §4 payload guard: the final provider payload of a code-mode run must hold exactly `exec`,
/// `wait` and the retained direct-only tools. Anything else (a tool added after activation, a
/// duplicate, a missing control tool) fails the run closed.
pub fn guard_payload(activation: &Activation, payload_tool_names: &[&str]) -> Result<(), CodeModeError> {
    let Activation::CodeMode { tools, .. } = activation else { return Ok(()) };
    let expected: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    guard_tool_names(&expected, payload_tool_names)
}

/// The payload guard's comparison: `payload` must hold exactly the `expected` tool names (order
/// aside, no duplicates, none missing). `codemode serve` runs it on every tool list it sends.
pub fn guard_tool_names(expected: &[&str], payload: &[&str]) -> Result<(), CodeModeError> {
    let mut expected = expected.to_vec();
    let mut got = payload.to_vec();
    expected.sort_unstable();
    got.sort_unstable();
    if expected == got {
        Ok(())
    } else {
        Err(CodeModeError::new(
            CodeModeErrorCode::InternalError,
            format!(
                "code mode payload guard: the provider payload holds tools {got:?}, expected exactly {expected:?}; failing closed"
            ),
        ))
    }
}

/// Names of the MCP servers among `tools`.
pub fn mcp_servers(tools: &[ToolDefinition]) -> Vec<String> {
    let mut v: Vec<String> = tools.iter().filter(|t| t.source == ToolSource::Mcp).map(|t| t.owner.clone()).collect();
    v.sort();
    v.dedup();
    v
}
