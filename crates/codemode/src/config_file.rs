//! The codemode configuration file: JSON5, in the `openclaw.json` shape (SPEC §3, §22).
//!
//! ```json5
//! {
//!   tools: {
//!     codeMode: { enabled: true, timeoutMs: 10000 },
//!   },
//! }
//! ```
//!
//! Unknown keys are rejected with an error naming their path, so a typo never silently changes
//! behaviour.

use codemode_core::config::{CodeModeConfig, ConfigError, parse_json5, type_name};
use serde_json::Value;
use std::path::Path;

/// Keys accepted at the top level.
pub const TOP_LEVEL_KEYS: [&str; 1] = ["tools"];
/// Keys accepted under `tools`.
pub const TOOLS_KEYS: [&str; 1] = ["codeMode"];

/// A parsed configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigFile {
    /// `tools.codeMode`, after defaults and clamps.
    pub code_mode: CodeModeConfig,
    /// Whether `tools.codeMode` was present at all.
    pub code_mode_present: bool,
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

impl ConfigFile {
    /// Parses JSON5 text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let doc = parse_json5(text)?;
        let Value::Object(root) = &doc else {
            return Err(ConfigError::new("(root)", format!("expected an object, got {}", type_name(&doc))));
        };
        check_keys(root, &TOP_LEVEL_KEYS, "")?;
        let mut out = ConfigFile::default();
        match root.get("tools") {
            None | Some(Value::Null) => {}
            Some(Value::Object(tools)) => {
                check_keys(tools, &TOOLS_KEYS, "tools")?;
                out.code_mode_present = tools.contains_key("codeMode");
                out.code_mode = CodeModeConfig::from_value(tools.get("codeMode"), "tools.codeMode")?;
            }
            Some(other) => {
                return Err(ConfigError::new("tools", format!("expected an object, got {}", type_name(other))));
            }
        }
        Ok(out)
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

    #[test]
    fn parses_and_rejects_unknown_keys() {
        let f = ConfigFile::parse("{ tools: { codeMode: { enabled: true, maxPendingToolCalls: 4 } } }").unwrap();
        assert!(f.code_mode.enabled && f.code_mode_present);
        assert_eq!(f.code_mode.max_pending_tool_calls, 4);
        let f = ConfigFile::parse("{}").unwrap();
        assert!(!f.code_mode.enabled && !f.code_mode_present);
        assert_eq!(ConfigFile::parse("{ tool: {} }").unwrap_err().path, "tool");
        assert_eq!(ConfigFile::parse("{ tools: { codemode: true } }").unwrap_err().path, "tools.codemode");
        assert_eq!(
            ConfigFile::parse("{ tools: { codeMode: { enabled: 1 } } }").unwrap_err().path,
            "tools.codeMode.enabled"
        );
        assert_eq!(ConfigFile::parse("[]").unwrap_err().path, "(root)");
    }
}
