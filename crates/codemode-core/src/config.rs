//! The `tools.codeMode` configuration (contract §3).
//!
//! Accepted shapes: absent, `false`, `true` (shorthand for `{ enabled: true }`), or an object whose keys
//! are the fields of the contract §3 table. `enabled` is the only gate (contract C1–C3). Numbers are clamped
//! to their ranges (contract C6); unknown keys and wrongly typed values are rejected with an error that
//! names the offending path.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// A cell language (contract §5.1, X4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Plain JavaScript (the default).
    Javascript,
    /// TypeScript, transpiled to JavaScript before evaluation (contract §14).
    Typescript,
}

impl Language {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Javascript => "javascript",
            Language::Typescript => "typescript",
        }
    }

    /// Parses the wire spelling (exact, lowercase).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "javascript" => Some(Language::Javascript),
            "typescript" => Some(Language::Typescript),
            _ => None,
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A configuration error: the JSON path of the offending value and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid config at {path}: {message}")]
pub struct ConfigError {
    /// Dotted path, e.g. `tools.codeMode.timeoutMs`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// Creates an error for `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self { path: path.into(), message: message.into() }
    }
}

/// An inclusive integer range a numeric field is clamped to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clamp {
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
}

impl Clamp {
    const fn new(min: u64, max: u64) -> Self {
        Self { min, max }
    }

    /// Clamps a finite number (fractions are truncated toward zero first).
    pub fn apply(self, n: f64) -> u64 {
        if n.is_nan() || n <= self.min as f64 {
            return self.min;
        }
        if n >= self.max as f64 {
            return self.max;
        }
        (n.trunc() as u64).clamp(self.min, self.max)
    }
}

/// Clamp of `timeoutMs`.
pub const TIMEOUT_MS: Clamp = Clamp::new(100, 60_000);
/// Clamp of `memoryLimitBytes`.
pub const MEMORY_LIMIT_BYTES: Clamp = Clamp::new(1_048_576, 1_073_741_824);
/// Clamp of `maxOutputBytes`.
pub const MAX_OUTPUT_BYTES: Clamp = Clamp::new(1_024, 10_485_760);
/// Clamp of `maxSnapshotBytes`.
pub const MAX_SNAPSHOT_BYTES: Clamp = Clamp::new(1_024, 268_435_456);
/// Clamp of `maxPendingToolCalls`.
pub const MAX_PENDING_TOOL_CALLS: Clamp = Clamp::new(1, 128);
/// Clamp of `snapshotTtlSeconds`.
pub const SNAPSHOT_TTL_SECONDS: Clamp = Clamp::new(1, 86_400);
/// Clamp of `maxSearchLimit`.
pub const MAX_SEARCH_LIMIT: Clamp = Clamp::new(1, 50);

/// The name of the default engine (contract §3 `runtime`).
pub const DEFAULT_RUNTIME: &str = "quickjs-wasi";

/// The effective `tools.codeMode` configuration, after defaults and clamps.
///
/// Every limit exists to stop a specific abuse by hostile guest code; each field's doc says which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CodeModeConfig {
    /// The sole enable gate (contract C1). Default `false`.
    pub enabled: bool,
    /// The engine name (`"quickjs-wasi"` by default; `"quickjs"` selects the native engine when compiled
    /// in). An engine that is not compiled in or cannot load makes runs fail closed with
    /// `runtime_unavailable` (contract C4).
    pub runtime: String,
    /// Exposure mode; only `"only"` exists.
    pub mode: String,
    /// Accepted cell languages; a cell in another language fails with `unsupported_language`.
    pub languages: Vec<Language>,
    /// Wall-clock cap of one `exec` or `wait` call, 100–60 000 ms (default 10 000). Stops a guest from
    /// holding a worker forever (`while(true){}` ends as `timeout`).
    pub timeout_ms: u64,
    /// Guest heap limit, 1 MiB–1 GiB (default 64 MiB). Stops memory bombs from exhausting the host.
    pub memory_limit_bytes: u64,
    /// Cap on what one result carries back (text, JSON output and the final value), 1 KiB–10 MiB
    /// (default 64 KiB). Stops a cell from flooding the model's context or the host's memory.
    pub max_output_bytes: u64,
    /// Cap on one serialized snapshot, 1 KiB–256 MiB (default 10 MiB). Stops suspended runs from
    /// filling host memory or disk.
    pub max_snapshot_bytes: u64,
    /// Nested calls in flight at once, 1–128 (default 16). Stops a cell from flooding tools and upstream
    /// servers with parallel calls.
    pub max_pending_tool_calls: u64,
    /// How long a suspended run stays resumable, 1–86 400 s (default 900). Bounds how long state is kept.
    pub snapshot_ttl_seconds: u64,
    /// Default number of `tools.search` results, 1–`maxSearchLimit` (default 8).
    pub search_default_limit: u64,
    /// Largest number of `tools.search` results, 1–50 (default 50). Bounds the size of search answers.
    pub max_search_limit: u64,
}

