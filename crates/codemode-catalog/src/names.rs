//! Safe names for `tools.<safeName>(input)` convenience functions (contract K1–K5).

use codemode_core::guest::{FORBIDDEN_KEYS, TOOL_HELPERS, is_js_internal_name};

fn is_forbidden_key(name: &str) -> bool {
    FORBIDDEN_KEYS.contains(&name)
}

/// Names that may never become convenience functions: the catalog helpers (K3), keys dropped at the
/// bridge, and the names the language itself reaches for (`then` would make `tools` look like a
/// promise to `await`, `toString` / `valueOf` / `toJSON` would be called by coercion or
/// serialization). Such tools stay callable by id.
pub fn is_reserved(name: &str) -> bool {
    TOOL_HELPERS.contains(&name) || is_forbidden_key(name) || is_js_internal_name(name)
}

/// Normalises a tool name into a JavaScript identifier: every character outside `[A-Za-z0-9_$]`
/// becomes `_`, and a leading digit gets a `_` prefix. `web-search` → `web_search`,
/// `2fa.check` → `_2fa_check`. Empty names stay empty (and get no convenience function).
pub fn safe_name(name: &str) -> String {
    let mut out: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '$' { c } else { '_' }).collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation() {
        assert_eq!(safe_name("web_search"), "web_search");
        assert_eq!(safe_name("web-search"), "web_search");
        assert_eq!(safe_name("a.b c"), "a_b_c");
        assert_eq!(safe_name("2fa"), "_2fa");
        assert_eq!(safe_name("héllo"), "h_llo");
        assert!(is_reserved("search") && is_reserved("callValue") && is_reserved("__proto__") && is_reserved("then"));
        for n in ["toString", "valueOf", "toJSON", "hasOwnProperty", "toLocaleString", "__defineGetter__"] {
            assert!(is_reserved(n), "{n}");
        }
        assert!(!is_reserved("exec"));
    }
}
