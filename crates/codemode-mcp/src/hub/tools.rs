//! An upstream tool as the catalog sees it: its name checked, its definition built from what the
//! server lists, and whether it is read-only — decided by the configuration, never by the server's
//! own annotations unless the configuration trusts them.

use super::*;

/// Longest upstream tool name accepted (the MCP specification's limit).
pub const MAX_TOOL_NAME_CHARS: usize = 128;

/// Why an upstream tool name is refused at ingestion, if it is. The MCP specification
/// asks for 1–128 ASCII letters, digits, `_`, `-`, `.` (and `/`); other printable names (`$api`,
/// non-ASCII letters) are still accepted for compatibility and escaped wherever they are shown, but
/// a name with a control character, whitespace, a line or paragraph separator or a bidirectional
/// control is refused. Prevents: an upstream server forging lines in the operator's log or in the
/// question put to a human, clearing a terminal, or disguising one tool as another.
pub fn tool_name_refusal(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty");
    }
    if name.chars().count() > MAX_TOOL_NAME_CHARS {
        return Some("is longer than 128 characters");
    }
    if name.chars().any(|c| c.is_whitespace() || codemode::text::is_unsafe_for_display(c)) {
        return Some("holds whitespace, control, line-break or bidirectional characters");
    }
    None
}

/// An MCP tool as a catalog definition. What the server says about a tool is untrusted (the MCP
/// specification asks clients to treat annotations so unless the server is trusted): its title and
/// description are display only; whether the tool is read-only — which exempts it from
/// `approvals.requireUnlessReadOnly`, lets `restartSafe` cells call it and lets a lost call be
/// issued again — comes from the configuration ([`read_only_from`]); its declared output schema is
/// shown as the server's unverified claim, and becomes a contract only for a trusted server.
pub(super) fn tool_definition(config: &ServerConfig, t: rmcp::model::Tool) -> ToolDefinition {
    let hint = t.annotations.as_ref().and_then(|a| a.read_only_hint);
    let mut def = ToolDefinition::new(ToolSource::Mcp, &config.name, t.name.to_string())
        .with_description(t.description.map(|d| d.to_string()).unwrap_or_default())
        .with_parameters(Value::Object((*t.input_schema).clone()));
    def.label = t.title.clone();
    def.output_schema = t.output_schema.map(|s| Value::Object((*s).clone()));
    def.trusted_output = config.trust_annotations && def.output_schema.is_some();
    let (read_only, source) = read_only_from(config, &def, hint);
    def.read_only = read_only;
    def.read_only_source = Some(source);
    def
}

/// Whether an upstream tool is read-only, and why (the text `codemode catalog` shows). In order: the
/// server's `sideEffects` patterns (side-effecting), its `readOnly` patterns (read-only), the
/// server's own `readOnlyHint` when `trustAnnotations` is set, else side-effecting — a hint from a
/// server the configuration does not trust is noted as ignored.
pub fn read_only_from(config: &ServerConfig, def: &ToolDefinition, hint: Option<bool>) -> (bool, String) {
    let server = &config.name;
    if let Some(p) = codemode_catalog::policy::matching_pattern(&config.side_effects, def) {
        return (false, format!("side-effecting: mcpServers.{server}.sideEffects `{p}`"));
    }
    if let Some(p) = codemode_catalog::policy::matching_pattern(&config.read_only, def) {
        return (true, format!("read-only: mcpServers.{server}.readOnly `{p}`"));
    }
    match (hint, config.trust_annotations) {
        (Some(true), true) => (true, "read-only: the server's readOnlyHint (trustAnnotations)".into()),
        (Some(false), true) => (false, "side-effecting: the server's readOnlyHint (trustAnnotations)".into()),
        (None, true) => (false, "side-effecting: the trusted server gives no readOnlyHint".into()),
        (Some(true), false) => (
            false,
            "side-effecting: the server's readOnlyHint is not trusted (set trustAnnotations or readOnly)".into(),
        ),
        (_, false) => (false, "side-effecting: upstream tools are unless the configuration says otherwise".into()),
    }
}
