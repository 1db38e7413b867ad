//! Inputs checked at the bridge: a nested call whose input violates its tool's input
//! schema fails in the guest before anything is sent, with the JSON pointer, what the schema
//! expects there and the JSON type that was given — never the given value (it may be a secret or
//! large).
//!
//! Each catalog tool compiles its input schema once, on its first call (a catalog of a thousand
//! upstream tools compiles only the schemas its runs use); a new catalog version compiles anew. A
//! schema that does not compile leaves the tool's calls unchecked ([`InputCheck::check`] says so
//! once, for the log). A tool marked [`unchecked_input`](codemode_core::catalog::ToolDefinition::unchecked_input)
//! (`validateInputs: false` on its MCP server) is never checked.

use codemode_core::text::for_display;
use serde_json::Value;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Longest piece of schema or input text quoted in an error (property names, patterns, formats).
/// Prevents: a hostile schema or a huge property name making error messages (and the model's
/// context) arbitrarily long.
const MAX_QUOTE: usize = 64;

/// Most enum values listed in an error.
const MAX_ENUM_LISTED: usize = 6;

/// The input check of one catalog tool.
#[derive(Default)]
pub struct InputCheck {
    compiled: OnceLock<Result<jsonschema::Validator, String>>,
    reported: AtomicBool,
}

impl std::fmt::Debug for InputCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InputCheck")
    }
}

/// Why an input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("input {where_} {expected}, got {given} (the tool's input schema; the call was not made)")]
pub struct InputError {
    /// `at `/path`` or `at the top level`.
    where_: String,
    /// What the schema expects there (`expected an integer`, `needs property `name``, …).
    pub expected: String,
    /// The JSON type found there.
    pub given: &'static str,
    /// JSON pointer into the input.
    pub pointer: String,
}

/// What [`InputCheck::check`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// The input matches the schema (or the tool is not checked).
    Valid,
    /// It does not.
    Invalid(InputError),
    /// The schema does not compile: the call goes unchecked. Reported once per tool (`first`).
    Unchecked {
        /// Why the schema does not compile.
        reason: String,
        /// This is the first call that met it (log it now).
        first: bool,
    },
}

