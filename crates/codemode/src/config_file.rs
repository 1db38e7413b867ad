//! The codemode configuration file: JSON5, in the `openclaw.json` shape (contract §3, §22).
//!
//! ```json5
//! {
//!   tools: {
//!     codeMode: { enabled: true, timeoutMs: 10000 },
//!   },
//! }
//! ```
//!
//! `mcpServers` (upstream MCP servers, the Claude Desktop / Cursor format) is kept for
//! `codemode-mcp`, which parses it.
//!
//! Besides `tools.codeMode`, the tool policy of contract §22 is read: `tools.profile`, `tools.allow`,
//! `tools.deny`, `tools.byProvider` and `agents.list[].tools.*` (see
//! [`codemode_catalog::policy`]). `tools.sandbox.tools`, `tools.elevated` and
//! `agents.list[].tools.elevated` are the sandbox tool policy, enforced on nested calls of runs whose
//! caller is sandboxed ([`codemode_catalog::sandbox`]). `tools.loopDetection` and
//! `agents.list[].tools.loopDetection` are loop detection on nested calls
//! ([`codemode_catalog::loops`]). The top-level `approvals` is the approval
//! policy ([`codemode_catalog::approval`]): which nested calls wait for a human. The top-level
//! `namespaces` declares namespaces over one MCP server's or one plugin's tools
//! ([`codemode_namespaces::declarative`]), checked here with the same rules as registered ones.
//!
//! Unknown keys inside codemode's own sections are rejected with an error naming their path, so a
//! typo never silently changes behaviour. (Agent entries may carry other host fields; only their
//! `tools` object is checked.) Other top-level keys are another program's settings — a Claude
//! Desktop, Cursor or Claude Code file holds `mcpServers` next to keys of its own — and are ignored
//! and listed in [`ConfigFile::ignored_keys`] (the CLI warns once), except a key one edit away from
//! one of codemode's (`tool`, `approval`), which is a typo and an error.

use codemode_catalog::approval::ApprovalPolicy;
use codemode_catalog::policy::ToolPolicy;
use codemode_catalog::sandbox::SandboxPolicy;
pub use codemode_core::config::ConfigError;
use codemode_core::config::{CodeModeConfig, parse_json5, type_name};
use serde_json::Value;
use std::path::Path;

/// Keys accepted at the top level.
pub const TOP_LEVEL_KEYS: [&str; 10] = [
    "tools",
    "agents",
    "mcpServers",
    "approvals",
    "namespaces",
    "snapshotStore",
    "observeResultTypes",
    "clients",
    "runSigning",
    "console",
];
/// Keys accepted under `runSigning`.
pub const RUN_SIGNING_KEYS: [&str; 3] = ["keyEnv", "previousKeysEnv", "acceptUnsignedUntil"];

/// `runSigning`: where the key that signs stored and exported runs comes from, and the upgrade
/// window for runs written before runs were signed (`docs/src/security.md`, "Signed runs"). The
/// keys themselves are never in the file: it names environment variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSigningConfig {
    /// The variable holding the key (default `CODEMODE_RUN_SIGNING_KEY`; at least 32 bytes).
    pub key_env: String,
    /// The variable holding previous keys, comma-separated, that still verify after a rotation
    /// (default `CODEMODE_RUN_SIGNING_PREVIOUS_KEYS`).
    pub previous_keys_env: String,
    /// Until when (Unix ms) runs without a signature are accepted; `None`: never.
    pub accept_unsigned_until_ms: Option<u64>,
}

impl Default for RunSigningConfig {
    fn default() -> Self {
        RunSigningConfig {
            key_env: codemode_snapshot::signing::KEY_ENV.into(),
            previous_keys_env: codemode_snapshot::signing::PREVIOUS_KEYS_ENV.into(),
            accept_unsigned_until_ms: None,
        }
    }
}

