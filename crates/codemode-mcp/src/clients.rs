//! Clients are agents (the book's configuration, "Clients are agents"): the top-level `clients`
//! section maps each MCP client — by the bearer token it presents over HTTP — to the policy target
//! its runs are for (agent, provider, model), so several agents with different tool policies share
//! one gateway or fleet. What a client says about itself (`clientInfo`, request `_meta`) is never
//! read for this: only the configured token decides, so a client cannot widen its own policy.
//!
//! ```json5
//! clients: {
//!   requireKnownClients: true,            // refuse HTTP clients whose token is not listed
//!   list: [
//!     { name: "support-bot", token: "${SUPPORT_TOKEN}", agent: "support" },
//!     { name: "ops-bot", token: "${OPS_TOKEN}", agent: "ops", provider: "openai", model: "gpt-5" },
//!   ],
//! }
//! ```

use crate::config::expand;
use codemode::PolicyTarget;
use codemode::config_file::ConfigFile;
use codemode_core::config::{ConfigError, type_name};
use serde_json::Value;
use sha2::Digest as _;

/// A client refused because the gateway serves only the clients its configuration lists
/// (`clients.requireKnownClients`) and it presented no configured token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this gateway serves only the clients its configuration lists (clients.requireKnownClients): present a \
     configured token in the Authorization header"
)]
pub struct ClientRefused;

/// Keys of the `clients` section.
pub const KEYS: [&str; 2] = ["requireKnownClients", "list"];
/// Keys of one `clients.list` entry.
pub const ENTRY_KEYS: [&str; 5] = ["name", "token", "agent", "provider", "model"];
/// Shortest token accepted. Prevents: a token short enough to guess naming an agent's policy.
pub const MIN_TOKEN_CHARS: usize = 16;

/// One configured client.
#[derive(Debug, Clone)]
struct Entry {
    name: String,
    /// SHA-256 of the token (the token itself is not kept).
    digest: [u8; 32],
    target: PolicyTarget,
}

/// The configured clients (empty: every client gets the gateway's default target).
#[derive(Debug, Clone, Default)]
pub struct Clients {
    entries: Vec<Entry>,
    /// Refuse HTTP clients that present no listed token.
    pub require_known: bool,
}

/// Who a request's client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Client<'a> {
    /// A listed client: its name and the target its runs are for.
    Known(&'a str, &'a PolicyTarget),
    /// Not listed (or no token): the gateway's default target, unless known clients are required.
    Unknown,
}

fn digest(token: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(token).into()
}

/// Equality of two digests in time that does not depend on where they differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization` header value: after `Bearer ` (any case), else the whole value.
pub fn bearer_token(header: &[u8]) -> &[u8] {
    match header.get(..7) {
        Some(scheme) if scheme.eq_ignore_ascii_case(b"bearer ") => &header[7..],
        _ => header,
    }
}

impl Clients {
    /// Parses the `clients` section of `file` (none: no clients configured). Tokens are expanded
    /// (`${VAR}`) and must be at least [`MIN_TOKEN_CHARS`] long and distinct; an agent must be one
    /// of `agents.list`.
    pub fn from_config(file: &ConfigFile) -> Result<Clients, ConfigError> {
        Self::parse(file.clients.as_ref(), file, &|k| std::env::var(k).ok())
    }

    /// [`from_config`](Self::from_config) with an explicit variable lookup.
    pub fn parse(
        v: Option<&Value>,
        file: &ConfigFile,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Clients, ConfigError> {
        let Some(v) = v else { return Ok(Clients::default()) };
        let obj = v
            .as_object()
            .ok_or_else(|| ConfigError::new("clients", format!("expected an object, got {}", type_name(v))))?;
        if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(ConfigError::new(
                format!("clients.{k}"),
                format!("unknown key `{k}` (known keys: {})", KEYS.join(", ")),
            ));
        }
        let require_known = match obj.get("requireKnownClients") {
            None => false,
            Some(b) => {
                b.as_bool().ok_or_else(|| ConfigError::new("clients.requireKnownClients", "expected a boolean"))?
            }
        };
        let mut entries: Vec<Entry> = Vec::new();
        let list = match obj.get("list") {
            None => &[][..],
            Some(Value::Array(a)) => a.as_slice(),
            Some(other) => {
                return Err(ConfigError::new("clients.list", format!("expected an array, got {}", type_name(other))));
            }
        };
        for (i, e) in list.iter().enumerate() {
            let path = format!("clients.list[{i}]");
            let e = e.as_object().ok_or_else(|| ConfigError::new(&path, "expected an object"))?;
            if let Some(k) = e.keys().find(|k| !ENTRY_KEYS.contains(&k.as_str())) {
                return Err(ConfigError::new(
                    format!("{path}.{k}"),
                    format!("unknown key `{k}` (known keys: {})", ENTRY_KEYS.join(", ")),
                ));
            }
            let text = |k: &str| -> Result<Option<String>, ConfigError> {
                match e.get(k) {
                    None => Ok(None),
                    Some(Value::String(s)) => expand(s, &format!("{path}.{k}"), lookup).map(Some),
                    Some(_) => Err(ConfigError::new(format!("{path}.{k}"), "expected a string")),
                }
            };
            let token = text("token")?
                .ok_or_else(|| ConfigError::new(format!("{path}.token"), "every client needs a token"))?;
            if token.chars().count() < MIN_TOKEN_CHARS {
                return Err(ConfigError::new(
                    format!("{path}.token"),
                    format!("a token has at least {MIN_TOKEN_CHARS} characters"),
                ));
            }
            let target = PolicyTarget { agent: text("agent")?, provider: text("provider")?, model: text("model")? };
            if target.model.is_some() && target.provider.is_none() {
                return Err(ConfigError::new(format!("{path}.model"), "a model needs its provider"));
            }
            crate::check_target(file, &target).map_err(|e| ConfigError::new(format!("{path}.agent"), e.message))?;
            let d = digest(bearer_token(token.as_bytes()));
            if entries.iter().any(|x| same(&x.digest, &d)) {
                return Err(ConfigError::new(format!("{path}.token"), "another client has the same token"));
            }
            let name = text("name")?.unwrap_or_else(|| format!("client {i}"));
            entries.push(Entry { name, digest: d, target });
        }
        Ok(Clients { entries, require_known })
    }

