//! Who may use the console, and how a browser proves it (the book's "Console" page, "Security"):
//! named operators with a token each, a session cookie signed with the fleet's key (so it works on
//! every replica behind a balancer), a CSRF token per session, and a limit on failed logins.
//!
//! Nothing here is compared with `==`: tokens, cookie tags and CSRF tokens go through
//! [`same_secret`], whose time depends on neither the content nor the length of either side.

use crate::http::same_secret;
use codemode_core::config::ConfigError;
use hmac::{Hmac, Mac as _};
use serde_json::Value;
use sha2::Sha256;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Shortest operator token accepted. Prevents: a token short enough to guess within the login
/// limit's allowance.
pub const MIN_OPERATOR_TOKEN_LEN: usize = 16;

/// Longest operator name. Prevents: a name that floods the audit or the console's header.
pub const MAX_OPERATOR_NAME_LEN: usize = 64;

/// How long a login lasts by default (12 hours).
pub const DEFAULT_SESSION_TTL_SECONDS: u64 = 43_200;

/// Shortest and longest `console.sessionTtlSeconds` (a minute, a week). Prevents: a session cookie
/// that, once stolen, stays good for months.
pub const SESSION_TTL_SECONDS: (u64, u64) = (60, 604_800);

/// Failed logins one client address may make per minute. Prevents: guessing tokens online.
pub const MAX_FAILED_LOGINS_PER_CLIENT: usize = 5;

/// Failed logins the whole server takes per minute (from any address). Prevents: guessing tokens
/// from many addresses at once.
pub const MAX_FAILED_LOGINS_PER_SERVER: usize = 50;

/// Client addresses whose failures are remembered at once. Prevents: a stream of addresses growing
/// the limiter's table without bound.
const MAX_TRACKED_CLIENTS: usize = 4_096;

/// The window of the login limits.
const LOGIN_WINDOW_MS: u64 = 60_000;

/// The name of the session cookie.
pub const COOKIE: &str = "codemode_console";

/// One operator: a name (what the audit says decided) and a secret token.
#[derive(Clone)]
pub struct Operator {
    /// The name shown in the console and written in the audit.
    pub name: String,
    token: String,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Operator {
    /// An operator with `token` (checked like the config's: see [`ConsoleConfig::from_config`]).
    pub fn new(name: impl Into<String>, token: impl Into<String>) -> Self {
        Operator { name: name.into(), token: token.into() }
    }
}

/// The config file's `console` section.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// The operators who may log in.
    pub operators: Vec<Operator>,
    /// How long a login lasts.
    pub session_ttl_ms: u64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig { operators: Vec::new(), session_ttl_ms: DEFAULT_SESSION_TTL_SECONDS * 1_000 }
    }
}

fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_OPERATOR_NAME_LEN
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
}

impl ConsoleConfig {
    /// Reads `console` (`None`: absent). `operators` is a list of `{name, token}` or
    /// `{name, tokenEnv}` (the token read from that environment variable); names are 1–64 of
    /// `A-Z a-z 0-9 . _ - @` and unique; tokens at least [`MIN_OPERATOR_TOKEN_LEN`] characters and
    /// unique. Errors name the offending path.
    pub fn from_config(value: Option<&Value>) -> Result<Self, ConfigError> {
        Self::from_config_with(value, &|name| std::env::var(name).ok())
    }

