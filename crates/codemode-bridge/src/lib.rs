//! # codemode-bridge
//!
//! The guest↔host protocol of DESIGN §3, identical for every engine:
//!
//! - [`PRELUDE`]: JavaScript evaluated in every VM before guest code. It builds the whole guest API
//!   (`ALL_TOOLS`, `tools`, `MCP`, `API`, `namespaces`, `text`, `json`, `yield_control`, `console`) on
//!   one host primitive that returns opaque request ids; promises and their resolvers stay inside the
//!   guest, so a snapshot of guest memory is the complete state of a suspended run.
//! - [`adapter`]: the JSON-safe value adapter (size and depth limits, forbidden keys).
//! - [`host`]: [`BridgeHost`], the host half of the primitive (request ids, limits, output buffer).
//! - [`driver`]: the drive step every engine runs ([`drive`] over the [`GuestVm`] primitives).
//! - [`modules`]: the static guard that rejects `import` / `require` before a cell runs (SPEC X6);
//! - [`workers`]: the big-stack threads all guest code runs on.
//!
//! Layering (DESIGN §2): depends on `codemode-core` only; engines depend on it. It never names an
//! engine, a tool source, MCP or policy.
#![forbid(unsafe_code)]

pub mod adapter;
pub mod driver;
pub mod host;
pub mod modules;
pub mod nesting;
pub mod shell;
pub mod workers;

pub use driver::{GuestVm, VmFault, drive};
pub use host::{BridgeHost, BridgeState, HostCallResult};

use serde::Serialize;

/// The guest prelude. Evaluate it as a classic script; its completion value is `install(host)`.
///
/// Written in layers (`src/js/prelude/`): captured builtins and shared lists, the JSON-safe adapter,
/// requests, output and unavailable-API stubs, boot (the public API), running the cell. Only the
/// joined text is a valid script: the layers share one closure.
pub const PRELUDE: &str = concat!(
    include_str!("js/prelude/0_builtins.js"),
    include_str!("js/prelude/1_adapter.js"),
    include_str!("js/prelude/2_requests.js"),
    include_str!("js/prelude/3_api.js"),
    include_str!("js/prelude/4_boot.js"),
    include_str!("js/prelude/5_run.js"),
);

/// File name used for the cell in stack traces.
pub use codemode_core::positions::CELL_FILENAME;

/// File name used for the prelude in stack traces.
pub const PRELUDE_FILENAME: &str = "<codemode-prelude>";

/// Prefix of every module-guard error message; errors with it fail as `module_access_denied`.
pub const MODULE_DENIED_PREFIX: &str = "module access denied";

/// Globals the prelude installs and the helper names of `tools` (defined in
/// [`codemode_core::guest`], the vocabulary both sides of the bridge share).
pub use codemode_core::guest::{RESERVED_GLOBALS, TOOL_HELPERS};

/// Wraps a cell's source as an async function expression. The prefix has no newline, so line numbers
/// in errors are the cell's own.
pub fn wrap_code(code: &str) -> String {
    let mut s = String::with_capacity(code.len() + 32);
    s.push_str("(async function () {");
    s.push_str(code);
    s.push_str("\n})");
    s
}

pub use codemode_core::guest::BootData;

/// The boot argument of the prelude for `boot`: a JSON head, a newline, then the bulky parts as JSON
/// text segments (`ALL_TOOLS`, the `API` files, each MCP server's tool list). The head gives each
/// segment's `[start, length]` in UTF-16 units (JS string indices) and `apiList` the `API.list`
/// entries. The guest slices a segment out and parses it only when the cell first needs it; compact
/// JSON never contains a raw newline, so the first one ends the head. A run that never reads
/// `ALL_TOOLS` or `MCP.x` does not pay for building them (with 200 catalog tools that was most of a
/// trivial `exec`).
pub fn boot_json(boot: &BootData) -> String {
    BootText::new(boot).with_namespaces(&boot.namespaces).to_string()
}

/// The boot argument split into the part a catalog determines (built once per catalog and cached)
/// and the per-run namespaces (SPEC §10 L4: scopes are created per run), joined by
/// [`with_namespaces`](Self::with_namespaces). A run without namespaces uses the cached text as is.
#[derive(Debug, Clone)]
pub struct BootText {
    /// `head + "\n" + body`: the whole text when there are no namespaces.
    whole: std::sync::Arc<str>,
    /// Byte length of the head (its closing brace is the last byte).
    head_len: usize,
    /// The body's length in UTF-16 units (where a namespaces segment would start).
    body_units: usize,
}

impl BootText {
    /// Builds the catalog part of `boot` (its `namespaces` are ignored; pass them to
    /// [`with_namespaces`](Self::with_namespaces)).
    pub fn new(boot: &BootData) -> Self {
        let mut body = String::new();
        let mut at = 0usize;
        let mut segment = |text: String| -> serde_json::Value {
            let units = text.encode_utf16().count();
            let v = serde_json::json!([at, units]);
            at += units;
            body.push_str(&text);
            v
        };
        let tools = segment(json_text(&boot.tools));
        let api_files = segment(json_text(&boot.api_files));
        let mcp: Vec<serde_json::Value> = boot
            .mcp
            .iter()
            .map(|server| {
                serde_json::json!({
                    "name": server.name,
                    "alias": server.alias,
                    "tools": segment(json_text(&server.tools)),
                    "resources": server.resources,
                    "prompts": server.prompts,
                })
            })
            .collect();
        let api_list: Vec<serde_json::Value> =
            boot.api_files.iter().map(|(p, c)| serde_json::json!({ "path": p, "bytes": c.len() })).collect();
        let head = serde_json::json!({
            "tools": tools,
            "conveniences": boot.conveniences,
            "maxDepth": boot.max_depth,
            "apiFiles": api_files,
            "apiList": api_list,
            "mcp": mcp,
            "gated": boot.gated,
        });
        let head = head.to_string();
        let whole: std::sync::Arc<str> = format!("{head}\n{body}").into();
        BootText { whole, head_len: head.len(), body_units: at }
    }

