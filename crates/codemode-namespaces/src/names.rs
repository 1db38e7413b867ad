//! Name rules of contract §10: which global names a namespace may take (S4, S5) and which keys a scope
//! may hold (S3).

use codemode_core::guest::{FORBIDDEN_KEYS, JS_INTERNAL_NAMES, JS_RESERVED_WORDS, RESERVED_GLOBALS};
use codemode_core::namespace::PATH_SEPARATOR;

/// Prefixes no global name may start with (compared case-insensitively): the sources reserve
/// `__openclaw*`, and codemode reserves `__codemode*` for its own internals (contract S5).
pub const RESERVED_PREFIXES: [&str; 2] = ["__openclaw", "__codemode"];

/// Longest global name. Prevents: an `exec` description bloated by one registration.
pub const MAX_GLOBAL_NAME_CHARS: usize = 64;

/// Globals of the JavaScript language and of common hosts. A namespace named like one would hide
/// the built-in from the model's code (`Object`, `JSON`, `Promise`) or fail to install (`NaN`,
/// `undefined` cannot be redefined); such names are refused at registration.
pub const LANGUAGE_GLOBALS: [&str; 80] = [
    "globalThis",
    "Object",
    "Function",
    "Array",
    "Number",
    "Boolean",
    "String",
    "Symbol",
    "BigInt",
    "Date",
    "Promise",
    "RegExp",
    "Error",
    "AggregateError",
    "EvalError",
    "RangeError",
    "ReferenceError",
    "SyntaxError",
    "TypeError",
    "URIError",
    "InternalError",
    "SuppressedError",
    "JSON",
    "Math",
    "Intl",
    "Reflect",
    "Proxy",
    "Atomics",
    "ArrayBuffer",
    "SharedArrayBuffer",
    "DataView",
    "Int8Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "Int16Array",
    "Uint16Array",
    "Int32Array",
    "Uint32Array",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "BigInt64Array",
    "BigUint64Array",
    "Map",
    "Set",
    "WeakMap",
    "WeakSet",
    "WeakRef",
    "FinalizationRegistry",
    "Iterator",
    "DisposableStack",
    "AsyncDisposableStack",
    "Infinity",
    "NaN",
    "undefined",
    "eval",
    "isFinite",
    "isNaN",
    "parseFloat",
    "parseInt",
    "decodeURI",
    "decodeURIComponent",
    "encodeURI",
    "encodeURIComponent",
    "escape",
    "unescape",
    "arguments",
    "setTimeout",
    "clearTimeout",
    "setInterval",
    "clearInterval",
    "setImmediate",
    "clearImmediate",
    "queueMicrotask",
    "structuredClone",
    "fetch",
    "process",
    "Buffer",
    "print",
    "performance",
];

/// Why a namespace's global name is refused (contract S4, S5).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GlobalNameError {
    /// No name at all.
    #[error("the global name is empty")]
    Empty,
    /// Longer than [`MAX_GLOBAL_NAME_CHARS`].
    #[error("the global name is longer than {MAX_GLOBAL_NAME_CHARS} characters")]
    TooLong,
    /// Not a JavaScript identifier.
    #[error(
        "global name `{0}` is not a JavaScript identifier (letters, digits, `_` and `$`, not starting with a digit)"
    )]
    NotIdentifier(String),
    /// A JavaScript reserved word.
    #[error("global name `{0}` is a JavaScript reserved word")]
    ReservedWord(String),
    /// One of code mode's own globals (`tools`, `MCP`, …).
    #[error("global name `{0}` collides with a code-mode global")]
    CodeModeGlobal(String),
    /// Starts with a prefix reserved for the host.
    #[error("global name `{name}` uses the reserved prefix `{prefix}`")]
    ReservedPrefix {
        /// The name.
        name: String,
        /// The prefix it starts with.
        prefix: &'static str,
    },
    /// A built-in global of the JavaScript language or its hosts.
    #[error("global name `{0}` collides with a built-in JavaScript global")]
    LanguageGlobal(String),
}

