//! The guest vocabulary both sides of the bridge agree on: the names the guest API reserves and the
//! typed form of every request the guest can make ([`GuestRequest`]).
//!
//! The catalog uses the name lists to decide which tool names may become properties of guest
//! objects; the bridge prelude enforces the same lists a second time inside the guest (a test keeps
//! the two copies equal). The bridge parses each call of the host primitive into a [`GuestRequest`]
//! exactly once; the runtime dispatches by matching on it.

/// Property names the JavaScript language itself looks up on objects: `then` (`await` treats an
/// object with a `then` function as a promise), the coercion hooks (`toString`, `valueOf`,
/// `toLocaleString`), `toJSON` (`JSON.stringify`), and `Object.prototype`'s members and accessors.
///
/// A tool is never installed under one of these names on a guest object (`tools`, an `MCP.<server>`
/// namespace): otherwise `await MCP.server` would call a tool named `then`, and `String(MCP.server)`
/// one named `toString`. Prevents: a hostile upstream server making the model's code call its tools
/// by accident. Such tools stay reachable explicitly (`MCP.server.$call("then", input)`, or by id).
pub const JS_INTERNAL_NAMES: [&str; 15] = [
    "then",
    "constructor",
    "prototype",
    "__proto__",
    "toString",
    "toLocaleString",
    "valueOf",
    "toJSON",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
];

/// The helpers every `MCP.<server>` namespace has; a tool with one of these names is reachable only
/// through `$call`.
pub const MCP_NAMESPACE_HELPERS: [&str; 4] = ["$api", "$call", "resources", "prompts"];

/// Whether `name` is one of [`JS_INTERNAL_NAMES`].
pub fn is_js_internal_name(name: &str) -> bool {
    JS_INTERNAL_NAMES.contains(&name)
}

/// Globals the prelude installs as non-writable, non-configurable properties (contract S5, B10).
pub const RESERVED_GLOBALS: [&str; 10] =
    ["tools", "ALL_TOOLS", "MCP", "API", "namespaces", "text", "json", "yield_control", "console", "require"];

/// Reserved words of JavaScript (strict mode): valid property names, but not usable as an identifier
/// reference (`if.list()` is no call) nor declarable as a function in a `.d.ts`.
pub const JS_RESERVED_WORDS: [&str; 46] = [
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "new",
    "null",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "let",
    "static",
    "implements",
    "interface",
    "package",
    "private",
    "protected",
    "public",
];

/// Helper names on `tools` that a convenience function may never shadow (contract K3).
pub const TOOL_HELPERS: [&str; 4] = ["search", "describe", "call", "callValue"];

/// Object keys dropped at the bridge in both directions, so tool results cannot pollute prototypes
/// through naive merges and guest payloads cannot smuggle them to tools (contract O4).
pub const FORBIDDEN_KEYS: [&str; 3] = ["__proto__", "constructor", "prototype"];

/// How a catalog tool call's result reaches the guest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallMode {
    /// `tools.callValue` / convenience functions: the tool's `details` value.
    #[default]
    Value,
    /// `tools.call`: `{details, content}`.
    Raw,
    /// `MCP.<server>.<tool>.value(input)`: the MCP result unwrapped by [`unwrap_mcp_result`]. Not
    /// a mode a `tools.*` request can ask for (it is set from [`GuestRequest::Mcp::unwrap`]).
    #[serde(skip)]
    McpValue,
}

/// Longest server message kept in the error of an MCP result with `isError`. Prevents: a server
/// putting megabytes of text into every failed call's error.
const MAX_MCP_ERROR_CHARS: usize = 2_000;

/// An MCP tool's own error (`isError: true`), with the server's text: what `.value()` throws.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct McpToolError(pub String);

