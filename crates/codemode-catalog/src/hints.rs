//! Compact, deterministic, size-bounded type hints rendered from JSON Schemas (contract §7 `input`,
//! §8 `output`, D5): `{query: string, count?: number}`.

use serde_json::Value;

/// Longest hint, in characters; longer hints end with `…`.
pub const MAX_HINT_CHARS: usize = 200;
/// Deepest object nesting rendered; deeper objects render as `object`.
const MAX_DEPTH: usize = 3;
/// Most enum members or union variants rendered.
const MAX_ALTERNATIVES: usize = 6;

/// Renders a schema as a compact TypeScript-like type.
pub fn hint(schema: &Value) -> String {
    cap(render(schema, 0))
}

/// Renders a declared output schema, but only when it is closed at every object layer (contract D3);
/// open or partial schemas give `None` and stay reachable through `tools.describe`.
pub fn output_hint(schema: &Value) -> Option<String> {
    if !is_closed(schema, 0) {
        return None;
    }
    let h = render(schema, 0);
    (h.chars().count() <= MAX_HINT_CHARS).then_some(h)
}

fn cap(s: String) -> String {
    if s.chars().count() <= MAX_HINT_CHARS { s } else { s.chars().take(MAX_HINT_CHARS - 1).collect::<String>() + "…" }
}

/// Whether every object layer of `schema` declares `additionalProperties: false` and every layer has
/// a definite shape.
pub fn is_closed(schema: &Value, depth: usize) -> bool {
    if depth > 16 {
        return false;
    }
    let Some(obj) = schema.as_object() else {
        return false;
    };
    if let Some(alts) = obj.get("anyOf").or_else(|| obj.get("oneOf")).and_then(Value::as_array) {
        return !alts.is_empty() && alts.iter().all(|a| is_closed(a, depth + 1));
    }
    if obj.contains_key("enum") || obj.contains_key("const") {
        return true;
    }
    match type_names(obj).as_slice() {
        [] => false,
        types => types.iter().all(|t| match *t {
            "object" => {
                obj.get("additionalProperties") == Some(&Value::Bool(false))
                    && obj
                        .get("properties")
                        .and_then(Value::as_object)
                        .is_none_or(|props| props.values().all(|p| is_closed(p, depth + 1)))
            }
            "array" => obj.get("items").is_some_and(|i| is_closed(i, depth + 1)),
            "string" | "number" | "integer" | "boolean" | "null" => true,
            _ => false,
        }),
    }
}

fn type_names(obj: &serde_json::Map<String, Value>) -> Vec<&str> {
    match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ if obj.contains_key("properties") => vec!["object"],
        _ if obj.contains_key("items") => vec!["array"],
        _ => vec![],
    }
}

fn render(schema: &Value, depth: usize) -> String {
    let Some(obj) = schema.as_object() else {
        return if schema == &Value::Bool(false) { "never".into() } else { "any".into() };
    };
    if let Some(c) = obj.get("const") {
        return literal(c);
    }
    if let Some(values) = obj.get("enum").and_then(Value::as_array) {
        return alternatives(values.iter().map(literal));
    }
    if let Some(alts) = obj.get("anyOf").or_else(|| obj.get("oneOf")).and_then(Value::as_array) {
        return alternatives(alts.iter().map(|a| render(a, depth)));
    }
    let types = type_names(obj);
    if types.is_empty() {
        return "any".into();
    }
    alternatives(types.into_iter().map(|t| match t {
        "object" => render_object(obj, depth),
        "array" => {
            let item = obj.get("items").map(|i| render(i, depth + 1)).unwrap_or_else(|| "any".into());
            if top_level_union(&item) { format!("({item})[]") } else { format!("{item}[]") }
        }
        "integer" => "number".into(),
        other => other.to_string(),
    }))
}

