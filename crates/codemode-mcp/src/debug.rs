//! The debugging switches of contract §18, mapped to what `codemode serve` has: the tool list it sends
//! to the MCP client (the model's tool payload), the MCP messages it receives and answers (its model
//! transport), and the notifications it streams (SSE on streamable HTTP). Each switch has the
//! sources' name and a `CODEMODE_*` alias:
//!
//! | switch | alias | effect |
//! |---|---|---|
//! | `OPENCLAW_DEBUG_CODE_MODE=1` | `CODEMODE_DEBUG=1` | codemode's own debug logs (`codemode=debug`) |
//! | `OPENCLAW_DEBUG_MODEL_TRANSPORT=1` | `CODEMODE_DEBUG_TRANSPORT=1` | each MCP request served (method, id, tool, duration, status) and rmcp's debug logs |
//! | `OPENCLAW_DEBUG_MODEL_PAYLOAD=tools` | `CODEMODE_DEBUG_PAYLOAD=tools` | the tool names of every `tools/list` answer (`exec`, `wait`) |
//! | `OPENCLAW_DEBUG_MODEL_PAYLOAD=full-redacted` | `CODEMODE_DEBUG_PAYLOAD=full-redacted` | a bounded, redacted JSON of every `tools/list` answer |
//! | `OPENCLAW_DEBUG_SSE=events` | `CODEMODE_DEBUG_SSE=events` | every notification streamed to the client (progress) |
//! | `OPENCLAW_DEBUG_SSE=peek` | `CODEMODE_DEBUG_SSE=peek` | the first 5 of them, redacted |
//!
//! Logs go to stderr under the `codemode::debug` target. The contract §4 payload guard runs on every
//! tool list whatever the switches say.

use std::sync::atomic::{AtomicUsize, Ordering};

/// What `*_MODEL_PAYLOAD` logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PayloadDebug {
    /// Nothing.
    #[default]
    Off,
    /// The tool names.
    Tools,
    /// A bounded, redacted JSON of the tool list.
    FullRedacted,
}

/// What `*_SSE` logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SseDebug {
    /// Nothing.
    #[default]
    Off,
    /// Every streamed notification.
    Events,
    /// The first [`PEEK_EVENTS`], redacted.
    Peek,
}

/// How many streamed notifications `peek` logs.
pub const PEEK_EVENTS: usize = 5;

/// Largest logged payload (`full-redacted`), in bytes. Prevents: a huge catalog description
/// flooding the log.
pub const MAX_LOGGED_PAYLOAD: usize = 16 * 1024;

/// The switches, read once from the environment.
#[derive(Debug, Default)]
pub struct DebugSwitches {
    /// `*_DEBUG_CODE_MODE`.
    pub code_mode: bool,
    /// `*_DEBUG_MODEL_TRANSPORT`.
    pub transport: bool,
    /// `*_DEBUG_MODEL_PAYLOAD`.
    pub payload: PayloadDebug,
    /// `*_DEBUG_SSE`.
    pub sse: SseDebug,
    peeked: AtomicUsize,
}

/// The value of the sources' variable, else of our alias.
fn var(source: &str, alias: &str) -> Option<String> {
    std::env::var(source).ok().filter(|v| !v.is_empty()).or_else(|| std::env::var(alias).ok().filter(|v| !v.is_empty()))
}

impl DebugSwitches {
    /// Reads the switches from the environment. Unknown values are reported and ignored.
    pub fn from_env() -> Self {
        Self::from_lookup(var)
    }

