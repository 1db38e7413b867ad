//! # codemode-bridge
//!
//! The guest↔host protocol of docs/src/engines.md, identical for every engine:
//!
//! - [`PRELUDE`]: JavaScript evaluated in every VM before guest code. It builds the whole guest API
//!   (`ALL_TOOLS`, `tools`, `MCP`, `API`, `namespaces`, `text`, `json`, `yield_control`, `console`) on
//!   one host primitive that returns opaque request ids; promises and their resolvers stay inside the
//!   guest, so a snapshot of guest memory is the complete state of a suspended run.
//! - [`adapter`]: the JSON-safe value adapter (size and depth limits, forbidden keys).
//! - [`host`]: [`BridgeHost`], the host half of the primitive (request ids, limits, output buffer).
//! - [`driver`]: the drive step every engine runs ([`drive`] over the [`GuestVm`] primitives).
//! - [`modules`]: the static guard that rejects `import` / `require` before a cell runs (contract X6);
//!
//! Layering (docs/src/layout.md): depends on `codemode-core` only; engines depend on it. It never names an
//! engine, a tool source, MCP or policy.
#![forbid(unsafe_code)]

pub mod adapter;
pub mod driver;
pub mod host;
pub mod modules;
pub mod nesting;
pub mod shell;
pub(crate) mod tokens;

pub use driver::{GuestVm, VmFault, drive};
pub use host::{BridgeHost, BridgeState, HostCallResult, Outstanding};

use serde::Serialize;

/// The guest prelude. Evaluate it as a classic script; its completion value is
/// `install(host, plainJson?, defineNamespaces?, settlesNatively?, ownFirst?, react?, callPlain?)`
/// (the optional arguments are described at the top of its layer 0, `src/js/prelude/0_builtins.js`).
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

/// SHA-256 of [`PRELUDE`] (lowercase hex), computed by the build script: an engine naming its
/// build by the prelude reads it instead of hashing ~60 KB at every process start.
pub const PRELUDE_SHA256: &str = include_str!(concat!(env!("OUT_DIR"), "/prelude_sha256.txt"));

/// File name used for the cell in stack traces.
pub use codemode_core::positions::CELL_FILENAME;

/// File name used for the prelude in stack traces.
pub const PRELUDE_FILENAME: &str = "<codemode-prelude>";

/// Prefix of every module-guard error message; errors with it fail as `module_access_denied`.
pub const MODULE_DENIED_PREFIX: &str = "module access denied";

/// Globals the prelude installs and the helper names of `tools` (defined in
/// [`codemode_core::guest`], the vocabulary both sides of the bridge share).
pub use codemode_core::guest::{RESERVED_GLOBALS, TOOL_HELPERS};

/// Wraps a cell's source as an async function expression, the script's completion value. The
/// prefix has no newline, so line numbers in errors are the cell's own; it is
/// [`WRAP_PREFIX_COLS`](codemode_core::positions::WRAP_PREFIX_COLS) characters long.
///
/// The expression is a comma expression's operand, not parenthesized: at a `(` QuickJS's parser
/// scans ahead to the matching `)` to tell an arrow function's parameters from an expression, which
/// for a parenthesized wrapper meant tokenizing every cell twice.
pub fn wrap_code(code: &str) -> String {
    let mut s = String::with_capacity(code.len() + 32);
    s.push_str("0, async function(){");
    s.push_str(code);
    s.push_str("\n}");
    s
}

pub use codemode_core::guest::BootData;

/// A seed for a run's `Math.random` (both QuickJS engines give it its own xorshift64* state, seeded
/// for every run: a pre-initialized image or a reused VM would otherwise repeat one sequence). The
/// process's random hasher keys mixed with the time; never zero (xorshift's one fixed point).
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish() | 1
}

/// The boot argument of the prelude for `boot` (the head: see [`BootText`]) of `boot`, with its
/// namespaces. The catalog's bulky parts are not in it: the guest pulls them from
/// [`BootText::source`].
pub fn boot_json(boot: &BootData) -> String {
    BootText::new(boot).with_namespaces(&boot.namespaces).to_string()
}