impl Default for CodeModeConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            runtime: DEFAULT_RUNTIME.to_string(),
            mode: "only".to_string(),
            languages: vec![Language::Javascript, Language::Typescript],
            timeout_ms: 10_000,
            memory_limit_bytes: 67_108_864,
            max_output_bytes: 65_536,
            max_snapshot_bytes: 10_485_760,
            max_pending_tool_calls: 16,
            snapshot_ttl_seconds: 900,
            search_default_limit: 8,
            max_search_limit: 50,
        }
    }
}

/// The keys of the `tools.codeMode` object, in the order of contract §3.
pub const KEYS: [&str; 12] = [
    "enabled",
    "runtime",
    "mode",
    "languages",
    "timeoutMs",
    "memoryLimitBytes",
    "maxOutputBytes",
    "maxSnapshotBytes",
    "maxPendingToolCalls",
    "snapshotTtlSeconds",
    "searchDefaultLimit",
    "maxSearchLimit",
];

impl CodeModeConfig {
    /// A config with code mode enabled and every other field at its default.
    pub fn enabled() -> Self {
        Self { enabled: true, ..Self::default() }
    }

    /// Parses the value found at `tools.codeMode` (`None` when the key is absent).
    ///
    /// `path` is used in error messages (normally `"tools.codeMode"`).
    pub fn from_value(value: Option<&Value>, path: &str) -> Result<Self, ConfigError> {
        let mut cfg = Self::default();
        let obj = match value {
            None | Some(Value::Null) => return Ok(cfg),
            Some(Value::Bool(b)) => {
                cfg.enabled = *b;
                return Ok(cfg);
            }
            Some(Value::Object(obj)) => obj,
            Some(other) => {
                return Err(ConfigError::new(
                    path,
                    format!("expected true, false or an object, got {}", type_name(other)),
                ));
            }
        };
        if let Some(key) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(ConfigError::new(
                format!("{path}.{key}"),
                format!("unknown key `{key}` (known keys: {})", KEYS.join(", ")),
            ));
        }
        let at = |key: &str| format!("{path}.{key}");
        if let Some(v) = obj.get("enabled") {
            cfg.enabled = v.as_bool().ok_or_else(|| ConfigError::new(at("enabled"), expected("a boolean", v)))?;
        }
        if let Some(v) = obj.get("runtime") {
            let s = v.as_str().ok_or_else(|| ConfigError::new(at("runtime"), expected("a string", v)))?;
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
                return Err(ConfigError::new(
                    at("runtime"),
                    format!("`{s}` is not an engine name (expected e.g. \"quickjs-wasi\")"),
                ));
            }
            cfg.runtime = s.to_string();
        }
        if let Some(v) = obj.get("mode") {
            match v.as_str() {
                Some("only") => {}
                _ => {
                    return Err(ConfigError::new(at("mode"), format!("the only supported mode is \"only\", got {v}")));
                }
            }
        }
        if let Some(v) = obj.get("languages") {
            let items = v.as_array().ok_or_else(|| ConfigError::new(at("languages"), expected("an array", v)))?;
            let mut langs = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let lang = item.as_str().and_then(Language::parse).ok_or_else(|| {
                    ConfigError::new(
                        format!("{}[{i}]", at("languages")),
                        format!("expected \"javascript\" or \"typescript\", got {item}"),
                    )
                })?;
                if !langs.contains(&lang) {
                    langs.push(lang);
                }
            }
            if langs.is_empty() {
                return Err(ConfigError::new(at("languages"), "must name at least one language"));
            }
            cfg.languages = langs;
        }
        let num = |key: &str, clamp: Clamp, default: u64| -> Result<u64, ConfigError> {
            match obj.get(key) {
                None => Ok(default),
                Some(v) => match v.as_f64() {
                    Some(n) if n.is_finite() => Ok(clamp.apply(n)),
                    _ => Err(ConfigError::new(at(key), expected("a number", v))),
                },
            }
        };
        cfg.timeout_ms = num("timeoutMs", TIMEOUT_MS, cfg.timeout_ms)?;
        cfg.memory_limit_bytes = num("memoryLimitBytes", MEMORY_LIMIT_BYTES, cfg.memory_limit_bytes)?;
        cfg.max_output_bytes = num("maxOutputBytes", MAX_OUTPUT_BYTES, cfg.max_output_bytes)?;
        cfg.max_snapshot_bytes = num("maxSnapshotBytes", MAX_SNAPSHOT_BYTES, cfg.max_snapshot_bytes)?;
        cfg.max_pending_tool_calls = num("maxPendingToolCalls", MAX_PENDING_TOOL_CALLS, cfg.max_pending_tool_calls)?;
        cfg.snapshot_ttl_seconds = num("snapshotTtlSeconds", SNAPSHOT_TTL_SECONDS, cfg.snapshot_ttl_seconds)?;
        cfg.max_search_limit = num("maxSearchLimit", MAX_SEARCH_LIMIT, cfg.max_search_limit)?;
        let search_clamp = Clamp::new(1, cfg.max_search_limit);
        cfg.search_default_limit =
            num("searchDefaultLimit", search_clamp, cfg.search_default_limit)?.min(cfg.max_search_limit);
        Ok(cfg)
    }

    /// Parses `tools.codeMode` out of a whole JSON5 configuration document (`{ tools: { codeMode } }`).
    ///
    /// Only the `tools.codeMode` key is interpreted; other keys of the document belong to other layers.
    pub fn from_json5_document(text: &str) -> Result<Self, ConfigError> {
        let doc = parse_json5(text)?;
        Self::from_document(&doc)
    }

    /// Parses `tools.codeMode` out of an already parsed configuration document.
    pub fn from_document(doc: &Value) -> Result<Self, ConfigError> {
        let tools = match doc {
            Value::Object(obj) => obj.get("tools"),
            other => {
                return Err(ConfigError::new("(root)", format!("expected an object, got {}", type_name(other))));
            }
        };
        match tools {
            None | Some(Value::Null) => Ok(Self::default()),
            Some(Value::Object(t)) => Self::from_value(t.get("codeMode"), "tools.codeMode"),
            Some(other) => Err(ConfigError::new("tools", format!("expected an object, got {}", type_name(other)))),
        }
    }

    /// Whether `lang` is accepted by this config.
    pub fn accepts(&self, lang: Language) -> bool {
        self.languages.contains(&lang)
    }
}