    /// [`Self::from_config`] with an environment lookup (tests).
    pub fn from_config_with(value: Option<&Value>, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut out = ConsoleConfig::default();
        let Some(value) = value else { return Ok(out) };
        let obj = value.as_object().ok_or_else(|| ConfigError::new("console", "expected an object"))?;
        if let Some(k) = obj.keys().find(|k| !["operators", "sessionTtlSeconds"].contains(&k.as_str())) {
            return Err(ConfigError::new(
                format!("console.{k}"),
                format!("unknown key `{k}` (known keys: operators, sessionTtlSeconds)"),
            ));
        }
        if let Some(ttl) = obj.get("sessionTtlSeconds") {
            let (lo, hi) = SESSION_TTL_SECONDS;
            let secs = ttl.as_u64().filter(|s| (lo..=hi).contains(s)).ok_or_else(|| {
                ConfigError::new(
                    "console.sessionTtlSeconds",
                    format!("expected a whole number of seconds, {lo}..={hi}"),
                )
            })?;
            out.session_ttl_ms = secs * 1_000;
        }
        let list = match obj.get("operators") {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Array(list)) => list,
            Some(_) => {
                return Err(ConfigError::new("console.operators", "expected a list of {name, token | tokenEnv}"));
            }
        };
        for (i, op) in list.iter().enumerate() {
            let path = format!("console.operators[{i}]");
            let o = op.as_object().ok_or_else(|| ConfigError::new(&path, "expected {name, token | tokenEnv}"))?;
            if let Some(k) = o.keys().find(|k| !["name", "token", "tokenEnv"].contains(&k.as_str())) {
                return Err(ConfigError::new(
                    format!("{path}.{k}"),
                    format!("unknown key `{k}` (known keys: name, token, tokenEnv)"),
                ));
            }
            let name = o.get("name").and_then(Value::as_str).filter(|n| name_ok(n)).ok_or_else(|| {
                ConfigError::new(
                    format!("{path}.name"),
                    format!("expected 1 to {MAX_OPERATOR_NAME_LEN} of the characters A-Z a-z 0-9 . _ - @"),
                )
            })?;
            let token = match (o.get("token"), o.get("tokenEnv")) {
                (Some(t), None) => t
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ConfigError::new(format!("{path}.token"), "expected a string"))?,
                (None, Some(var)) => {
                    let var = var
                        .as_str()
                        .ok_or_else(|| ConfigError::new(format!("{path}.tokenEnv"), "expected a variable name"))?;
                    env(var).filter(|t| !t.is_empty()).ok_or_else(|| {
                        ConfigError::new(
                            format!("{path}.tokenEnv"),
                            format!("the environment variable {var} is not set"),
                        )
                    })?
                }
                _ => return Err(ConfigError::new(&path, "give exactly one of `token` and `tokenEnv`")),
            };
            if token.chars().count() < MIN_OPERATOR_TOKEN_LEN {
                return Err(ConfigError::new(
                    format!("{path}.token"),
                    format!("an operator token needs at least {MIN_OPERATOR_TOKEN_LEN} characters"),
                ));
            }
            if out.operators.iter().any(|p| p.name == name) {
                return Err(ConfigError::new(format!("{path}.name"), format!("operator `{name}` is named twice")));
            }
            if out.operators.iter().any(|p| same_secret(p.token.as_bytes(), token.as_bytes())) {
                return Err(ConfigError::new(format!("{path}.token"), "two operators have the same token"));
            }
            out.operators.push(Operator { name: name.to_string(), token });
        }
        Ok(out)
    }
}

/// A random token of 32 hexadecimal characters (128 bits from the operating system's generator).
pub fn random_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A logged-in operator's session, as its cookie says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The operator.
    pub operator: String,
    /// The session id (random; what the CSRF token is derived from).
    pub id: String,
    /// When it ends (Unix milliseconds).
    pub expires_at_ms: u64,
}

/// Why a login was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginRefused {
    /// Wrong name or token (the same answer for either).
    Wrong,
    /// Too many failures; try again after this many seconds.
    Limited(u64),
}

/// Failed logins per client address and for the server, in a sliding window.
#[derive(Default)]
struct Limiter {
    by_client: HashMap<IpAddr, Vec<u64>>,
    all: Vec<u64>,
}

impl Limiter {
    /// Seconds to wait when `client` is over a limit at `now`, else `None`.
    fn check(&mut self, client: IpAddr, now: u64) -> Option<u64> {
        let cut = now.saturating_sub(LOGIN_WINDOW_MS);
        self.all.retain(|&t| t > cut);
        let mine = self.by_client.entry(client).or_default();
        mine.retain(|&t| t > cut);
        let wait =
            |oldest: Option<&u64>| oldest.map(|t| (t + LOGIN_WINDOW_MS).saturating_sub(now).div_ceil(1_000).max(1));
        if mine.len() >= MAX_FAILED_LOGINS_PER_CLIENT {
            return wait(mine.first());
        }
        if self.all.len() >= MAX_FAILED_LOGINS_PER_SERVER {
            return wait(self.all.first());
        }
        None
    }

    fn fail(&mut self, client: IpAddr, now: u64) {
        if self.by_client.len() >= MAX_TRACKED_CLIENTS && !self.by_client.contains_key(&client) {
            let cut = now.saturating_sub(LOGIN_WINDOW_MS);
            self.by_client.retain(|_, v| v.last().is_some_and(|&t| t > cut));
            if self.by_client.len() >= MAX_TRACKED_CLIENTS {
                // Still full of live entries: the server-wide limit covers the rest.
                self.all.push(now);
                return;
            }
        }
        self.by_client.entry(client).or_default().push(now);
        self.all.push(now);
    }
}