    /// Reads the switches through `lookup(sourceName, alias)`.
    pub fn from_lookup(lookup: impl Fn(&str, &str) -> Option<String>) -> Self {
        let flag = |s: &str, a: &str| lookup(s, a).is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        let payload = match lookup("OPENCLAW_DEBUG_MODEL_PAYLOAD", "CODEMODE_DEBUG_PAYLOAD").as_deref() {
            None => PayloadDebug::Off,
            Some("tools") => PayloadDebug::Tools,
            Some("full-redacted") => PayloadDebug::FullRedacted,
            Some(other) => {
                tracing::warn!(
                    value = other,
                    "OPENCLAW_DEBUG_MODEL_PAYLOAD: expected `tools` or `full-redacted`; ignored"
                );
                PayloadDebug::Off
            }
        };
        let sse = match lookup("OPENCLAW_DEBUG_SSE", "CODEMODE_DEBUG_SSE").as_deref() {
            None => SseDebug::Off,
            Some("events") => SseDebug::Events,
            Some("peek") => SseDebug::Peek,
            Some(other) => {
                tracing::warn!(value = other, "OPENCLAW_DEBUG_SSE: expected `events` or `peek`; ignored");
                SseDebug::Off
            }
        };
        DebugSwitches {
            code_mode: flag("OPENCLAW_DEBUG_CODE_MODE", "CODEMODE_DEBUG"),
            transport: flag("OPENCLAW_DEBUG_MODEL_TRANSPORT", "CODEMODE_DEBUG_TRANSPORT"),
            payload,
            sse,
            peeked: AtomicUsize::new(0),
        }
    }

    /// The `tracing` filter directives the switches need (added to the log filter at start).
    pub fn directives(&self) -> Vec<&'static str> {
        let mut d = Vec::new();
        if self.code_mode {
            d.push("codemode=debug");
        }
        if self.transport {
            d.push("rmcp=debug");
        }
        if self.code_mode || self.transport || self.payload != PayloadDebug::Off || self.sse != SseDebug::Off {
            d.push("codemode::debug=info");
        }
        d
    }

    /// Logs a tool list about to be sent (`*_MODEL_PAYLOAD`): its names, or its whole JSON
    /// (`json`, built only when needed) bounded and redacted.
    pub fn log_tool_list(&self, names: &[&str], json: impl FnOnce() -> serde_json::Value) {
        match self.payload {
            PayloadDebug::Off => {}
            PayloadDebug::Tools => {
                tracing::info!(target: "codemode::debug", tools = ?names, "model payload: tool names sent");
            }
            PayloadDebug::FullRedacted => {
                let redaction = codemode::trajectory::Redaction::new(
                    MAX_LOGGED_PAYLOAD,
                    codemode::trajectory::DEFAULT_MASKED_KEYS.iter().map(|s| s.to_string()),
                );
                tracing::info!(target: "codemode::debug", payload = %redaction.value(&json()), "model payload: tool list sent (redacted)");
            }
        }
    }

    /// Logs a notification about to be streamed (`*_SSE`).
    pub fn log_event(&self, text: &str) {
        match self.sse {
            SseDebug::Off => {}
            SseDebug::Events => tracing::info!(target: "codemode::debug", event = text, "stream event"),
            SseDebug::Peek => {
                let n = self.peeked.fetch_add(1, Ordering::Relaxed);
                if n < PEEK_EVENTS {
                    let redaction = codemode::trajectory::Redaction::default();
                    tracing::info!(target: "codemode::debug", event = %redaction.message(text), n = n + 1, "stream event (peek)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_and_aliases() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |source: &str, alias: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == source)
                    .or_else(|| pairs.iter().find(|(k, _)| *k == alias))
                    .map(|(_, v)| v.to_string())
            }
        };
        let d = DebugSwitches::from_lookup(env(&[
            ("OPENCLAW_DEBUG_CODE_MODE", "1"),
            ("CODEMODE_DEBUG_TRANSPORT", "1"),
            ("OPENCLAW_DEBUG_MODEL_PAYLOAD", "full-redacted"),
            ("CODEMODE_DEBUG_SSE", "peek"),
        ]));
        assert!(d.code_mode && d.transport);
        assert_eq!((d.payload, d.sse), (PayloadDebug::FullRedacted, SseDebug::Peek));
        assert!(d.directives().contains(&"codemode::debug=info") && d.directives().contains(&"rmcp=debug"));
        let d = DebugSwitches::from_lookup(env(&[
            ("OPENCLAW_DEBUG_MODEL_PAYLOAD", "everything"),
            ("OPENCLAW_DEBUG_SSE", "all"),
        ]));
        assert_eq!((d.payload, d.sse), (PayloadDebug::Off, SseDebug::Off), "unknown values are ignored");
        assert!(DebugSwitches::from_lookup(|_, _| None).directives().is_empty());
    }
}