fn quote(text: &str) -> String {
    let shown: String = for_display(text).chars().take(MAX_QUOTE).collect();
    if text.chars().count() > MAX_QUOTE { format!("{shown}…") } else { shown }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_words(t: &Value) -> String {
    let one = |s: &str| match s {
        "integer" | "object" | "array" => format!("an {s}"),
        "null" => "null".to_string(),
        other => format!("a {}", quote(other)),
    };
    match t {
        Value::String(s) => one(s),
        Value::Array(a) => a.iter().filter_map(Value::as_str).map(one).collect::<Vec<_>>().join(" or "),
        _ => "a value of another type".into(),
    }
}

/// What the schema keyword at `schema_path` asks for, in words, from the schema alone.
fn expectation(schema: &Value, error: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as K;
    let at = schema.pointer(error.schema_path().as_str());
    let limit = || at.map(|v| quote(&v.to_string())).unwrap_or_else(|| "?".into());
    match error.kind() {
        K::Type { .. } => format!("expected {}", at.map(type_words).unwrap_or_else(|| "another type".into())),
        K::Required { property } => {
            format!("needs property `{}`", quote(property.as_str().unwrap_or(&property.to_string())))
        }
        K::AdditionalProperties { unexpected } | K::UnevaluatedProperties { unexpected } => {
            let names: Vec<String> = unexpected.iter().take(3).map(|n| format!("`{}`", quote(n))).collect();
            format!("allows no property {}", names.join(", "))
        }
        K::Enum { options } => {
            let list: Vec<String> = options
                .as_array()
                .map(|a| a.iter().take(MAX_ENUM_LISTED).map(|v| quote(&v.to_string())).collect())
                .unwrap_or_default();
            let more = options.as_array().map_or(0, |a| a.len().saturating_sub(MAX_ENUM_LISTED));
            let tail = if more > 0 { format!(", … ({more} more)") } else { String::new() };
            format!("expected one of {}{tail}", list.join(", "))
        }
        K::Constant { .. } => format!("expected the constant {}", limit()),
        K::Minimum { .. } => format!("expected a number ≥ {}", limit()),
        K::Maximum { .. } => format!("expected a number ≤ {}", limit()),
        K::ExclusiveMinimum { .. } => format!("expected a number > {}", limit()),
        K::ExclusiveMaximum { .. } => format!("expected a number < {}", limit()),
        K::MinLength { limit } => format!("expected at least {limit} characters"),
        K::MaxLength { limit } => format!("expected at most {limit} characters"),
        K::MinItems { limit } => format!("expected at least {limit} items"),
        K::MaxItems { limit } => format!("expected at most {limit} items"),
        K::MinProperties { limit } => format!("expected at least {limit} properties"),
        K::MaxProperties { limit } => format!("expected at most {limit} properties"),
        K::Pattern { pattern } => format!("expected a string matching /{}/", quote(pattern)),
        K::Format { format } => format!("expected a string in the format `{}`", quote(format)),
        K::UniqueItems => "expected items that are all different".into(),
        K::AnyOf { .. } | K::OneOfNotValid { .. } => "expected a value matching one of the allowed shapes".into(),
        K::OneOfMultipleValid { .. } => "expected a value matching exactly one of the allowed shapes".into(),
        K::FalseSchema => "allows nothing here".into(),
        other => format!("must satisfy `{}`", quote(other.keyword())),
    }
}

impl InputCheck {
    /// Checks `input` against `schema` (the tool's `parameters`), compiling it on the first call.
    pub fn check(&self, schema: &Value, input: &Value) -> Checked {
        let compiled = self.compiled.get_or_init(|| jsonschema::validator_for(schema).map_err(|e| e.to_string()));
        let validator = match compiled {
            Ok(v) => v,
            Err(reason) => {
                let first = !self.reported.swap(true, Ordering::Relaxed);
                return Checked::Unchecked { reason: reason.clone(), first };
            }
        };
        if validator.is_valid(input) {
            return Checked::Valid;
        }
        let Some(error) = validator.iter_errors(input).next() else { return Checked::Valid };
        let pointer = error.instance_path().as_str().to_string();
        let given = input.pointer(&pointer).map_or("nothing", json_type);
        let where_ =
            if pointer.is_empty() { "at the top level".to_string() } else { format!("at `{}`", quote(&pointer)) };
        Checked::Invalid(InputError { where_, expected: expectation(schema, &error), given, pointer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(schema: Value, input: Value) -> Checked {
        InputCheck::default().check(&schema, &input)
    }

    fn message(schema: Value, input: Value) -> String {
        match check(schema, input) {
            Checked::Invalid(e) => e.to_string(),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn names_the_place_the_expectation_and_the_type_never_the_value() {
        let schema = json!({ "type": "object", "properties": {
            "message": { "type": "string" }, "count": { "type": "integer", "minimum": 1 },
            "mode": { "enum": ["a", "b"] } }, "required": ["message"], "additionalProperties": false });
        assert_eq!(check(schema.clone(), json!({ "message": "hi", "count": 2 })), Checked::Valid);
        let m = message(schema.clone(), json!({ "message": "sk-SECRET-123" , "count": 0 }));
        assert_eq!(
            m,
            "input at `/count` expected a number ≥ 1, got integer (the tool's input schema; the call was not made)"
        );
        let m = message(schema.clone(), json!({ "message": 42 }));
        assert!(m.contains("`/message` expected a string, got integer"), "{m}");
        let m = message(schema.clone(), json!({}));
        assert!(m.contains("at the top level needs property `message`, got object"), "{m}");
        let m = message(schema.clone(), json!({ "message": "x", "mode": "sk-SECRET" }));
        assert!(m.contains("expected one of \"a\", \"b\", got string") && !m.contains("SECRET"), "{m}");
        let m = message(schema, json!({ "message": "x", "extra\u{202e}": 1 }));
        assert!(m.contains("allows no property") && !m.contains('\u{202e}'), "{m}");
    }

    #[test]
    fn a_schema_that_does_not_compile_leaves_calls_unchecked_and_says_so_once() {
        let c = InputCheck::default();
        let bad = json!({ "type": 12 });
        assert!(matches!(c.check(&bad, &json!({})), Checked::Unchecked { first: true, .. }));
        assert!(matches!(c.check(&bad, &json!({})), Checked::Unchecked { first: false, .. }));
    }

    #[test]
    fn hostile_schemas_are_quoted_bounded() {
        let long = "p".repeat(10_000);
        let schema = json!({ "type": "object", "required": [long.clone()] });
        let m = message(schema, json!({}));
        assert!(m.len() < 400 && m.contains('…'), "{m}");
    }
}
