//! `mcpServers`: upstream MCP servers, in the format Claude Desktop and Cursor use.
//!
//! ```json5
//! {
//!   mcpServers: {
//!     everything: { command: "npx", args: ["-y", "@modelcontextprotocol/server-everything"] },
//!     github: { url: "https://mcp.example.com/mcp", headers: { Authorization: "Bearer ${GITHUB_TOKEN}" } },
//!     files: { command: "mcp-server-filesystem", args: ["${HOME}/docs"], env: { LOG: "${LOG_LEVEL:-warn}" },
//!              deny: ["write_*"], timeoutMs: 30000 },
//!   },
//! }
//! ```
//!
//! `${VAR}` and `${VAR:-default}` are expanded in `command`, `args`, `env`, `cwd`, `url` and `headers`
//! (a variable that is unset and has no default is an error naming its path). Per server:
//! `allow` / `deny` tool-name patterns (as in `tools.allow`), `timeoutMs` for each call (default
//! 60 000), `startupTimeoutMs` for connecting and listing tools (default 20 000), `disabled`.

use codemode_catalog::policy::string_list;
use codemode_core::config::{ConfigError, type_name};
use serde_json::Value;
use std::collections::BTreeMap;

/// Default time limit of one call to an upstream server.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// Default time limit for connecting to a server and listing its tools.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 20_000;

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// Program.
        command: String,
        /// Arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// Working directory.
        cwd: Option<String>,
    },
    /// Streamable HTTP.
    Http {
        /// Endpoint URL.
        url: String,
        /// Extra request headers.
        headers: BTreeMap<String, String>,
    },
}

/// The transport a server entry's `type` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TransportKind {
    Stdio,
    Http,
}

/// One configured upstream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The server's name: the `<server>` of ids `mcp:<server>:<tool>` and of `MCP.<server>`.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Tool-name patterns to keep (all when `None`).
    pub allow: Option<Vec<String>>,
    /// Tool-name patterns to drop (deny wins).
    pub deny: Vec<String>,
    /// Time limit of one call, ms: a hung server fails the call instead of hanging the cell.
    pub timeout_ms: u64,
    /// Time limit for connecting and listing tools, ms: a server that never answers is reported as
    /// failed instead of delaying every run.
    pub startup_timeout_ms: u64,
    /// Configured but switched off.
    pub disabled: bool,
    /// Check call inputs against the server's input schemas at the bridge (default `true`;
    /// `validateInputs: false` for a server whose schemas do not describe what it accepts).
    pub validate_inputs: bool,
    /// Tool-name patterns whose inputs are not checked (`validateInputs: { except: [...] }`): the
    /// tools of an otherwise checked server whose schemas lie.
    pub unchecked_tools: Vec<String>,
    /// Believe the server's claims that change what codemode lets a call do (`trustAnnotations`,
    /// default `false`): its `readOnlyHint` decides whether a tool is read-only, and its declared
    /// output schemas become contracts. Off, the server's tools are side-effecting unless
    /// [`read_only`](Self::read_only) names them, and output schemas are shown as unverified claims.
    /// Prevents: a server that mislabels a side-effecting tool (by mistake or on purpose) getting it
    /// run without approval under `requireUnlessReadOnly`, in `restartSafe` cells, or a second time
    /// after a replica dies.
    pub trust_annotations: bool,
    /// Tool-name patterns the configuration declares read-only (`readOnly`), whatever the server says.
    pub read_only: Vec<String>,
    /// Tool-name patterns the configuration declares side-effecting (`sideEffects`), whatever the
    /// server says; wins over [`read_only`](Self::read_only).
    pub side_effects: Vec<String>,
    /// Declare the MCP tasks extension to the server (`tasks`, default `true`): the connection then
    /// speaks the 2026-07-28 protocol where the server offers it (falling back to the handshake where
    /// it does not), and the server may answer a long call with a task, which the call waits on
    /// without holding anything but a poll (and which a fleet's replica that takes the run over
    /// continues — where the server outlives the replica).
    pub tasks: bool,
}

/// The keys of a server entry codemode reads (their values are checked strictly). `type` is the
/// transport as Claude Code and others write it (`stdio`, `http`, `streamable-http`; `sse` is the
/// deprecated HTTP+SSE transport, which is not supported).
pub const KEYS: [&str; 17] = [
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "allow",
    "deny",
    "timeoutMs",
    "startupTimeoutMs",
    "disabled",
    "type",
    "validateInputs",
    "trustAnnotations",
    "readOnly",
    "sideEffects",
    "tasks",
];

