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
pub mod workers;

pub use driver::{GuestVm, VmFault, drive};
pub use host::{BridgeHost, BridgeState, HostCallResult};

use codemode_core::catalog::ToolCatalogEntry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The guest prelude. Evaluate it as a classic script; its completion value is `install(host)`.
pub const PRELUDE: &str = include_str!("js/prelude.js");

/// File name used for the cell in stack traces.
pub const CELL_FILENAME: &str = "<cell>";

/// File name used for the prelude in stack traces.
pub const PRELUDE_FILENAME: &str = "<codemode-prelude>";

/// Prefix of every module-guard error message; errors with it fail as `module_access_denied`.
pub const MODULE_DENIED_PREFIX: &str = "module access denied";

/// Globals the prelude installs as non-writable, non-configurable properties (SPEC S5, B10).
pub const RESERVED_GLOBALS: [&str; 10] =
    ["tools", "ALL_TOOLS", "MCP", "API", "namespaces", "text", "json", "yield_control", "console", "require"];

/// Helper names on `tools` that a convenience function may never shadow (SPEC K3).
pub const TOOL_HELPERS: [&str; 4] = ["search", "describe", "call", "callValue"];

/// Wraps a cell's source as an async function expression. The prefix has no newline, so line numbers
/// in errors are the cell's own.
pub fn wrap_code(code: &str) -> String {
    let mut s = String::with_capacity(code.len() + 32);
    s.push_str("(async function () {");
    s.push_str(code);
    s.push_str("\n})");
    s
}

/// Per-run data the prelude's `boot` installs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootData {
    /// `ALL_TOOLS`: compact entries of every guest-visible catalog tool.
    pub tools: Vec<ToolCatalogEntry>,
    /// `(safeName, catalogId)` pairs for `tools.<safeName>(input)` convenience functions; the host
    /// includes only unambiguous names that shadow no helper (SPEC K1–K5).
    pub conveniences: Vec<(String, String)>,
    /// Deepest nesting the guest-side adapter accepts.
    pub max_depth: u32,
    /// Virtual files served by `API.list` / `API.read` (SPEC §9), path → content.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub api_files: BTreeMap<String, String>,
    /// MCP servers for the `MCP` namespace: `{name, alias?, tools: [{name, alias?}], resources,
    /// prompts}` each (see `codemode_catalog::mcp_api`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<serde_json::Value>,
}