/// The one unwrapping rule of MCP results, for `MCP.<server>.<tool>.value(input)`:
///
/// 1. `isError: true` → `Err` with the server's text (its text content, joined; cut at 2,000
///    characters), which the guest gets as a thrown `ToolError` coded `nested_tool_failed`;
/// 2. `structuredContent`, when the server sent it (and it is not `null`);
/// 3. else, one text content item whose text is JSON → that JSON, parsed;
/// 4. else the text content items' texts joined with newlines (one item: its text);
/// 5. else (no text: images, resources, nothing) the `content` array as it is.
pub fn unwrap_mcp_result(result: &serde_json::Value) -> Result<serde_json::Value, McpToolError> {
    use serde_json::Value;
    let content = result.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let texts: Vec<&str> = content
        .iter()
        .filter(|c| c.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|c| c.get("text").and_then(Value::as_str))
        .collect();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let text = texts.join("\n");
        let message: String = text.chars().take(MAX_MCP_ERROR_CHARS).collect();
        return Err(McpToolError(if message.is_empty() {
            "the MCP tool reported an error (isError) without a message".into()
        } else {
            message
        }));
    }
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        return Ok(structured.clone());
    }
    match texts.as_slice() {
        [] => Ok(Value::Array(content.to_vec())),
        [one] => Ok(serde_json::from_str::<Value>(one.trim()).unwrap_or_else(|_| Value::String((*one).to_string()))),
        many => Ok(Value::String(many.join("\n"))),
    }
}

/// One request of the guest, as the host primitive receives it (`host(kind, payloadJson)`, the
/// payload's parts joined), parsed
/// once into its typed form: everything after the primitive matches on this enum.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", rename_all_fields = "camelCase")]
#[non_exhaustive]
pub enum GuestRequest {
    /// `tools.search(query, {limit})`.
    Search {
        /// The query text.
        query: String,
        /// The requested number of results (clamped by the host).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<f64>,
    },
    /// `tools.describe(id)`.
    Describe {
        /// The catalog id.
        id: String,
    },
    /// A catalog tool call: `tools.call`, `tools.callValue` or a convenience function.
    Call {
        /// The catalog id.
        id: String,
        /// The tool input (JSON-safe, forbidden keys dropped).
        #[serde(default = "empty_object")]
        input: serde_json::Value,
        /// What the guest receives.
        #[serde(default)]
        mode: CallMode,
        /// The cell line that made the call; sent only for tools the approval policy gates
        /// ([`BootData::gated`]), so a human deciding sees where the call comes from.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<u32>,
    },
    /// `MCP.<server>.<tool>(input)` (also `resources.read` / `prompts.get` under their reserved names).
    Mcp {
        /// The configured server name.
        server: String,
        /// The exact MCP tool name.
        tool: String,
        /// The tool input.
        #[serde(default = "empty_object")]
        input: serde_json::Value,
        /// The cell line that made the call (gated tools only, see `Call::line`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<u32>,
        /// `MCP.<server>.<tool>.value(input)`: the result is unwrapped ([`unwrap_mcp_result`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unwrap: bool,
    },
    /// `MCP.<server>.$api(tool?, {schema?})`, answered from the catalog.
    McpApi {
        /// The configured server name.
        server: String,
        /// One tool (exact name or alias), or all.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<String>,
        /// Include the JSON Schemas.
        #[serde(default)]
        schema: bool,
    },
    /// A namespace member call (`Shipping.unpaidOver(10)`, contract §10). The host resolves it to a
    /// catalog tool call ([`crate::namespace::RunNamespaces::resolve`]) and from then on handles it
    /// exactly as a [`GuestRequest::Call`] / [`GuestRequest::Mcp`] (it is stored as that).
    Namespace {
        /// The namespace id (from the boot data).
        namespace: String,
        /// The member's path (`orders.list`).
        path: String,
        /// The guest's arguments (JSON-safe).
        #[serde(default)]
        args: Vec<serde_json::Value>,
        /// The cell line that made the call (members whose tool is gated only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        line: Option<u32>,
        /// `member.value(...)`: a member over an MCP tool returns the result unwrapped
        /// ([`unwrap_mcp_result`]); over another tool it is the plain value either way.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        unwrap: bool,
    },
    /// `yield_control(reason?)`.
    Yield {
        /// Why the cell yields.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// A guest request whose payload does not have its kind's shape (thrown in the guest as a
/// `TypeError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", kind.as_str())]
pub struct GuestRequestError {
    /// The request's kind.
    pub kind: crate::engine::RequestKind,
    /// What is wrong with the payload.
    pub reason: String,
}

/// The fields of [`GuestRequest::Call`], parsed without the enum's tag (see
/// [`GuestRequest::parse_tool_call`]: through the tagged enum, serde first copies the whole payload,
/// input included, into a buffer to find the tag).
///
/// [`GuestRequest::parse_tool_call`] refuses other fields (its callers then take the general path,
/// which ignores them): what it does not read, it cannot check against the bridge's limits.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CallFields {
    id: String,
    #[serde(default = "empty_object")]
    input: serde_json::Value,
    #[serde(default)]
    mode: CallMode,
    #[serde(default)]
    line: Option<u32>,
}

impl From<CallFields> for GuestRequest {
    fn from(CallFields { id, input, mode, line }: CallFields) -> Self {
        GuestRequest::Call { id, input, mode, line }
    }
}

/// Opening brackets from which [`GuestRequest::parse_prelude_call`] leaves an input to the whole
/// parse (serde_json refuses values nested 128 levels deep; a call message adds one level).
const SERDE_DEPTH_MARGIN: usize = 120;

/// The fields of [`GuestRequest::Mcp`], parsed without the enum's tag (see [`CallFields`]).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct McpFields {
    server: String,
    tool: String,
    #[serde(default = "empty_object")]
    input: serde_json::Value,
    #[serde(default)]
    line: Option<u32>,
    #[serde(default)]
    unwrap: bool,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

impl GuestRequest {
    /// Parses a request from the primitive's `kind` and its (already size- and depth-checked)
    /// payload. The error's text is meant for the guest.
    pub fn parse(kind: crate::engine::RequestKind, payload: serde_json::Value) -> Result<Self, GuestRequestError> {
        let serde_json::Value::Object(mut fields) = payload else {
            return Err(GuestRequestError { kind, reason: "the payload must be an object".into() });
        };
        fields.insert("kind".into(), serde_json::Value::String(kind.as_str().into()));
        serde_json::from_value(serde_json::Value::Object(fields))
            .map_err(|e| GuestRequestError { kind, reason: e.to_string() })
    }