impl RunSigningConfig {
    fn from_value(v: &Value) -> Result<Self, ConfigError> {
        let obj = expect_object(v, "runSigning")?;
        check_keys(obj, &RUN_SIGNING_KEYS, "runSigning")?;
        let mut out = RunSigningConfig::default();
        for (key, slot) in [("keyEnv", &mut out.key_env), ("previousKeysEnv", &mut out.previous_keys_env)] {
            match obj.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(name)) if !name.is_empty() && !name.contains('=') => *slot = name.clone(),
                Some(other) => {
                    return Err(ConfigError::new(
                        format!("runSigning.{key}"),
                        format!("expected the name of an environment variable, got {}", type_name(other)),
                    ));
                }
            }
        }
        out.accept_unsigned_until_ms = match obj.get("acceptUnsignedUntil") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => Some(parse_utc(t).ok_or_else(|| {
                ConfigError::new(
                    "runSigning.acceptUnsignedUntil",
                    format!("expected a UTC time like \"2027-01-31T00:00:00Z\", got \"{t}\""),
                )
            })?),
            Some(other) => {
                return Err(ConfigError::new(
                    "runSigning.acceptUnsignedUntil",
                    format!("expected a UTC time like \"2027-01-31T00:00:00Z\", got {}", type_name(other)),
                ));
            }
        };
        Ok(out)
    }

    /// The configured keys from the environment, with the upgrade window; `None` when the key
    /// variable is unset (the store's or the process's own key is used then). A key shorter than
    /// 32 bytes is an error naming the variable.
    pub fn keys(&self) -> Result<Option<codemode_snapshot::RunKeys>, ConfigError> {
        codemode_snapshot::RunKeys::from_env(&self.key_env, &self.previous_keys_env)
            .map(|k| k.map(|k| k.accept_unsigned_until(self.accept_unsigned_until_ms)))
            .map_err(|e| ConfigError::new("runSigning", e.to_string()))
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ` (UTC, optional fraction of a second) as Unix ms.
fn parse_utc(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<u64>().ok();
    let (y, mo, d, h, mi, sec) = (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    let rest = &text[19..];
    let rest = match rest.strip_prefix('.') {
        Some(frac) => frac.trim_start_matches(|c: char| c.is_ascii_digit()),
        None => rest,
    };
    if rest != "Z"
        || !(1970..=9999).contains(&y)
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
        || h > 23
        || mi > 59
        || sec > 60
    {
        return None;
    }
    // Days from the civil date (proleptic Gregorian), after Howard Hinnant's algorithm.
    let (y, m) = if mo <= 2 { (y - 1, mo + 9) } else { (y, mo - 3) };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(((days * 86_400) + h * 3_600 + mi * 60 + sec) * 1_000)
}
/// Keys accepted under `snapshotStore`.
pub const SNAPSHOT_STORE_KEYS: [&str; 5] = ["kind", "dir", "url", "keyPrefix", "leaseMs"];

/// Where suspended runs are kept (top-level `snapshotStore`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotStoreConfig {
    /// `{ kind: "memory" }`: in the process (the default of `codemode serve`).
    Memory,
    /// `{ kind: "directory", dir }`: files in `dir`, shared by processes of one machine.
    Directory {
        /// The directory.
        dir: std::path::PathBuf,
    },
    /// `{ kind: "redis", url, keyPrefix, leaseMs }`: Redis ≥ 7 or Valkey, shared by a fleet of
    /// replicas. `url` may be left out and given as `CODEMODE_REDIS_URL`.
    Redis {
        /// `redis://host:port[/db]`; `None`: from `CODEMODE_REDIS_URL`.
        url: Option<String>,
        /// Prefix of every key (default `codemode:`).
        key_prefix: Option<String>,
        /// Lease of a checkout and of a replica's liveness, ms (default 10,000; at least 300).
        lease_ms: Option<u64>,
    },
}