/// Checks a namespace's global name (contract S4, S5). The error says what is wrong.
pub fn check_global_name(name: &str) -> Result<(), GlobalNameError> {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Err(GlobalNameError::Empty);
    };
    if name.chars().count() > MAX_GLOBAL_NAME_CHARS {
        return Err(GlobalNameError::TooLong);
    }
    let ident_start = |c: char| c.is_ascii_alphabetic() || c == '_' || c == '$';
    if !ident_start(first) || !chars.all(|c| ident_start(c) || c.is_ascii_digit()) {
        return Err(GlobalNameError::NotIdentifier(name.to_string()));
    }
    if JS_RESERVED_WORDS.contains(&name) {
        return Err(GlobalNameError::ReservedWord(name.to_string()));
    }
    if RESERVED_GLOBALS.contains(&name) || ["MCP", "API", "ALL_TOOLS"].contains(&name) {
        return Err(GlobalNameError::CodeModeGlobal(name.to_string()));
    }
    let lower = name.to_ascii_lowercase();
    if let Some(prefix) = RESERVED_PREFIXES.iter().find(|p| lower.starts_with(*p)) {
        return Err(GlobalNameError::ReservedPrefix { name: name.to_string(), prefix });
    }
    if LANGUAGE_GLOBALS.contains(&name) {
        return Err(GlobalNameError::LanguageGlobal(name.to_string()));
    }
    Ok(())
}

/// Why a key of a scope object is refused (contract S3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// An empty key.
    #[error("empty keys are not allowed")]
    Empty,
    /// `__proto__`, `constructor`, `prototype`.
    #[error("key `{0}` is not allowed (prototype pollution)")]
    PrototypePollution(String),
    /// A name the language looks up by itself (`then`, `toString`, …).
    #[error("key `{0}` is a name JavaScript looks up by itself and is not allowed")]
    LanguageLookup(String),
    /// Contains the path separator.
    #[error("key `{0}` contains the path separator `{PATH_SEPARATOR}`")]
    PathSeparator(String),
}

/// Checks one key of a scope object (contract S3): not empty, not a prototype-polluting key, not a name
/// the language looks up by itself (`then` would make `await Shipping` call a tool), and without the
/// path separator.
pub fn check_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if FORBIDDEN_KEYS.contains(&key) {
        return Err(KeyError::PrototypePollution(key.to_string()));
    }
    if JS_INTERNAL_NAMES.contains(&key) {
        return Err(KeyError::LanguageLookup(key.to_string()));
    }
    if key.contains(PATH_SEPARATOR) {
        return Err(KeyError::PathSeparator(key.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s4_s5_global_names() {
        for good in ["Shipping", "Issues", "_x", "$ns", "a1", "Fictions"] {
            assert_eq!(check_global_name(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("1abc", "identifier"),
            ("a-b", "identifier"),
            ("a.b", "identifier"),
            ("é", "identifier"),
            ("class", "reserved word"),
            ("tools", "code-mode global"),
            ("namespaces", "code-mode global"),
            ("yield_control", "code-mode global"),
            ("MCP", "code-mode global"),
            ("API", "code-mode global"),
            ("ALL_TOOLS", "code-mode global"),
            ("__openclawInternal", "reserved prefix"),
            ("__OpenClaw", "reserved prefix"),
            ("__codemode_x", "reserved prefix"),
            ("Object", "built-in JavaScript global"),
            ("NaN", "built-in JavaScript global"),
            ("globalThis", "built-in JavaScript global"),
            ("setImmediate", "built-in JavaScript global"),
        ] {
            let err = check_global_name(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert_eq!(check_global_name(&"a".repeat(65)), Err(GlobalNameError::TooLong));
        assert_eq!(check_global_name("class"), Err(GlobalNameError::ReservedWord("class".into())));
        assert_eq!(check_key("then"), Err(KeyError::LanguageLookup("then".into())));
    }

    #[test]
    fn s3_keys() {
        for good in ["list", "unpaidOver", "0", "with space", "ünïcode"] {
            assert_eq!(check_key(good), Ok(()), "{good}");
        }
        for bad in ["", "__proto__", "constructor", "prototype", "then", "toString", "a.b", "."] {
            assert!(check_key(bad).is_err(), "{bad}");
        }
    }
}