/// Checks logins, signs and reads session cookies, derives CSRF tokens.
pub struct Auth {
    operators: Vec<Operator>,
    key: [u8; 32],
    ttl_ms: u64,
    limiter: Mutex<Limiter>,
    /// Sessions logged out in this process (a cookie cannot be recalled from the browser of an
    /// attacker who copied it; its id is refused here until it would have expired).
    revoked: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("operators", &self.operators).finish_non_exhaustive()
    }
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // An HMAC key of any length is accepted (`new_from_slice` fails only for fixed-size MACs).
    let mut m = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return [0; 32],
    };
    for p in parts {
        m.update(&(p.len() as u64).to_le_bytes());
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

impl Auth {
    /// Operators `operators`; cookies signed with a key derived from `secret` (the gateway's state
    /// key: the fleet's shared secret on a fleet, random per process otherwise).
    pub fn new(config: &ConsoleConfig, secret: &[u8; 32]) -> Self {
        Auth {
            operators: config.operators.clone(),
            key: mac(secret, &[b"codemode console session/1"]),
            ttl_ms: config.session_ttl_ms,
            limiter: Mutex::default(),
            revoked: Mutex::default(),
        }
    }

    /// How long a session lasts.
    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms
    }

    /// Checks a login from `client` at `now`: every operator's token is compared (in constant time
    /// each), so neither the answer nor its time says which part was wrong.
    pub fn login(&self, client: IpAddr, name: &str, token: &str, now: u64) -> Result<Session, LoginRefused> {
        let mut limiter = self.limiter.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(wait) = limiter.check(client, now) {
            return Err(LoginRefused::Limited(wait));
        }
        let mut found = None;
        for op in &self.operators {
            let name_ok = same_secret(op.name.as_bytes(), name.as_bytes());
            let token_ok = same_secret(op.token.as_bytes(), token.as_bytes());
            if name_ok & token_ok {
                found = Some(op.name.clone());
            }
        }
        match found {
            Some(operator) => {
                Ok(Session { operator, id: random_token(), expires_at_ms: now.saturating_add(self.ttl_ms) })
            }
            None => {
                limiter.fail(client, now);
                Err(LoginRefused::Wrong)
            }
        }
    }

    /// The cookie value of `session`: `v1.<operator hex>.<id>.<expiry>.<tag>`.
    pub fn cookie_value(&self, session: &Session) -> String {
        let name = hex(session.operator.as_bytes());
        let exp = session.expires_at_ms.to_string();
        let tag = mac(&self.key, &[b"v1", name.as_bytes(), session.id.as_bytes(), exp.as_bytes()]);
        format!("v1.{name}.{}.{exp}.{}", session.id, hex(&tag))
    }

    /// The session a cookie value proves at `now`: its tag verifies, it has not expired or been
    /// logged out here, and its operator is still configured. `None` otherwise.
    pub fn session(&self, value: &str, now: u64) -> Option<Session> {
        let mut parts = value.split('.');
        let (Some("v1"), Some(name), Some(id), Some(exp), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let want = mac(&self.key, &[b"v1", name.as_bytes(), id.as_bytes(), exp.as_bytes()]);
        if !same_secret(&unhex(tag)?, &want) {
            return None;
        }
        let expires_at_ms: u64 = exp.parse().ok()?;
        if expires_at_ms <= now {
            return None;
        }
        let operator = String::from_utf8(unhex(name)?).ok()?;
        if !self.operators.iter().any(|o| o.name == operator) {
            return None;
        }
        let revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        if revoked.contains_key(id) {
            return None;
        }
        Some(Session { operator, id: id.to_string(), expires_at_ms })
    }

    /// Ends `session` in this process (see [`Auth`]'s `revoked`).
    pub fn logout(&self, session: &Session, now: u64) {
        let mut revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        revoked.retain(|_, until| *until > now);
        if revoked.len() < 65_536 {
            revoked.insert(session.id.clone(), session.expires_at_ms);
        }
    }

    /// The CSRF token of `session` (an HMAC of its id: the same on every replica).
    pub fn csrf(&self, session: &Session) -> String {
        hex(&mac(&self.key, &[b"csrf/1", session.id.as_bytes()]))
    }

    /// Whether `presented` is `session`'s CSRF token.
    pub fn csrf_ok(&self, session: &Session, presented: &str) -> bool {
        same_secret(self.csrf(session).as_bytes(), presented.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config() -> ConsoleConfig {
        ConsoleConfig::from_config_with(
            Some(&json!({ "operators": [
                { "name": "ana", "token": "ana-token-0123456789" },
                { "name": "bo", "tokenEnv": "BO" },
            ]})),
            &|v| (v == "BO").then(|| "bo-token-from-the-env".to_string()),
        )
        .unwrap()
    }

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn config_errors_name_the_path() {
        let err = |v: Value| ConsoleConfig::from_config_with(Some(&v), &|_| None).unwrap_err().path;
        assert_eq!(err(json!({ "operators": [{ "name": "a", "token": "short" }] })), "console.operators[0].token");
        assert_eq!(
            err(json!({ "operators": [{ "name": "<b>", "token": "0123456789abcdef" }] })),
            "console.operators[0].name"
        );
        assert_eq!(err(json!({ "operators": [{ "name": "a", "tokenEnv": "NOPE" }] })), "console.operators[0].tokenEnv");
        assert_eq!(
            err(
                json!({ "operators": [{ "name": "a", "token": "0123456789abcdef" }, { "name": "a", "token": "fedcba9876543210" }] })
            ),
            "console.operators[1].name"
        );
        assert_eq!(
            err(
                json!({ "operators": [{ "name": "a", "token": "0123456789abcdef" }, { "name": "b", "token": "0123456789abcdef" }] })
            ),
            "console.operators[1].token"
        );
        assert_eq!(
            err(json!({ "operators": [{ "name": "a", "token": "0123456789abcdef", "tokenEnv": "X" }] })),
            "console.operators[0]"
        );
        assert_eq!(err(json!({ "sessionTtlSeconds": 5 })), "console.sessionTtlSeconds");
        assert_eq!(err(json!({ "operator": [] })), "console.operator");
    }

    #[test]
    fn login_cookie_and_csrf() {
        let auth = Auth::new(&config(), &[7; 32]);
        assert_eq!(auth.login(IP, "ana", "wrong-token-0123456789", 1_000), Err(LoginRefused::Wrong));
        assert_eq!(auth.login(IP, "bo", "ana-token-0123456789", 1_000), Err(LoginRefused::Wrong), "another's token");
        let s = auth.login(IP, "bo", "bo-token-from-the-env", 1_000).unwrap();
        assert_eq!(s.operator, "bo");
        let cookie = auth.cookie_value(&s);
        assert_eq!(auth.session(&cookie, 2_000), Some(s.clone()));
        // Another replica with the same secret reads it; one with another secret does not.
        assert_eq!(Auth::new(&config(), &[7; 32]).session(&cookie, 2_000), Some(s.clone()));
        assert_eq!(Auth::new(&config(), &[8; 32]).session(&cookie, 2_000), None);
        // Expired, tampered (operator renamed, expiry extended), garbage.
        assert_eq!(auth.session(&cookie, s.expires_at_ms), None);
        let forged = cookie.replacen(&hex(b"bo"), &hex(b"ana"), 1);
        assert_eq!(auth.session(&forged, 2_000), None);
        let later = cookie.replacen(&s.expires_at_ms.to_string(), &(s.expires_at_ms * 2).to_string(), 1);
        assert_eq!(auth.session(&later, 2_000), None);
        for junk in ["", "v1", "v1.....", "v2.00.x.1.00", &format!("{cookie}.x")] {
            assert_eq!(auth.session(junk, 2_000), None, "{junk}");
        }
        // An operator removed from the config is logged out.
        let fewer = ConsoleConfig { operators: vec![Operator::new("ana", "ana-token-0123456789")], ..config() };
        assert_eq!(Auth::new(&fewer, &[7; 32]).session(&cookie, 2_000), None);
        // CSRF: derived from the session, checked by content.
        let csrf = auth.csrf(&s);
        assert!(auth.csrf_ok(&s, &csrf));
        assert!(!auth.csrf_ok(&s, ""));
        assert!(!auth.csrf_ok(&s, &csrf[..csrf.len() - 1]));
        let other = auth.login(IP, "ana", "ana-token-0123456789", 1_000).unwrap();
        assert!(!auth.csrf_ok(&other, &csrf), "one session's token is not another's");
        // Logout.
        auth.logout(&s, 3_000);
        assert_eq!(auth.session(&cookie, 3_000), None);
    }

    #[test]
    fn failed_logins_are_limited_per_client_and_per_server() {
        let auth = Auth::new(&config(), &[1; 32]);
        for i in 0..MAX_FAILED_LOGINS_PER_CLIENT {
            assert_eq!(auth.login(IP, "ana", "nope-nope-nope-nope", 1_000 + i as u64), Err(LoginRefused::Wrong));
        }
        // Even the right token is refused while limited, and the wait is stated.
        assert_eq!(auth.login(IP, "ana", "ana-token-0123456789", 2_000), Err(LoginRefused::Limited(59)));
        // Another address is not limited by this one; a minute later this one is free again.
        let other = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));
        assert!(auth.login(other, "ana", "ana-token-0123456789", 2_000).is_ok());
        assert!(auth.login(IP, "ana", "ana-token-0123456789", 61_001).is_ok());
        // The server-wide limit: failures from many addresses.
        let auth = Auth::new(&config(), &[1; 32]);
        for i in 0..MAX_FAILED_LOGINS_PER_SERVER {
            let ip = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, (i / 256) as u8, (i % 256) as u8));
            assert_eq!(auth.login(ip, "x", "y", 1_000), Err(LoginRefused::Wrong));
        }
        assert!(matches!(auth.login(other, "ana", "ana-token-0123456789", 1_500), Err(LoginRefused::Limited(_))));
    }
}