    /// Parses a tool call (`Call` / `Mcp`) straight from the payload's JSON text, without a
    /// [`serde_json::Value`] of the whole payload: `None` for the other kinds. The result equals
    /// [`GuestRequest::parse`] of the parsed text; the caller applies the bridge's limits to the
    /// input (size before, depth and forbidden keys after, see `codemode_bridge::adapter`).
    pub fn parse_tool_call(kind: crate::engine::RequestKind, text: &str) -> Option<Result<Self, serde_json::Error>> {
        Some(match kind {
            crate::engine::RequestKind::Call => match Self::parse_prelude_call(text) {
                Some(call) => Ok(call),
                None => serde_json::from_str::<CallFields>(text).map(GuestRequest::from),
            },
            crate::engine::RequestKind::Mcp => {
                serde_json::from_str(text).map(|McpFields { server, tool, input, line, unwrap }| GuestRequest::Mcp {
                    server,
                    tool,
                    input,
                    line,
                    unwrap,
                })
            }
            _ => return None,
        })
    }

    /// A call message exactly as the prelude writes one for a catalog tool that no approval
    /// gates, `{"id":"<id>","mode":"value"|"raw","input":<input>}` with an id free of escapes and
    /// control characters: the id sliced out of the text and only the input parsed (1.7k
    /// instructions where the whole parse takes 2.7k, on a nested call's path). `None` for anything
    /// else, including an input that does not parse alone; the caller then parses the text whole,
    /// which gives the same request for every text this accepts.
    fn parse_prelude_call(text: &str) -> Option<Self> {
        let rest = text.strip_prefix(r#"{"id":""#)?;
        let (id, rest) = rest.split_once('"')?;
        if id.bytes().any(|b| b == b'\\' || b < 0x20) {
            return None;
        }
        let (mode, input) = if let Some(input) = rest.strip_prefix(r#","mode":"value","input":"#) {
            (CallMode::Value, input)
        } else {
            (CallMode::Raw, rest.strip_prefix(r#","mode":"raw","input":"#)?)
        };
        let input = input.strip_suffix('}')?;
        // Parsed alone, an input may nest one level deeper than inside the message before
        // serde_json's recursion limit (128) refuses it: one that might come near is left to the
        // whole parse (the bridge refuses anything nested past `max_json_depth` anyway).
        if input.len() >= SERDE_DEPTH_MARGIN
            && input.bytes().filter(|b| matches!(b, b'[' | b'{')).count() >= SERDE_DEPTH_MARGIN
        {
            return None;
        }
        let input = serde_json::from_str(input).ok()?;
        Some(GuestRequest::Call { id: id.to_string(), input, mode, line: None })
    }

    /// The input of a tool call (`Call` / `Mcp`), to apply the bridge's limits to.
    pub fn tool_input_mut(&mut self) -> Option<&mut serde_json::Value> {
        match self {
            GuestRequest::Call { input, .. } | GuestRequest::Mcp { input, .. } => Some(input),
            _ => None,
        }
    }

    /// The request's kind.
    pub fn kind(&self) -> crate::engine::RequestKind {
        use crate::engine::RequestKind as K;
        match self {
            GuestRequest::Search { .. } => K::Search,
            GuestRequest::Describe { .. } => K::Describe,
            GuestRequest::Call { .. } => K::Call,
            GuestRequest::Mcp { .. } => K::Mcp,
            GuestRequest::McpApi { .. } => K::McpApi,
            GuestRequest::Namespace { .. } => K::Namespace,
            GuestRequest::Yield { .. } => K::Yield,
        }
    }

    /// The input of a tool call (`Call` / `Mcp`).
    pub fn tool_input(&self) -> Option<&serde_json::Value> {
        match self {
            GuestRequest::Call { input, .. } | GuestRequest::Mcp { input, .. } => Some(input),
            _ => None,
        }
    }

    /// The cell line a call request says it was made at (gated tools only).
    pub fn call_line(&self) -> Option<u32> {
        match self {
            GuestRequest::Call { line, .. } | GuestRequest::Mcp { line, .. } | GuestRequest::Namespace { line, .. } => {
                *line
            }
            _ => None,
        }
    }
}

/// One MCP tool as the guest sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpToolView {
    /// The exact MCP name.
    pub name: String,
    /// The camelCase alias, when there is an unambiguous one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// The name is reserved (a JavaScript internal name or a namespace helper): the tool is reachable only as
    /// `MCP.<server>.$call(name, input)`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub explicit: bool,
}

/// One MCP server as the guest sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpServerView {
    /// The server's configured name.
    pub name: String,
    /// Its camelCase alias, when there is an unambiguous one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Its tools, by name.
    pub tools: Vec<McpToolView>,
    /// `resources.read` is available.
    pub resources: bool,
    /// `prompts.get` is available.
    pub prompts: bool,
    /// Set when the server is down (it failed to start or crashed; the host restarts it): why. The
    /// guest keeps `MCP.<server>`, and any member it has no tool for fails with a coded error
    /// saying so, instead of the namespace vanishing (`cannot read property of undefined`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down: Option<String>,
}

/// Per-run data the guest prelude installs at boot: the catalog's guest views. The catalog produces
/// it (`codemode-catalog`); the bridge keeps it on the host and the guest pulls each part by key
/// when a cell first touches it (see `codemode_bridge::BootText` and [`BootSource`](crate::engine::BootSource)).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootData {
    /// `ALL_TOOLS`: compact entries of every guest-visible catalog tool.
    pub tools: Vec<crate::catalog::ToolCatalogEntry>,
    /// `(safeName, catalogId)` pairs for `tools.<safeName>(input)` convenience functions; only
    /// unambiguous names that shadow no helper and no JavaScript internal name (contract K1–K5).
    pub conveniences: Vec<(String, String)>,
    /// Deepest nesting the guest-side adapter accepts.
    pub max_depth: u32,
    /// Virtual files served by `API.list` / `API.read` (contract §9), path → content.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub api_files: std::collections::BTreeMap<String, String>,
    /// MCP servers for the `MCP` namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<McpServerView>,
    /// Catalog ids whose calls carry the cell line that made them: the tools the approval policy
    /// gates (every tool when the host asks for every call's line, as an operator's console does).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gated: Vec<String>,
    /// The run's visible namespaces (contract §10), serialized. Per run (scopes may depend on the run),
    /// so they travel apart from the catalog's cached boot text (see `codemode_bridge::BootText`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<crate::namespace::GuestNamespace>,
}

#[cfg(test)]
mod unwrap_tests {
    use super::unwrap_mcp_result;
    use serde_json::json;