impl SnapshotStoreConfig {
    fn from_value(v: &Value) -> Result<Self, ConfigError> {
        let obj = expect_object(v, "snapshotStore")?;
        check_keys(obj, &SNAPSHOT_STORE_KEYS, "snapshotStore")?;
        let text = |key: &str| -> Result<Option<String>, ConfigError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
                Some(other) => Err(ConfigError::new(
                    format!("snapshotStore.{key}"),
                    format!("expected a non-empty string, got {}", type_name(other)),
                )),
            }
        };
        let kind = text("kind")?.ok_or_else(|| {
            ConfigError::new("snapshotStore.kind", "missing: one of \"memory\", \"directory\", \"redis\"")
        })?;
        let allowed: &[&str] = match kind.as_str() {
            "memory" => &["kind"],
            "directory" => &["kind", "dir"],
            "redis" => &["kind", "url", "keyPrefix", "leaseMs"],
            other => {
                return Err(ConfigError::new(
                    "snapshotStore.kind",
                    format!("unknown store `{other}` (one of \"memory\", \"directory\", \"redis\")"),
                ));
            }
        };
        if let Some(k) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(ConfigError::new(
                format!("snapshotStore.{k}"),
                format!("`{k}` does not apply to a {kind} store (its keys: {})", allowed.join(", ")),
            ));
        }
        Ok(match kind.as_str() {
            "memory" => SnapshotStoreConfig::Memory,
            "directory" => SnapshotStoreConfig::Directory {
                dir: text("dir")?
                    .ok_or_else(|| {
                        ConfigError::new("snapshotStore.dir", "missing: the directory of a directory store")
                    })?
                    .into(),
            },
            _ => {
                let lease_ms = match obj.get("leaseMs") {
                    None | Some(Value::Null) => None,
                    Some(v) => match v.as_u64() {
                        Some(n) if (300..=3_600_000).contains(&n) => Some(n),
                        _ => {
                            return Err(ConfigError::new(
                                "snapshotStore.leaseMs",
                                "expected milliseconds from 300 to 3600000",
                            ));
                        }
                    },
                };
                SnapshotStoreConfig::Redis { url: text("url")?, key_prefix: text("keyPrefix")?, lease_ms }
            }
        })
    }
}
/// Keys accepted under `tools`.
pub const TOOLS_KEYS: [&str; 8] =
    ["codeMode", "profile", "allow", "deny", "byProvider", "loopDetection", "sandbox", "elevated"];
/// Keys accepted under `agents`.
pub const AGENTS_KEYS: [&str; 1] = ["list"];
/// Keys accepted under `agents.list[].tools`.
pub const AGENT_TOOLS_KEYS: [&str; 6] = ["profile", "allow", "deny", "byProvider", "loopDetection", "elevated"];

/// A parsed configuration file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigFile {
    /// `tools.codeMode`, after defaults and clamps.
    pub code_mode: CodeModeConfig,
    /// Whether `tools.codeMode` was present at all.
    pub code_mode_present: bool,
    /// The tool policy (contract §22).
    pub policy: ToolPolicy,
    /// The approval policy (top-level `approvals`): which nested calls wait for a human.
    pub approvals: ApprovalPolicy,
    /// What sandboxed runs may call (`tools.sandbox.tools`, `tools.elevated`, `agents.list[].tools.elevated`).
    pub sandbox: SandboxPolicy,
    /// Loop detection (`tools.loopDetection`, `agents.list[].tools.loopDetection`).
    pub loops: codemode_catalog::loops::LoopPolicy,
    /// `mcpServers`, unparsed (an object; `codemode-mcp` reads it).
    pub mcp_servers: Option<Value>,
    /// `namespaces`, already checked (see [`ConfigFile::namespace_registrations`]).
    pub namespaces: Option<Value>,
    /// `clients`, unparsed (an object; `codemode-mcp` reads it: which MCP client's runs are for
    /// which agent).
    pub clients: Option<Value>,
    /// `console`, unparsed (an object; `codemode-mcp` reads it: the operators of the console that
    /// `codemode serve --console` serves).
    pub console: Option<Value>,
    /// Top-level keys that belong to another program (ignored), in file order.
    pub ignored_keys: Vec<String>,
    /// `snapshotStore`: where suspended runs are kept (`None`: the command's default).
    pub snapshot_store: Option<SnapshotStoreConfig>,
    /// `observeResultTypes`: learn the result types of tools without an output schema from the
    /// results runs see; `None` (absent): on.
    pub observe_result_types: Option<bool>,
    /// `runSigning`: the key of signed runs and the upgrade window.
    pub run_signing: RunSigningConfig,
}

/// Edit distance of two short keys (ASCII case ignored), capped at 2.
fn near(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) =
        (a.to_ascii_lowercase().chars().collect(), b.to_ascii_lowercase().chars().collect());
    if a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()] <= 1
}

fn check_keys(obj: &serde_json::Map<String, Value>, allowed: &[&str], path: &str) -> Result<(), ConfigError> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => {
            let at = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            Err(ConfigError::new(at, format!("unknown key `{k}` (known keys: {})", allowed.join(", "))))
        }
    }
}