/// Parses JSON5 text (JSON is a subset) into a JSON value, with a config error on bad syntax.
pub fn parse_json5(text: &str) -> Result<Value, ConfigError> {
    json5::from_str::<Value>(text).map_err(|e| ConfigError::new("(document)", format!("not valid JSON5: {e}")))
}

/// The JSON type name of a value, for error messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn expected(what: &str, got: &Value) -> String {
    format!("expected {what}, got {}", type_name(got))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<CodeModeConfig, ConfigError> {
        CodeModeConfig::from_value(Some(&v), "tools.codeMode")
    }

    #[test]
    fn c3_absent_false_and_object_without_enabled_stay_disabled() {
        assert!(!CodeModeConfig::from_value(None, "tools.codeMode").unwrap().enabled);
        assert!(!parse(json!(false)).unwrap().enabled);
        // C1 / V2: other fields do not enable code mode.
        let cfg = parse(json!({ "timeoutMs": 5000, "maxPendingToolCalls": 4 })).unwrap();
        assert!(!cfg.enabled);
        assert_eq!(cfg.timeout_ms, 5000);
        assert!(!parse(json!({ "enabled": false })).unwrap().enabled);
    }

    #[test]
    fn c2_true_is_shorthand_for_enabled() {
        let cfg = parse(json!(true)).unwrap();
        assert_eq!(cfg, CodeModeConfig::enabled());
    }

    #[test]
    fn defaults_match_spec_table() {
        let c = CodeModeConfig::default();
        assert_eq!(c.runtime, "quickjs-wasi");
        assert_eq!(c.mode, "only");
        assert_eq!(c.languages, vec![Language::Javascript, Language::Typescript]);
        assert_eq!(
            (c.timeout_ms, c.memory_limit_bytes, c.max_output_bytes, c.max_snapshot_bytes),
            (10_000, 67_108_864, 65_536, 10_485_760)
        );
        assert_eq!(
            (c.max_pending_tool_calls, c.snapshot_ttl_seconds, c.search_default_limit, c.max_search_limit),
            (16, 900, 8, 50)
        );
    }

    #[test]
    fn c6_numbers_are_clamped() {
        let cfg = parse(json!({
            "enabled": true, "timeoutMs": 1, "memoryLimitBytes": 1e12, "maxOutputBytes": -5,
            "maxSnapshotBytes": 0, "maxPendingToolCalls": 1000, "snapshotTtlSeconds": 999999,
            "maxSearchLimit": 10, "searchDefaultLimit": 40
        }))
        .unwrap();
        assert_eq!(cfg.timeout_ms, 100);
        assert_eq!(cfg.memory_limit_bytes, 1_073_741_824);
        assert_eq!(cfg.max_output_bytes, 1024);
        assert_eq!(cfg.max_snapshot_bytes, 1024);
        assert_eq!(cfg.max_pending_tool_calls, 128);
        assert_eq!(cfg.snapshot_ttl_seconds, 86_400);
        assert_eq!(cfg.max_search_limit, 10);
        assert_eq!(cfg.search_default_limit, 10);
        assert_eq!(parse(json!({"timeoutMs": 2500.9})).unwrap().timeout_ms, 2500);
    }

    #[test]
    fn unknown_keys_and_bad_types_name_the_path() {
        let e = parse(json!({ "enabled": true, "timeout": 5 })).unwrap_err();
        assert_eq!(e.path, "tools.codeMode.timeout");
        assert!(e.message.contains("unknown key `timeout`"), "{e}");
        let e = parse(json!({ "timeoutMs": "5000" })).unwrap_err();
        assert_eq!(e.path, "tools.codeMode.timeoutMs");
        let e = parse(json!({ "enabled": "yes" })).unwrap_err();
        assert_eq!(e.path, "tools.codeMode.enabled");
        let e = parse(json!({ "languages": ["javascript", "python"] })).unwrap_err();
        assert_eq!(e.path, "tools.codeMode.languages[1]");
        let e = parse(json!({ "languages": [] })).unwrap_err();
        assert_eq!(e.path, "tools.codeMode.languages");
        let e = parse(json!({ "mode": "all" })).unwrap_err();
        assert_eq!(e.path, "tools.codeMode.mode");
        let e = parse(json!({ "runtime": "Quick JS" })).unwrap_err();
        assert_eq!(e.path, "tools.codeMode.runtime");
        let e = parse(json!(12)).unwrap_err();
        assert_eq!(e.path, "tools.codeMode");
    }

    #[test]
    fn json5_documents_are_accepted() {
        let cfg = CodeModeConfig::from_json5_document(
            "// comment\n{ tools: { codeMode: { enabled: true, timeoutMs: 2000, languages: ['javascript'], }, }, }",
        )
        .unwrap();
        assert!(cfg.enabled);
        assert_eq!(cfg.timeout_ms, 2000);
        assert_eq!(cfg.languages, vec![Language::Javascript]);
        assert!(!CodeModeConfig::from_json5_document("{}").unwrap().enabled);
        assert!(CodeModeConfig::from_json5_document("{ tools: { codeMode: true } }").unwrap().enabled);
        let e = CodeModeConfig::from_json5_document("{ tools: ").unwrap_err();
        assert_eq!(e.path, "(document)");
        let e = CodeModeConfig::from_json5_document("{ tools: 3 }").unwrap_err();
        assert_eq!(e.path, "tools");
    }

    proptest! {
        #[test]
        fn clamps_always_land_in_range(n in proptest::num::f64::ANY) {
            prop_assume!(n.is_finite());
            let cfg = parse(json!({
                "timeoutMs": n, "memoryLimitBytes": n, "maxOutputBytes": n, "maxSnapshotBytes": n,
                "maxPendingToolCalls": n, "snapshotTtlSeconds": n, "maxSearchLimit": n, "searchDefaultLimit": n,
            })).unwrap();
            for (v, c) in [
                (cfg.timeout_ms, TIMEOUT_MS), (cfg.memory_limit_bytes, MEMORY_LIMIT_BYTES),
                (cfg.max_output_bytes, MAX_OUTPUT_BYTES), (cfg.max_snapshot_bytes, MAX_SNAPSHOT_BYTES),
                (cfg.max_pending_tool_calls, MAX_PENDING_TOOL_CALLS),
                (cfg.snapshot_ttl_seconds, SNAPSHOT_TTL_SECONDS), (cfg.max_search_limit, MAX_SEARCH_LIMIT),
            ] {
                prop_assert!(v >= c.min && v <= c.max);
            }
            prop_assert!(cfg.search_default_limit >= 1 && cfg.search_default_limit <= cfg.max_search_limit);
        }

        #[test]
        fn in_range_integers_are_kept(t in 100u64..=60_000, p in 1u64..=128) {
            let cfg = parse(json!({ "timeoutMs": t, "maxPendingToolCalls": p })).unwrap();
            prop_assert_eq!(cfg.timeout_ms, t);
            prop_assert_eq!(cfg.max_pending_tool_calls, p);
        }
    }
}