    /// Whether any client is configured.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The client presenting `authorization` (an HTTP `Authorization` header value). Every entry
    /// is compared, in time that depends on neither the token's content nor which entry matches.
    pub fn identify(&self, authorization: Option<&[u8]>) -> Client<'_> {
        let Some(header) = authorization.filter(|h| !h.is_empty()) else { return Client::Unknown };
        let d = digest(bearer_token(header));
        let mut found = None;
        for e in &self.entries {
            if same(&e.digest, &d) && found.is_none() {
                found = Some(e);
            }
        }
        match found {
            Some(e) => Client::Known(&e.name, &e.target),
            None => Client::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn file() -> ConfigFile {
        ConfigFile::parse(r#"{ agents: { list: [{ id: "support", tools: {} }, { id: "ops", tools: {} }] } }"#)
            .unwrap_or_default()
    }

    fn parse(v: Value) -> Result<Clients, ConfigError> {
        Clients::parse(Some(&v), &file(), &|k| (k == "OPS").then(|| "ops-token-0123456789".to_string()))
    }

    #[test]
    fn tokens_name_their_targets_and_nothing_else_does() {
        let c = parse(json!({ "requireKnownClients": true, "list": [
            { "name": "s", "token": "support-token-0123456789", "agent": "support" },
            { "name": "o", "token": "${OPS}", "agent": "ops", "provider": "openai", "model": "gpt-5" } ] }))
        .unwrap();
        assert!(c.require_known);
        let Client::Known(name, target) = c.identify(Some(b"Bearer support-token-0123456789")) else { panic!() };
        assert_eq!((name, target.agent.as_deref()), ("s", Some("support")));
        let Client::Known(name, target) = c.identify(Some(b"bearer ops-token-0123456789")) else { panic!() };
        assert_eq!((name, target.model.as_deref()), ("o", Some("gpt-5")));
        for other in [&b"Bearer support-token-012345678"[..], b"Bearer support-token-01234567890", b"", b"Bearer "] {
            assert_eq!(c.identify(Some(other)), Client::Unknown, "{other:?}");
        }
        assert_eq!(c.identify(None), Client::Unknown);
    }

    #[test]
    fn bad_sections_are_refused_naming_their_path() {
        for (v, path) in [
            (json!({ "list": [{ "token": "short", "agent": "support" }] }), "clients.list[0].token"),
            (json!({ "list": [{ "token": "support-token-0123456789", "agent": "nobody" }] }), "clients.list[0].agent"),
            (json!({ "list": [{ "agent": "support" }] }), "clients.list[0].token"),
            (json!({ "list": [{ "token": "support-token-0123456789", "model": "m" }] }), "clients.list[0].model"),
            (json!({ "list": [{ "token": "support-token-0123456789", "agnet": "ops" }] }), "clients.list[0].agnet"),
            (
                json!({ "list": [{ "token": "support-token-0123456789" }, { "token": "Bearer support-token-0123456789" }] }),
                "clients.list[1].token",
            ),
            (json!({ "requireKnownClients": "yes" }), "clients.requireKnownClients"),
            (json!({ "lists": [] }), "clients.lists"),
            (json!({ "list": [{ "token": "${UNSET_VARIABLE_FOR_TEST}", "agent": "ops" }] }), "clients.list[0].token"),
        ] {
            match parse(v) {
                Err(e) => assert_eq!(e.path, path, "{e}"),
                Ok(c) => panic!("accepted: {c:?}"),
            }
        }
    }
}