fn expect_object<'a>(v: &'a Value, path: &str) -> Result<&'a serde_json::Map<String, Value>, ConfigError> {
    v.as_object().ok_or_else(|| ConfigError::new(path, format!("expected an object, got {}", type_name(v))))
}

impl ConfigFile {
    /// Parses JSON5 text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let doc = parse_json5(text)?;
        let Value::Object(root) = &doc else {
            return Err(ConfigError::new("(root)", format!("expected an object, got {}", type_name(&doc))));
        };
        let mut out = ConfigFile::default();
        for k in root.keys().filter(|k| !TOP_LEVEL_KEYS.contains(&k.as_str())) {
            if let Some(meant) = TOP_LEVEL_KEYS.iter().find(|own| near(k, own)) {
                return Err(ConfigError::new(
                    k.clone(),
                    format!(
                        "unknown key `{k}`: did you mean `{meant}`? (codemode's keys: {})",
                        TOP_LEVEL_KEYS.join(", ")
                    ),
                ));
            }
            out.ignored_keys.push(k.clone());
        }
        match root.get("tools") {
            None | Some(Value::Null) => {}
            Some(Value::Object(tools)) => {
                check_keys(tools, &TOOLS_KEYS, "tools")?;
                out.code_mode_present = tools.contains_key("codeMode");
                out.code_mode = CodeModeConfig::from_value(tools.get("codeMode"), "tools.codeMode")?;
                if let Some(sb) = tools.get("sandbox") {
                    expect_object(sb, "tools.sandbox")?;
                }
            }
            Some(other) => {
                return Err(ConfigError::new("tools", format!("expected an object, got {}", type_name(other))));
            }
        }
        if let Some(agents) = root.get("agents") {
            let obj = expect_object(agents, "agents")?;
            check_keys(obj, &AGENTS_KEYS, "agents")?;
            for (i, agent) in obj.get("list").and_then(Value::as_array).into_iter().flatten().enumerate() {
                if let Some(tools) = agent.get("tools") {
                    let path = format!("agents.list[{i}].tools");
                    check_keys(expect_object(tools, &path)?, &AGENT_TOOLS_KEYS, &path)?;
                }
            }
        }
        if let Some(servers) = root.get("mcpServers") {
            expect_object(servers, "mcpServers")?;
            out.mcp_servers = Some(servers.clone());
        }
        if let Some(clients) = root.get("clients") {
            expect_object(clients, "clients")?;
            out.clients = Some(clients.clone());
        }
        if let Some(console) = root.get("console").filter(|v| !v.is_null()) {
            expect_object(console, "console")?;
            out.console = Some(console.clone());
        }
        if let Some(ns) = root.get("namespaces") {
            codemode_namespaces::declarative::from_config(ns, "namespaces")?;
            out.namespaces = Some(ns.clone());
        }
        if let Some(v) = root.get("observeResultTypes") {
            out.observe_result_types = Some(v.as_bool().ok_or_else(|| {
                ConfigError::new("observeResultTypes", format!("expected a boolean, got {}", type_name(v)))
            })?);
        }
        if let Some(signing) = root.get("runSigning").filter(|v| !v.is_null()) {
            out.run_signing = RunSigningConfig::from_value(signing)?;
        }
        if let Some(store) = root.get("snapshotStore").filter(|v| !v.is_null()) {
            out.snapshot_store = Some(SnapshotStoreConfig::from_value(store)?);
        }
        out.policy = ToolPolicy::from_document(&doc)?;
        out.approvals = ApprovalPolicy::from_document(&doc)?;
        out.sandbox = SandboxPolicy::from_document(&doc)?;
        out.loops = codemode_catalog::loops::LoopPolicy::from_document(&doc)?;
        Ok(out)
    }

    /// The namespaces the file declares, with their owners, ready to register.
    pub fn namespace_registrations(
        &self,
    ) -> Result<Vec<(codemode_core::namespace::NamespaceOwner, codemode_namespaces::NamespaceRegistration)>, ConfigError>
    {
        match &self.namespaces {
            None => Ok(Vec::new()),
            Some(v) => codemode_namespaces::declarative::from_config(v, "namespaces"),
        }
    }

    /// Registers the file's namespaces into `registry`; an id or global name clash is an error
    /// naming `namespaces`.
    pub fn register_namespaces(&self, registry: &codemode_namespaces::Namespaces) -> Result<(), ConfigError> {
        for (owner, reg) in self.namespace_registrations()? {
            registry.register(owner, reg).map_err(|e| ConfigError::new("namespaces", e.to_string()))?;
        }
        Ok(())
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(path.display().to_string(), format!("cannot read config file: {e}")))?;
        Self::parse(&text).map_err(|e| ConfigError::new(format!("{}: {}", path.display(), e.path), e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `snapshotStore` selects the store; bad kinds, stray keys and short leases are
    /// errors naming their path.
    #[test]
    fn run_signing_section_names_variables_and_an_upgrade_window() {
        let f =
            ConfigFile::parse(r#"{ runSigning: { keyEnv: "TEAM_KEY", acceptUnsignedUntil: "2027-01-31T12:30:00Z" } }"#)
                .unwrap();
        assert_eq!(f.run_signing.key_env, "TEAM_KEY");
        assert_eq!(f.run_signing.previous_keys_env, codemode_snapshot::signing::PREVIOUS_KEYS_ENV);
        // 2027-01-31T12:30:00Z, as `date -u -d 2027-01-31T12:30:00Z +%s` says.
        assert_eq!(f.run_signing.accept_unsigned_until_ms, Some(1_801_398_600_000));
        assert_eq!(parse_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_utc("2000-03-01T00:00:00.250Z"), Some(951_868_800_000));
        for bad in [
            r#"{ runSigning: { acceptUnsignedUntil: "tomorrow" } }"#,
            r#"{ runSigning: { acceptUnsignedUntil: "2027-01-31T12:30:00+02:00" } }"#,
            r#"{ runSigning: { acceptUnsignedUntil: 5 } }"#,
            r#"{ runSigning: { key: "literal keys do not belong in files" } }"#,
            r#"{ runSigning: { keyEnv: "" } }"#,
        ] {
            assert!(ConfigFile::parse(bad).unwrap_err().path.starts_with("runSigning"), "{bad}");
        }
        assert_eq!(ConfigFile::parse("{}").unwrap().run_signing, RunSigningConfig::default());
    }

    #[test]
    fn snapshot_store_section() {
        let f = ConfigFile::parse(
            "{ snapshotStore: { kind: 'redis', url: 'redis://127.0.0.1:6379', keyPrefix: 'team:', leaseMs: 2000 } }",
        )
        .unwrap();
        assert_eq!(
            f.snapshot_store,
            Some(SnapshotStoreConfig::Redis {
                url: Some("redis://127.0.0.1:6379".into()),
                key_prefix: Some("team:".into()),
                lease_ms: Some(2000)
            })
        );
        let f = ConfigFile::parse("{ snapshotStore: { kind: 'directory', dir: '/tmp/runs' } }").unwrap();
        assert_eq!(f.snapshot_store, Some(SnapshotStoreConfig::Directory { dir: "/tmp/runs".into() }));
        assert_eq!(ConfigFile::parse("{}").unwrap().snapshot_store, None);
        for (doc, path) in [
            ("{ snapshotStore: { kind: 'postgres' } }", "snapshotStore.kind"),
            ("{ snapshotStore: {} }", "snapshotStore.kind"),
            ("{ snapshotStore: { kind: 'memory', url: 'x' } }", "snapshotStore.url"),
            ("{ snapshotStore: { kind: 'redis', leaseMs: 10 } }", "snapshotStore.leaseMs"),
            ("{ snapshotStore: { kind: 'redis', ttl: 1 } }", "snapshotStore.ttl"),
            ("{ snapshotStore: { kind: 'directory' } }", "snapshotStore.dir"),
            ("{ snapshotStore: 'redis' }", "snapshotStore"),
        ] {
            let e = ConfigFile::parse(doc).unwrap_err();
            assert_eq!(e.path, path, "{doc}: {e}");
        }
    }

    #[test]
    fn parses_and_rejects_unknown_keys() {
        let f = ConfigFile::parse("{ tools: { codeMode: { enabled: true, maxPendingToolCalls: 4 } } }").unwrap();
        assert!(f.code_mode.enabled && f.code_mode_present);
        assert_eq!(f.code_mode.max_pending_tool_calls, 4);
        let f = ConfigFile::parse("{}").unwrap();
        assert!(!f.code_mode.enabled && !f.code_mode_present);
        assert_eq!(ConfigFile::parse("{ tool: {} }").unwrap_err().path, "tool");
        assert_eq!(ConfigFile::parse("{ MCPServers: {} }").unwrap_err().path, "MCPServers");
        assert_eq!(ConfigFile::parse("{ approval: {} }").unwrap_err().path, "approval");
        assert_eq!(ConfigFile::parse("{ tools: { codemode: true } }").unwrap_err().path, "tools.codemode");
        assert_eq!(
            ConfigFile::parse("{ tools: { codeMode: { enabled: 1 } } }").unwrap_err().path,
            "tools.codeMode.enabled"
        );
        assert_eq!(ConfigFile::parse("[]").unwrap_err().path, "(root)");
    }

    /// The files other MCP clients keep parse as they are; their own keys are listed
    /// and ignored, codemode's keys stay strict.
    #[test]
    fn other_clients_files_parse_as_they_are() {
        let claude_desktop = r#"{ "mcpServers": { "fs": { "command": "npx", "args": ["-y", "server-filesystem", "/tmp"] } },
                                  "globalShortcut": "Ctrl+Space", "preferences": { "menuBarEnabled": false } }"#;
        let f = ConfigFile::parse(claude_desktop).unwrap();
        assert_eq!(f.ignored_keys, ["globalShortcut", "preferences"]);
        assert!(f.mcp_servers.is_some() && !f.code_mode_present);
        let claude_code = r#"{ "numStartups": 3, "theme": "dark", "projects": {},
                               "mcpServers": { "api": { "type": "http", "url": "https://h/mcp" } } }"#;
        assert_eq!(ConfigFile::parse(claude_code).unwrap().ignored_keys, ["numStartups", "theme", "projects"]);
        let cursor = r#"{ "mcpServers": { "x": { "url": "https://h/mcp" } } }"#;
        assert!(ConfigFile::parse(cursor).unwrap().ignored_keys.is_empty());
        // codemode's own sections stay strict next to foreign keys.
        let e =
            ConfigFile::parse(r#"{ "theme": "dark", "tools": { "codeMode": { "enabled": true, "timeoutMS": 5 } } }"#)
                .unwrap_err();
        assert_eq!(e.path, "tools.codeMode.timeoutMS");
    }

    #[test]
    fn declared_namespaces() {
        let f = ConfigFile::parse(
            "{ namespaces: [{ owner: 'plugin:demo', globalName: 'Ship', description: 'Shipments.',
                              members: { heavy: { tool: 'demo_shipping_list', input: { minTons: '$1' } } } }] }",
        )
        .unwrap();
        let registry = codemode_namespaces::Namespaces::new();
        f.register_namespaces(&registry).unwrap();
        assert_eq!(registry.list()[0].global_name, "Ship");
        // The same id twice is refused when registering; bad entries when parsing.
        assert_eq!(f.register_namespaces(&registry), Ok(()), "same owner replaces");
        let e = ConfigFile::parse("{ namespaces: [{ owner: 'plugin:demo', globalName: 'JSON', description: 'd', members: { a: { tool: 't' } } }] }")
            .unwrap_err();
        assert_eq!(e.path, "namespaces[0]");
        assert!(e.message.contains("built-in JavaScript global"), "{e}");
    }

    #[test]
    fn policy_and_agents() {
        let f = ConfigFile::parse(
            "{ tools: { profile: 'coding', deny: ['group:runtime'], loopDetection: { enabled: true, historySize: 30, detectors: { pingPong: true } } },
               agents: { list: [{ id: 'support', name: 'Support', tools: { profile: 'messaging', allow: ['slack'] } }] } }",
        )
        .unwrap();
        assert_eq!(f.policy.global.deny, vec!["group:runtime".to_string()]);
        assert!(f.policy.agents.contains_key("support"));
        assert_eq!(
            ConfigFile::parse("{ tools: { loopDetection: { enabled: 'yes' } } }").unwrap_err().path,
            "tools.loopDetection.enabled"
        );
        assert_eq!(
            ConfigFile::parse("{ agents: { list: [{ id: 'a', tools: { profil: 'x' } }] } }").unwrap_err().path,
            "agents.list[0].tools.profil"
        );
        assert_eq!(ConfigFile::parse("{ tools: { profile: 'everything' } }").unwrap_err().path, "tools.profile");
    }
}