/// The prelude's three `boot` arguments from a boot text ([`boot_json`],
/// [`BootText::with_namespaces`]): the head (JSON, up to the first newline), the namespace index
/// (the second line: `name len` pairs, see [`BootText::with_namespace_texts`]) and the namespaces'
/// JSON texts that follow it (both empty when there are none). JSON text never holds a raw newline
/// and the index never does either, so the first two newlines end the head and the index. Engines
/// split here (or in the guest's own code) rather than in the prelude, where QuickJS's `indexOf`
/// costs thousands of instructions a run.
pub fn split_boot(boot: &str) -> (&str, &str, &str) {
    let Some((head, rest)) = boot.split_once('\n') else { return (boot, "", "") };
    let (index, texts) = rest.split_once('\n').unwrap_or((rest, ""));
    (head, index, texts)
}

/// `text`'s length in UTF-16 code units, the unit JavaScript strings count in and the boot text's
/// namespace index is written in: its byte length when it is ASCII (JSON text mostly is).
pub fn utf16_len(text: &str) -> usize {
    if text.is_ascii() { text.len() } else { text.encode_utf16().count() }
}

/// The JSON depth limit of a boot text's head when the head is exactly what [`BootText`] writes,
/// `{"maxDepth":N}` (N of one to nine digits, no leading zero). An engine may then pass the prelude's
/// `boot` the number N instead of the head's text, sparing a `JSON.parse` per run; `boot` accepts
/// either. The quickjs-wasi shim recognizes the same form in C (`head_max_depth`); Boa passes the
/// text, so both forms stay exercised.
pub fn head_max_depth(head: &str) -> Option<u32> {
    let digits = head.strip_prefix(r#"{"maxDepth":"#)?.strip_suffix('}')?;
    let well_formed = (1..=9).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if well_formed { digits.parse().ok() } else { None }
}

/// The answer to [`pull_keys::CONVENIENCE`] for the catalog tool `id`: whether the approval policy
/// gates it (`1` or `0`), then the message of a call to it up to the input, as the prelude writes
/// one (`{"id":…,"mode":"value","input":`). The guest takes both from one pull when the cell first
/// reaches `tools.<name>`, instead of asking whether the tool is gated and writing the id as JSON
/// on its first call.
pub fn convenience_answer(id: &str, gated: bool) -> String {
    format!(r#"{}{{"id":{},"mode":"value","input":"#, if gated { '1' } else { '0' }, json_string(id))
}

/// `s` as a JSON string literal (quotes and escapes), as the heads of call messages carry names.
fn json_string(s: &str) -> String {
    // Serializing a string cannot fail; an empty result would only make the guest's call fail.
    serde_json::to_string(s).unwrap_or_default()
}

/// Keys of the bridge's `pull` (the prelude's `host("pull", key)`), answered by [`BootText::source`].
pub mod pull_keys {
    /// `ALL_TOOLS`, as JSON.
    pub const ALL_TOOLS: &str = "tools";
    /// Prefix: `conv:<name>` is what the convenience function `tools.<name>` needs for its calls
    /// (plain text): `1` when the approval policy gates its catalog tool, else `0`, then the call
    /// message up to the input, `{"id":<catalog id as JSON>,"mode":"value","input":` (see
    /// [`convenience_answer`](super::convenience_answer)).
    pub const CONVENIENCE: &str = "conv:";
    /// Every `[name, id]` convenience pair, as JSON (when the cell enumerates `tools`).
    pub const CONVENIENCES: &str = "convs";
    /// `API.list()` entries (`[{path, bytes}]`), as JSON.
    pub const API_LIST: &str = "apiList";
    /// Prefix: `api:<path>` is the content of that `API` file (plain text).
    pub const API_FILE: &str = "api:";
    /// Prefix: `mcp:<server>` is that MCP server's tool list (`[{name, alias?, explicit?}]`), as JSON.
    pub const MCP_TOOLS: &str = "mcp:";
    /// Prefix: `mcpserver:<name or alias>` is that server's entry (`{name, alias, resources,
    /// prompts}`), as JSON.
    pub const MCP_SERVER: &str = "mcpserver:";
    /// Every server entry, as a JSON list (when the cell enumerates `MCP`).
    pub const MCP_SERVERS: &str = "mcpservers";
    /// Prefix: `gated:<id>` is `"1"` when the approval policy gates that catalog id.
    pub const GATED: &str = "gated:";
    /// Prefix: `mcptool:<len>:<server><name>` is the tool of MCP server `<server>` (its exact name,
    /// `<len>` UTF-16 code units long, in decimal: names may hold any character) that `<name>`
    /// reaches — its exact name, else its alias — as JSON: its entry (`name`, `alias`,
    /// `explicit`), `gated` (the approval policy gates it) and `head`, the call message up to the
    /// input (`{"server":…,"tool":…,"input":`). None when no tool is named so.
    pub const MCP_TOOL: &str = "mcptool:";
}

/// What the guest boots with, built once per catalog and shared by every run over it.
///
/// - The **head** is the prelude's `boot` argument: small JSON whose size does not grow with the
///   catalog (`maxDepth`), plus the run's namespaces when it has some ([`with_namespaces`](Self::with_namespaces):
///   scopes are per run, contract §10 L4).
/// - The **source** holds everything that grows with the catalog (`ALL_TOOLS`, the convenience
///   functions, the `API` files, the MCP servers and their tools, the gated ids); the guest pulls an entry
///   when the cell first touches it (keys: [`pull_keys`]). A trivial cell therefore costs the same
///   over 6 tools or 1,000, and a cell calling `tools.x` pays for one lookup, not for the catalog.
#[derive(Debug, Clone)]
pub struct BootText {
    head: std::sync::Arc<str>,
    source: std::sync::Arc<CatalogSource>,
    /// The last boot text [`with_namespace_texts`](Self::with_namespace_texts) wrote, with the
    /// names and texts it was written from: the next run with equal namespaces (the usual case: a
    /// registry hands runs with equal scopes one serialization) gets the same text again without
    /// writing its index (each text checked for non-ASCII, each length formatted) and copying
    /// everything once more. Shared by this value's clones, which have the same head.
    last_with_namespaces: std::sync::Arc<std::sync::Mutex<Option<LastBoot>>>,
}

/// What [`BootText::last_with_namespaces`] keeps.
#[derive(Debug)]
struct LastBoot {
    namespaces: Vec<(String, String)>,
    text: std::sync::Arc<str>,
}

/// The catalog data behind [`BootText::source`].
#[derive(Debug)]
struct CatalogSource {
    all_tools: std::sync::Arc<str>,
    conveniences: std::collections::HashMap<String, std::sync::Arc<str>>,
    convenience_list: std::sync::Arc<str>,
    api_list: std::sync::Arc<str>,
    api_files: std::collections::HashMap<String, std::sync::Arc<str>>,
    mcp_tools: std::collections::HashMap<String, std::sync::Arc<str>>,
    mcp_servers: std::collections::HashMap<String, std::sync::Arc<str>>,
    mcp_server_list: std::sync::Arc<str>,
    /// Each MCP server's tools by the names that reach them, by the server's exact name.
    mcp_members: std::collections::HashMap<String, McpMembers>,
    gated: std::collections::HashSet<String>,
}

/// The byte offset in `text` after its first `units` UTF-16 code units, or `None` when `text` is
/// shorter or that point falls inside a character.
fn utf16_offset(text: &str, units: usize) -> Option<usize> {
    let mut seen = 0;
    for (at, c) in text.char_indices() {
        if seen >= units {
            return (seen == units).then_some(at);
        }
        seen += c.len_utf16();
    }
    (seen == units).then_some(text.len())
}

/// One MCP server's tools, and which of them each exact name and alias reaches (an exact name
/// wins over another tool's alias).
#[derive(Debug)]
struct McpMembers {
    tools: Vec<codemode_core::guest::McpToolView>,
    by_key: std::collections::HashMap<String, usize>,
}

impl McpMembers {
    fn new(tools: &[codemode_core::guest::McpToolView]) -> Self {
        let mut by_key = std::collections::HashMap::new();
        for (i, tool) in tools.iter().enumerate() {
            by_key.entry(tool.name.clone()).or_insert(i);
        }
        for (i, tool) in tools.iter().enumerate() {
            if let Some(alias) = &tool.alias {
                by_key.entry(alias.clone()).or_insert(i);
            }
        }
        McpMembers { tools: tools.to_vec(), by_key }
    }
}

impl CatalogSource {
    /// The answer to [`pull_keys::MCP_TOOL`] for `rest` (`<len>:<server><name>`).
    fn mcp_member(&self, rest: &str) -> Option<std::sync::Arc<str>> {
        let (len, rest) = rest.split_once(':')?;
        let len: usize = len.parse().ok()?;
        let at = utf16_offset(rest, len)?;
        let (server, key) = rest.split_at(at);
        let members = self.mcp_members.get(server)?;
        let tool = members.by_key.get(key).and_then(|&i| members.tools.get(i))?;
        let head = format!(r#"{{"server":{},"tool":{},"input":"#, json_string(server), json_string(&tool.name));
        let gated = self.gated.contains(&format!("mcp:{server}:{}", tool.name));
        let answer = serde_json::json!({
            "name": tool.name,
            "alias": tool.alias,
            "explicit": tool.explicit,
            "gated": gated,
            "head": head,
        });
        Some(answer.to_string().into())
    }
}

impl codemode_core::engine::BootSource for CatalogSource {
    fn pull(&self, key: &str) -> Option<std::sync::Arc<str>> {
        use pull_keys::*;
        if let Some(name) = key.strip_prefix(CONVENIENCE) {
            return self.conveniences.get(name).cloned();
        }
        if let Some(path) = key.strip_prefix(API_FILE) {
            return self.api_files.get(path).cloned();
        }
        if let Some(server) = key.strip_prefix(MCP_TOOLS) {
            return self.mcp_tools.get(server).cloned();
        }
        if let Some(server) = key.strip_prefix(MCP_SERVER) {
            return self.mcp_servers.get(server).cloned();
        }
        if let Some(rest) = key.strip_prefix(MCP_TOOL) {
            return self.mcp_member(rest);
        }
        if let Some(id) = key.strip_prefix(GATED) {
            return self.gated.contains(id).then(|| std::sync::Arc::from("1"));
        }
        match key {
            ALL_TOOLS => Some(self.all_tools.clone()),
            CONVENIENCES => Some(self.convenience_list.clone()),
            API_LIST => Some(self.api_list.clone()),
            MCP_SERVERS => Some(self.mcp_server_list.clone()),
            _ => None,
        }
    }
}

impl BootText {
    /// Builds the head and the source of `boot` (its `namespaces` are ignored; pass them to
    /// [`with_namespaces`](Self::with_namespaces)).
    pub fn new(boot: &BootData) -> Self {
        let text = |s: &str| -> std::sync::Arc<str> { std::sync::Arc::from(s) };
        let servers: Vec<serde_json::Value> = boot
            .mcp
            .iter()
            .map(|server| {
                let mut entry = serde_json::json!({
                    "name": server.name,
                    "alias": server.alias,
                    "resources": server.resources,
                    "prompts": server.prompts,
                });
                if let (Some(why), Some(map)) = (&server.down, entry.as_object_mut()) {
                    map.insert("down".into(), serde_json::Value::String(why.clone()));
                }
                entry
            })
            .collect();
        let mut mcp_servers = std::collections::HashMap::new();
        for (server, entry) in boot.mcp.iter().zip(&servers) {
            let entry: std::sync::Arc<str> = entry.to_string().into();
            if let Some(alias) = &server.alias {
                mcp_servers.insert(alias.clone(), entry.clone());
            }
            // The exact name wins over another server's alias.
            mcp_servers.insert(server.name.clone(), entry);
        }
        let head = serde_json::json!({ "maxDepth": boot.max_depth }).to_string();
        let api_list: Vec<serde_json::Value> =
            boot.api_files.iter().map(|(p, c)| serde_json::json!({ "path": p, "bytes": c.len() })).collect();
        let gated: std::collections::HashSet<String> = boot.gated.iter().cloned().collect();
        let source = CatalogSource {
            all_tools: json_text(&boot.tools).into(),
            conveniences: boot
                .conveniences
                .iter()
                .map(|(name, id)| (name.clone(), text(&convenience_answer(id, gated.contains(id)))))
                .collect(),
            convenience_list: json_text(&boot.conveniences).into(),
            api_list: json_text(&api_list).into(),
            api_files: boot.api_files.iter().map(|(p, c)| (p.clone(), text(c))).collect(),
            mcp_tools: boot.mcp.iter().map(|s| (s.name.clone(), json_text(&s.tools).into())).collect(),
            mcp_servers,
            mcp_server_list: json_text(&servers).into(),
            mcp_members: boot.mcp.iter().map(|s| (s.name.clone(), McpMembers::new(&s.tools))).collect(),
            gated,
        };
        BootText { head: head.into(), source: std::sync::Arc::new(source), last_with_namespaces: Default::default() }
    }

    /// The catalog data the guest pulls (pass it as
    /// [`DriveInput::boot_source`](codemode_core::engine::DriveInput::boot_source) on every step).
    pub fn source(&self) -> std::sync::Arc<dyn codemode_core::engine::BootSource> {
        self.source.clone()
    }

    /// The boot argument of a run whose visible namespaces are `namespaces`: the cached head when
    /// there are none. Otherwise the head is followed by a newline, the namespace index, another
    /// newline and each namespace's JSON text (the
    /// [`GuestNamespace`](codemode_core::namespace::GuestNamespace)), one after another. The index
    /// is one line of `globalName len` pairs, all separated by single spaces (`Shipping 412 Bench
    /// 97`): `len` is the length of that namespace's text in UTF-16 code units, in decimal. The
    /// guest reads the index without `JSON.parse` (both QuickJS engines natively), and slices out
    /// and parses a namespace when the cell first reads it: parsing is most of what a namespace
    /// costs a run that never touches it.
    pub fn with_namespaces(&self, namespaces: &[codemode_core::namespace::GuestNamespace]) -> std::sync::Arc<str> {
        let texts: Vec<String> = namespaces.iter().map(json_text).collect();
        self.with_namespace_texts(
            namespaces.iter().map(|ns| ns.global_name.as_str()).zip(texts.iter().map(String::as_str)),
        )
    }

    /// [`with_namespaces`](Self::with_namespaces) from each namespace's global name and its JSON
    /// text already written (see
    /// [`RunNamespaces::guest_texts`](codemode_core::namespace::RunNamespaces::guest_texts)): the
    /// same boot text, without serializing the scopes again. A global name is an identifier (the
    /// registry checks); one that is empty or holds whitespace, which the index could not carry, is
    /// written empty: the guest skips it, and the namespaces after it keep their places. Names and
    /// texts equal to the last call's (on this value or a clone) return that call's text, shared.
    pub fn with_namespace_texts<'a>(
        &self,
        namespaces: impl ExactSizeIterator<Item = (&'a str, &'a str)> + Clone,
    ) -> std::sync::Arc<str> {
        use std::fmt::Write as _;
        if namespaces.len() == 0 {
            return self.head.clone();
        }
        let last = || self.last_with_namespaces.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(last) = last().as_ref()
            && last.namespaces.len() == namespaces.len()
            && last.namespaces.iter().zip(namespaces.clone()).all(|((n, t), (name, text))| n == name && t == text)
        {
            return last.text.clone();
        }
        // The guest slices by UTF-16 code units (utf16_len).
        let mut out = String::with_capacity(
            self.head.len() + 2 + namespaces.clone().map(|(name, text)| name.len() + 12 + text.len()).sum::<usize>(),
        );
        out.push_str(&self.head);
        out.push('\n');
        for (i, (name, text)) in namespaces.clone().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            if !name.chars().any(char::is_whitespace) {
                out.push_str(name);
            }
            // Writing to a String cannot fail.
            let _ = write!(out, " {}", utf16_len(text));
        }
        out.push('\n');
        for (_, text) in namespaces.clone() {
            out.push_str(text);
        }
        let text: std::sync::Arc<str> = out.into();
        let namespaces = namespaces.map(|(name, text)| (name.to_owned(), text.to_owned())).collect();
        *last() = Some(LastBoot { namespaces, text: text.clone() });
        text
    }
}

/// JSON text of a value (serializing plain data cannot fail; `null` if it somehow does).
fn json_text<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".to_string())
}

#[cfg(test)]
mod tests;