/// Paths of the keys of server entries that codemode does not read: other clients' settings
/// (`autoApprove`, `alwaysAllow`, `description`, …) in a config file written for them. They are
/// ignored, so that a Claude Desktop, Cursor or Claude Code file works as it is; the caller warns once.
pub fn foreign_server_keys(value: &Value) -> Vec<String> {
    let Some(obj) = value.as_object() else { return Vec::new() };
    obj.iter()
        .filter_map(|(name, spec)| spec.as_object().map(|spec| (name, spec)))
        .flat_map(|(name, spec)| {
            spec.keys().filter(|k| !KEYS.contains(&k.as_str())).map(move |k| format!("mcpServers.{name}.{k}"))
        })
        .collect()
}

/// Expands `${VAR}` and `${VAR:-default}` using `lookup`.
pub fn expand(text: &str, path: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or_else(|| ConfigError::new(path, "unterminated `${` in value"))?;
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(ConfigError::new(path, format!("`${{{inner}}}` is not a variable reference")));
        }
        match (lookup(name).filter(|v| !v.is_empty() || default.is_none()), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(ConfigError::new(
                    path,
                    format!("environment variable `{name}` is not set (use ${{{name}:-default}})"),
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn string(v: &Value, path: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let s = v.as_str().ok_or_else(|| ConfigError::new(path, format!("expected a string, got {}", type_name(v))))?;
    expand(s, path, lookup)
}

fn string_map(
    v: &Value,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let obj =
        v.as_object().ok_or_else(|| ConfigError::new(path, format!("expected an object, got {}", type_name(v))))?;
    obj.iter().map(|(k, x)| Ok((k.clone(), string(x, &format!("{path}.{k}"), lookup)?))).collect()
}

/// Parses `mcpServers` with the process environment.
pub fn parse_servers(value: &Value) -> Result<Vec<ServerConfig>, ConfigError> {
    parse_servers_with(value, &|name| std::env::var(name).ok())
}

/// Parses `mcpServers` with a given variable lookup.
pub fn parse_servers_with(
    value: &Value,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<ServerConfig>, ConfigError> {
    let obj = value.as_object().ok_or_else(|| ConfigError::new("mcpServers", "expected an object of servers"))?;
    let mut out = Vec::new();
    for (name, spec) in obj {
        let path = format!("mcpServers.{name}");
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(ConfigError::new(&path, "server names may use only letters, digits, `_` and `-`"));
        }
        if codemode_core::guest::is_js_internal_name(name) {
            return Err(ConfigError::new(
                &path,
                format!(
                    "server name `{name}` is a name JavaScript looks up on every object (like `then`); rename the server"
                ),
            ));
        }
        let spec = spec.as_object().ok_or_else(|| ConfigError::new(&path, "expected an object"))?;
        // Keys other clients write are ignored (see `foreign_server_keys`); codemode's own are checked.
        let at = |k: &str| format!("{path}.{k}");
        let kind = match spec.get("type") {
            None => None,
            Some(Value::String(t)) => match t.as_str() {
                "stdio" => Some(TransportKind::Stdio),
                "http" | "streamable-http" | "streamableHttp" | "streamable_http" => Some(TransportKind::Http),
                "sse" => {
                    return Err(ConfigError::new(
                        at("type"),
                        "the deprecated HTTP+SSE transport (`type: \"sse\"`) is not supported; give the server's \
                         streamable HTTP endpoint with `type: \"http\"` (most servers serve it at `/mcp`), or run it with `command`",
                    ));
                }
                other => {
                    return Err(ConfigError::new(
                        at("type"),
                        format!("unknown transport type `{other}` (expected `stdio` or `http`)"),
                    ));
                }
            },
            Some(other) => {
                return Err(ConfigError::new(at("type"), format!("expected a string, got {}", type_name(other))));
            }
        };
        match (kind, spec.contains_key("command"), spec.contains_key("url")) {
            (Some(TransportKind::Stdio), false, _) => {
                return Err(ConfigError::new(&path, "`type: \"stdio\"` needs `command`"));
            }
            (Some(TransportKind::Http), _, false) => {
                return Err(ConfigError::new(&path, "`type: \"http\"` needs `url`"));
            }
            _ => {}
        }
        let transport = match (spec.get("command"), spec.get("url")) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(&path, "give either `command` (stdio) or `url` (HTTP), not both"));
            }
            (Some(c), None) => Transport::Stdio {
                command: string(c, &at("command"), lookup)?,
                args: match spec.get("args") {
                    None => Vec::new(),
                    Some(a) => {
                        let items =
                            a.as_array().ok_or_else(|| ConfigError::new(at("args"), "expected an array of strings"))?;
                        items
                            .iter()
                            .enumerate()
                            .map(|(i, x)| string(x, &format!("{}[{i}]", at("args")), lookup))
                            .collect::<Result<_, _>>()?
                    }
                },
                env: spec.get("env").map(|e| string_map(e, &at("env"), lookup)).transpose()?.unwrap_or_default(),
                cwd: spec.get("cwd").map(|c| string(c, &at("cwd"), lookup)).transpose()?,
            },
            (None, Some(u)) => {
                let url = string(u, &at("url"), lookup)?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(ConfigError::new(at("url"), "expected an http:// or https:// URL"));
                }
                Transport::Http {
                    url,
                    headers: spec
                        .get("headers")
                        .map(|h| string_map(h, &at("headers"), lookup))
                        .transpose()?
                        .unwrap_or_default(),
                }
            }
            (None, None) => return Err(ConfigError::new(&path, "needs `command` (stdio) or `url` (streamable HTTP)")),
        };
        let number = |k: &str, default: u64| -> Result<u64, ConfigError> {
            match spec.get(k) {
                None => Ok(default),
                Some(v) => {
                    v.as_u64().filter(|n| *n > 0).ok_or_else(|| ConfigError::new(at(k), "expected a positive integer"))
                }
            }
        };
        out.push(ServerConfig {
            name: name.clone(),
            transport,
            allow: spec.get("allow").map(|a| string_list(a, &at("allow"))).transpose()?,
            deny: spec.get("deny").map(|d| string_list(d, &at("deny"))).transpose()?.unwrap_or_default(),
            timeout_ms: number("timeoutMs", DEFAULT_TIMEOUT_MS)?,
            startup_timeout_ms: number("startupTimeoutMs", DEFAULT_STARTUP_TIMEOUT_MS)?,
            disabled: match spec.get("disabled") {
                None => false,
                Some(v) => v.as_bool().ok_or_else(|| ConfigError::new(at("disabled"), "expected a boolean"))?,
            },
            validate_inputs: match spec.get("validateInputs") {
                None | Some(Value::Object(_)) => true,
                Some(v) => v.as_bool().ok_or_else(|| {
                    ConfigError::new(at("validateInputs"), "expected a boolean or { except: [tool-name patterns] }")
                })?,
            },
            unchecked_tools: match spec.get("validateInputs") {
                Some(Value::Object(o)) => {
                    if let Some(k) = o.keys().find(|k| k.as_str() != "except") {
                        return Err(ConfigError::new(
                            format!("{}.{k}", at("validateInputs")),
                            format!("unknown key `{k}` (known keys: except)"),
                        ));
                    }
                    o.get("except")
                        .map(|e| string_list(e, &format!("{}.except", at("validateInputs"))))
                        .transpose()?
                        .unwrap_or_default()
                }
                _ => Vec::new(),
            },
            tasks: match spec.get("tasks") {
                None => true,
                Some(v) => v.as_bool().ok_or_else(|| ConfigError::new(at("tasks"), "expected a boolean"))?,
            },
            trust_annotations: match spec.get("trustAnnotations") {
                None => false,
                Some(v) => v.as_bool().ok_or_else(|| ConfigError::new(at("trustAnnotations"), "expected a boolean"))?,
            },
            read_only: spec.get("readOnly").map(|a| string_list(a, &at("readOnly"))).transpose()?.unwrap_or_default(),
            side_effects: spec
                .get("sideEffects")
                .map(|a| string_list(a, &at("sideEffects")))
                .transpose()?
                .unwrap_or_default(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/u".into()),
            "TOKEN" => Some("t0k".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expansion() {
        assert_eq!(expand("${HOME}/x", "p", &env).unwrap(), "/home/u/x");
        assert_eq!(expand("a${MISSING:-dflt}b", "p", &env).unwrap(), "adfltb");
        assert_eq!(expand("${EMPTY:-d}", "p", &env).unwrap(), "d");
        assert_eq!(expand("${EMPTY}", "p", &env).unwrap(), "");
        assert_eq!(expand("no vars $HOME", "p", &env).unwrap(), "no vars $HOME");
        assert!(expand("${MISSING}", "p", &env).unwrap_err().message.contains("MISSING"));
        assert!(expand("${HOME", "p", &env).is_err());
        assert!(expand("${bad name}", "p", &env).is_err());
    }

    #[test]
    fn servers() {
        let v = json!({
            "files": {"command": "fs-server", "args": ["${HOME}/docs"], "env": {"T": "${TOKEN}"}, "deny": ["write_*"], "timeoutMs": 5000},
            "remote": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}, "validateInputs": false}
        });
        let s = parse_servers_with(&v, &env).unwrap();
        assert!(!s[1].validate_inputs, "validateInputs: false");
        let x = json!({ "x": { "command": "a", "validateInputs": { "except": ["write_*"] } } });
        let parsed = parse_servers_with(&x, &env).unwrap();
        assert!(parsed[0].validate_inputs && parsed[0].unchecked_tools == ["write_*"]);
        let bad = json!({ "x": { "command": "a", "validateInputs": { "only": ["x"] } } });
        assert_eq!(parse_servers_with(&bad, &env).unwrap_err().path, "mcpServers.x.validateInputs.only");
        assert_eq!(s[0].name, "files");
        assert_eq!(
            s[0].transport,
            Transport::Stdio {
                command: "fs-server".into(),
                args: vec!["/home/u/docs".into()],
                env: [("T".to_string(), "t0k".to_string())].into(),
                cwd: None
            }
        );
        assert_eq!((s[0].timeout_ms, s[0].deny.clone()), (5000, vec!["write_*".to_string()]));
        assert!(s[0].validate_inputs, "inputs are checked unless a server opts out");
        assert_eq!(
            s[1].transport,
            Transport::Http {
                url: "https://h/mcp".into(),
                headers: [("Authorization".to_string(), "Bearer t0k".to_string())].into()
            }
        );
        for (bad, path) in [
            (json!({"x": {}}), "mcpServers.x"),
            (json!({"x": {"command": "a", "url": "http://h"}}), "mcpServers.x"),
            (json!({"x": {"type": "sse", "url": "http://h/sse"}}), "mcpServers.x.type"),
            (json!({"x": {"type": "carrier-pigeon", "command": "a"}}), "mcpServers.x.type"),
            (json!({"x": {"type": "stdio", "url": "http://h/mcp"}}), "mcpServers.x"),
            (json!({"x": {"type": "http", "command": "a"}}), "mcpServers.x"),
            (json!({"x": {"type": 1, "command": "a"}}), "mcpServers.x.type"),
            (json!({"x": {"command": 3}}), "mcpServers.x.command"),
            (json!({"x": {"url": "ftp://h"}}), "mcpServers.x.url"),
            (json!({"bad name": {"command": "a"}}), "mcpServers.bad name"),
            (json!({"x": {"command": "a", "env": {"K": "${NOPE}"}}}), "mcpServers.x.env.K"),
            (json!({"x": {"command": "a", "timeoutMs": 0}}), "mcpServers.x.timeoutMs"),
            (json!({"x": {"command": "a", "validateInputs": "no"}}), "mcpServers.x.validateInputs"),
        ] {
            assert_eq!(parse_servers_with(&bad, &env).unwrap_err().path, path, "{bad}");
        }
    }

    /// Server entries as Claude Code, Cursor and Claude Desktop write them parse as
    /// they are; the other clients' keys are listed (for one warning) and ignored.
    #[test]
    fn other_clients_server_entries() {
        let v = json!({
            "fs": {"type": "stdio", "command": "fs-server", "args": [], "env": {}, "autoApprove": ["read"], "alwaysAllow": []},
            "remote": {"type": "http", "url": "https://h/mcp", "headers": {}, "description": "a remote one"},
            "cursor": {"url": "https://c/mcp"},
        });
        let s = parse_servers_with(&v, &env).unwrap();
        assert_eq!(s.len(), 3);
        assert!(matches!(&s[0].transport, Transport::Stdio { command, .. } if command == "fs-server"), "{s:?}");
        assert!(matches!(&s[1].transport, Transport::Http { url, .. } if url == "https://h/mcp"), "{s:?}");
        assert!(matches!(&s[2].transport, Transport::Http { url, .. } if url == "https://c/mcp"), "{s:?}");
        assert_eq!(
            foreign_server_keys(&v),
            ["mcpServers.fs.autoApprove", "mcpServers.fs.alwaysAllow", "mcpServers.remote.description"]
        );
    }
}