    /// The boot text of a run whose visible namespaces are `namespaces`: the cached text when there
    /// are none; otherwise the namespaces as one more segment (parsed by the guest at boot).
    pub fn with_namespaces(&self, namespaces: &[codemode_core::namespace::GuestNamespace]) -> std::sync::Arc<str> {
        if namespaces.is_empty() {
            return self.whole.clone();
        }
        let text = json_text(&namespaces);
        let units = text.encode_utf16().count();
        // The head without its closing brace, the namespaces segment's position, then the body.
        let (head, rest) = self.whole.split_at(self.head_len);
        let head_open = head.strip_suffix('}').unwrap_or(head);
        let mut out = String::with_capacity(self.whole.len() + text.len() + 32);
        out.push_str(head_open);
        out.push_str(&format!(",\"namespaces\":[{},{units}]}}", self.body_units));
        out.push_str(rest);
        out.push_str(&text);
        out.into()
    }
}

/// JSON text of a value (serializing plain data cannot fail; `null` if it somehow does).
fn json_text<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::collections::BTreeMap;

    /// The string literals of the prelude's `const NAME = [ ... ];` array.
    fn prelude_list(name: &str) -> Vec<String> {
        let start = PRELUDE.find(&format!("const {name} = [")).unwrap_or_else(|| panic!("{name} not in the prelude"));
        let body = &PRELUDE[start..];
        let body = &body[body.find('[').unwrap() + 1..body.find("];").unwrap()];
        body.split(',').map(|s| s.trim().trim_matches('"').to_string()).filter(|s| !s.is_empty()).collect()
    }

    #[test]
    fn prelude_lists_equal_the_rust_ones() {
        assert_eq!(prelude_list("JS_INTERNAL_NAMES"), codemode_core::guest::JS_INTERNAL_NAMES);
        assert_eq!(prelude_list("RESERVED"), RESERVED_GLOBALS);
        assert_eq!(prelude_list("NS_HELPERS"), codemode_core::guest::MCP_NAMESPACE_HELPERS);
    }

    /// Slices a segment the way the prelude does: by UTF-16 indices.
    fn slice(body: &str, seg: &Value) -> String {
        let units: Vec<u16> = body.encode_utf16().collect();
        let (start, len) = (seg[0].as_u64().unwrap() as usize, seg[1].as_u64().unwrap() as usize);
        String::from_utf16(&units[start..start + len]).unwrap()
    }

    #[test]
    fn guest_boot_segments_round_trip_with_non_ascii_text() {
        let mut api_files = BTreeMap::new();
        api_files.insert("mcp/x.d.ts".to_string(), "/** café → 𝄞 */\ndeclare namespace MCP.x {}\n".to_string());
        let boot = BootData {
            tools: vec![],
            conveniences: vec![("demo_echo".into(), "plugin:demo:demo_echo".into())],
            max_depth: 64,
            api_files: api_files.clone(),
            mcp: vec![codemode_core::guest::McpServerView {
                name: "x".into(),
                alias: None,
                tools: vec![codemode_core::guest::McpToolView {
                    name: "über-tool".into(),
                    alias: Some("überTool".into()),
                    explicit: false,
                }],
                resources: false,
                prompts: false,
            }],
            gated: vec!["plugin:demo:demo_echo".into()],
            namespaces: vec![],
        };
        let cached = BootText::new(&boot);
        assert!(
            std::sync::Arc::ptr_eq(&cached.with_namespaces(&[]), &cached.with_namespaces(&[])),
            "shared when empty"
        );
        let mut boot = boot;
        boot.namespaces = vec![codemode_core::namespace::GuestNamespace {
            id: "ns-é".into(),
            global_name: "Ship".into(),
            data: json!({"label": "𝄞 café", "list": null}),
            calls: vec![codemode_core::namespace::GuestNamespaceCall {
                path: "list".into(),
                tool_id: "plugin:demo:demo_shipping_list".into(),
            }],
        }];
        let text = boot_json(&boot);
        let (head, body) = text.split_once('\n').unwrap();
        let head: Value = serde_json::from_str(head).unwrap();
        assert_eq!(head["maxDepth"], 64);
        assert_eq!(head["gated"], json!(["plugin:demo:demo_echo"]));
        assert_eq!(head["conveniences"], json!([["demo_echo", "plugin:demo:demo_echo"]]));
        assert_eq!(serde_json::from_str::<Value>(&slice(body, &head["tools"])).unwrap(), json!([]));
        let files: BTreeMap<String, String> = serde_json::from_str(&slice(body, &head["apiFiles"])).unwrap();
        assert_eq!(files, api_files);
        let tools: Value = serde_json::from_str(&slice(body, &head["mcp"][0]["tools"])).unwrap();
        assert_eq!(tools, json!([{ "name": "über-tool", "alias": "überTool" }]));
        assert_eq!(head["apiList"][0]["bytes"], api_files["mcp/x.d.ts"].len());
        // The per-run namespaces are the last segment, after the catalog's.
        let ns: Value = serde_json::from_str(&slice(body, &head["namespaces"])).unwrap();
        assert_eq!(ns, serde_json::to_value(&boot.namespaces).unwrap());
    }
}