/// Whether `|` appears outside any braces, brackets or parentheses (then `[]` needs parentheses).
fn top_level_union(t: &str) -> bool {
    let mut depth = 0i32;
    let mut in_str = false;
    for c in t.chars() {
        match c {
            '"' => in_str = !in_str,
            '{' | '[' | '(' if !in_str => depth += 1,
            '}' | ']' | ')' if !in_str => depth -= 1,
            '|' if !in_str && depth == 0 => return true,
            _ => {}
        }
    }
    false
}

fn render_object(obj: &serde_json::Map<String, Value>, depth: usize) -> String {
    let Some(props) = obj.get("properties").and_then(Value::as_object) else {
        return "object".into();
    };
    if depth >= MAX_DEPTH {
        return "object".into();
    }
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<String> = props
        .iter()
        .map(|(k, v)| {
            let opt = if required.contains(&k.as_str()) { "" } else { "?" };
            let key = if is_ident(k) { k.clone() } else { Value::String(k.clone()).to_string() };
            format!("{key}{opt}: {}", render(v, depth + 1))
        })
        .collect();
    format!("{{{}}}", fields.join(", "))
}

fn is_ident(k: &str) -> bool {
    !k.is_empty()
        && !k.starts_with(|c: char| c.is_ascii_digit())
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

fn literal(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 { "any".into() } else { s }
}

fn alternatives(items: impl Iterator<Item = String>) -> String {
    let mut all: Vec<String> = items.collect();
    all.dedup();
    if all.is_empty() {
        return "never".into();
    }
    if all.len() > MAX_ALTERNATIVES {
        all.truncate(MAX_ALTERNATIVES);
        all.push("…".into());
    }
    all.join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_compact_types() {
        let s = json!({"type": "object", "properties": {
            "query": {"type": "string"}, "count": {"type": "integer"},
            "mode": {"enum": ["fast", "slow"]}, "tags": {"type": "array", "items": {"type": "string"}},
            "bad key": {"type": ["string", "null"]}
        }, "required": ["query"]});
        assert_eq!(
            hint(&s),
            r#"{query: string, count?: number, mode?: "fast" | "slow", tags?: string[], "bad key"?: string | null}"#
        );
        assert_eq!(hint(&json!({})), "any");
        assert_eq!(hint(&json!({"type": "array", "items": {"enum": ["a", "b"]}})), r#"("a" | "b")[]"#);
        assert_eq!(
            hint(&json!({"type": "array", "items": {"type": "object", "properties": {"s": {"enum": ["a", "b"]}}}})),
            r#"{s?: "a" | "b"}[]"#
        );
        assert_eq!(hint(&json!({"type": "object"})), "object");
        assert_eq!(hint(&json!({"type": "object", "properties": {}})), "{}");
        let deep = json!({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"object","properties":{"d":{"type":"string"}}}}}}}}});
        assert_eq!(hint(&deep), "{a?: {b?: {c?: object}}}");
        let long = json!({"type": "object", "properties": (0..60).map(|i| (format!("field{i}"), json!({"type": "string"}))).collect::<serde_json::Map<_, _>>()});
        let h = hint(&long);
        assert_eq!(h.chars().count(), MAX_HINT_CHARS);
        assert!(h.ends_with('…'));
    }

    #[test]
    fn output_hints_need_closed_schemas() {
        let closed = json!({"type": "array", "items": {"type": "object", "additionalProperties": false,
            "properties": {"id": {"type": "string"}, "paid": {"type": "boolean"}, "tons": {"type": "number"}},
            "required": ["id", "paid", "tons"]}});
        assert_eq!(output_hint(&closed).as_deref(), Some("{id: string, paid: boolean, tons: number}[]"));
        let open = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(output_hint(&open), None);
        let nested_open =
            json!({"type": "object", "additionalProperties": false, "properties": {"a": {"type": "object"}}});
        assert_eq!(output_hint(&nested_open), None);
        assert_eq!(output_hint(&json!({})), None);
    }
}