    /// The unwrapping rule, case by case.
    #[test]
    fn mcp_results_unwrap_the_same_way_every_time() {
        let text = |t: &str| json!({ "type": "text", "text": t });
        let structured = json!({ "content": [text("{\"a\":1}")], "structuredContent": { "b": 2 } });
        assert_eq!(unwrap_mcp_result(&structured), Ok(json!({ "b": 2 })));
        assert_eq!(unwrap_mcp_result(&json!({ "content": [text(" {\"a\": [1, 2]} ")] })), Ok(json!({ "a": [1, 2] })));
        assert_eq!(unwrap_mcp_result(&json!({ "content": [text("Echo: hi")] })), Ok(json!("Echo: hi")));
        assert_eq!(unwrap_mcp_result(&json!({ "content": [text("a"), text("b")] })), Ok(json!("a\nb")));
        let image = json!({ "content": [{ "type": "image", "data": "AA==", "mimeType": "image/png" }] });
        assert_eq!(unwrap_mcp_result(&image), Ok(image["content"].clone()));
        assert_eq!(unwrap_mcp_result(&json!({})), Ok(json!([])));
        let failed = json!({ "content": [text("no such file")], "isError": true, "structuredContent": { "x": 1 } });
        assert_eq!(unwrap_mcp_result(&failed), Err(super::McpToolError("no such file".to_string())));
        assert!(unwrap_mcp_result(&json!({ "isError": true })).unwrap_err().0.contains("without a message"));
        let long = json!({ "content": [text(&"e".repeat(10_000))], "isError": true });
        assert_eq!(unwrap_mcp_result(&long).unwrap_err().0.len(), 2_000);
        // `null` structured content does not count; a JSON `null` text is JSON.
        assert_eq!(
            unwrap_mcp_result(&json!({ "content": [text("null")], "structuredContent": null })),
            Ok(json!(null))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::RequestKind;
    use serde_json::json;

    /// The prelude's call message is read by slicing where it has its usual form, and the result
    /// is the whole parse's for every text: messages of that form, and texts that differ from it in
    /// one way or another (an escaped or control character in the id, other fields, whitespace, a
    /// trailing brace, an input that is not JSON alone, an input nested near serde_json's recursion
    /// limit) — which the whole parse reads.
    #[test]
    fn the_preludes_call_message_parses_as_the_whole_text_does() {
        let whole = |t: &str| serde_json::from_str::<CallFields>(t).ok().map(GuestRequest::from);
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let fast = [
            r#"{"id":"plugin:demo:demo_echo","mode":"value","input":{"i":5}}"#.to_string(),
            r#"{"id":"mcp:srv:t","mode":"raw","input":[1,"}",{"a":null}]}"#.to_string(),
            r#"{"id":"é 𝄞","mode":"value","input":"x"}"#.to_string(),
            r#"{"id":"","mode":"value","input":{"__proto__":{"p":1}, "a" : 1 }}"#.to_string(),
            r#"{"id":"x","mode":"value","input":{} }"#.to_string(),
            format!(r#"{{"id":"x","mode":"value","input":{}}}"#, deep(119)),
        ];
        for t in &fast {
            let got = GuestRequest::parse_prelude_call(t);
            assert!(got.is_some(), "{t}");
            assert_eq!(got, whole(t), "{t}");
            assert_eq!(GuestRequest::parse_tool_call(RequestKind::Call, t).unwrap().ok(), got, "{t}");
        }
        let other = [
            r#"{"id":"a"b","mode":"value","input":{}}"#,
            r#"{"id":"a\b","mode":"value","input":{}}"#,
            "{\"id\":\"a\tb\",\"mode\":\"value\",\"input\":{}}",
            r#"{"id":"x","mode":"value","input":{},"line":3}"#,
            r#"{"id":"x","mode":"value","input":{}}}"#,
            r#"{"id":"x","mode":"value","input":{},"id":"y"}"#,
            r#"{"id":"x","mode":"other","input":{}}"#,
            r#"{"id":"x","input":{},"mode":"raw"}"#,
            r#"{"id":"x","mode":"value","input":}"#,
            r#"{"id":"x","mode":"value","input":{"a":1}"#,
            r#"{"id":"x","mode":"value","input":nul}"#,
            r#"{ "id":"x","mode":"value","input":{}}"#,
        ];
        let deeper: Vec<String> =
            [126, 127, 128].iter().map(|&n| format!(r#"{{"id":"x","mode":"value","input":{}}}"#, deep(n))).collect();
        for t in other.iter().copied().chain(deeper.iter().map(String::as_str)) {
            assert_eq!(GuestRequest::parse_prelude_call(t), None, "{t}");
            let via = GuestRequest::parse_tool_call(RequestKind::Call, t).unwrap().ok();
            assert_eq!(via, whole(t), "{t}");
        }
    }

    #[test]
    fn requests_parse_once_into_their_typed_form() {
        let r =
            GuestRequest::parse(RequestKind::Call, json!({"id": "plugin:demo:x", "mode": "raw", "input": {"a": 1}}));
        assert_eq!(
            r,
            Ok(GuestRequest::Call {
                id: "plugin:demo:x".into(),
                input: json!({"a": 1}),
                mode: CallMode::Raw,
                line: None
            })
        );
        let r = GuestRequest::parse(RequestKind::Call, json!({"id": "x"})).unwrap();
        assert_eq!(r.tool_input(), Some(&json!({})));
        assert_eq!(r.kind(), RequestKind::Call);
        let r = GuestRequest::parse(RequestKind::Search, json!({"query": "q", "limit": 3})).unwrap();
        assert_eq!(r, GuestRequest::Search { query: "q".into(), limit: Some(3.0) });
        assert_eq!(
            GuestRequest::parse(RequestKind::McpApi, json!({"server": "s", "tool": null, "schema": true})),
            Ok(GuestRequest::McpApi { server: "s".into(), tool: None, schema: true })
        );
        assert_eq!(
            GuestRequest::parse(RequestKind::Yield, json!({"reason": null})),
            Ok(GuestRequest::Yield { reason: None })
        );
        // Malformed payloads are refused with a message naming the request.
        for (kind, bad) in [
            (RequestKind::Call, json!({"input": {}})),
            (RequestKind::Describe, json!({"id": 5})),
            (RequestKind::Mcp, json!([1])),
            (RequestKind::Call, json!({"id": "x", "mode": "other"})),
        ] {
            let e = GuestRequest::parse(kind, bad).unwrap_err();
            assert_eq!(e.kind, kind);
            assert!(e.to_string().starts_with(kind.as_str()), "{e}");
        }
        // The shortcut for tool calls (parse_tool_call, behind codemode_bridge::adapter::parse_request)
        // skips the tagged enum: what it accepts, it must parse exactly as GuestRequest::parse does;
        // fields it does not know it refuses (its callers then take the general path).
        for (kind, payload) in [
            (RequestKind::Call, json!({"id": "x", "input": [1, {"a": null}], "mode": "value", "line": 7})),
            (RequestKind::Call, json!({"id": "x", "line": null, "extra": true})),
            (RequestKind::Call, json!({"id": "x", "input": null})),
            (RequestKind::Call, json!({"id": 1})),
            (RequestKind::Call, json!({"id": "x", "line": -1})),
            (RequestKind::Call, json!({"id": "x", "kind": "search"})),
            (RequestKind::Mcp, json!({"server": "s", "tool": "t"})),
            (RequestKind::Mcp, json!({"server": "s", "tool": "t", "input": {"q": "v"}, "line": 3})),
            (RequestKind::Mcp, json!({"server": "s"})),
            (RequestKind::Mcp, json!({"server": "s", "tool": "t", "line": "3"})),
        ] {
            let mut tagged = payload.clone();
            if let Some(m) = tagged.as_object_mut() {
                m.insert("kind".into(), json!(kind.as_str()));
            }
            let expected = serde_json::from_value::<GuestRequest>(tagged);
            assert_eq!(GuestRequest::parse(kind, payload.clone()).ok(), expected.as_ref().ok().cloned());
            let got = GuestRequest::parse_tool_call(kind, &payload.to_string()).expect("a tool call");
            let unknown_field = payload.as_object().is_some_and(|m| m.contains_key("extra") || m.contains_key("kind"));
            match (&got, &expected) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{payload}"),
                (Err(e), Ok(_)) => assert!(unknown_field, "{payload}: {e}"),
                (Err(_), Err(_)) => {}
                (Ok(_), Err(_)) => panic!("{payload}: accepted by the shortcut only"),
            }
        }
        // Serialized form (stored with suspended runs) round-trips.
        let r = GuestRequest::Mcp {
            server: "s".into(),
            tool: "t".into(),
            input: json!({"x": [1]}),
            line: None,
            unwrap: false,
        };
        let back: GuestRequest = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }
}
