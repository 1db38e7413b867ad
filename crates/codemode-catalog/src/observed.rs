//! Result types learned from observed results: for a tool that declares no
//! `outputSchema`, the shapes of the results the runtime actually sees are merged into one type —
//! optional fields, unions of scalars, arrays of merged elements — and shown to the model, marked
//! *observed* with the number of results behind it. Only shapes are kept, never values.
//!
//! Bounded: at most [`MAX_DEPTH`] levels, [`MAX_FIELDS`] fields per object and [`MAX_UNION`]
//! alternatives; past a bound the type widens (`unknown`, an index signature). A result that does
//! not fit the learned type widens it; nothing ever fails a call.

use serde_json::Value;
use std::collections::BTreeMap;

/// Deepest level of a learned type; deeper values are `unknown`. Prevents: a deeply nested result
/// making the type (and every description that shows it) huge.
pub const MAX_DEPTH: usize = 6;
/// Most fields kept per object; more make the object an index signature.
pub const MAX_FIELDS: usize = 40;
/// Most alternatives of a union; more make it `unknown`.
pub const MAX_UNION: usize = 4;
/// Longest rendered type; a longer one is cut to `unknown` at the top. Prevents: the quick index or
/// a description growing with every odd result.
pub const MAX_RENDERED: usize = 1_500;

/// A learned type.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Shape {
    /// No value seen yet.
    Never,
    /// Anything (past a bound).
    Unknown,
    /// `null`.
    Null,
    /// `boolean`.
    Bool,
    /// An integer (`number`, known to be whole).
    Integer,
    /// `number`.
    Number,
    /// `string`.
    String,
    /// An array of elements of one merged shape.
    Array(Box<Shape>),
    /// An object: its fields (with how many of the merged objects had each), how many objects were
    /// merged, and whether fields past [`MAX_FIELDS`] were seen (then other keys are allowed).
    Object {
        /// Field shapes and the number of objects that had the field.
        fields: BTreeMap<String, (Shape, u64)>,
        /// Objects merged.
        count: u64,
        /// Fields were dropped at the bound.
        open: bool,
    },
    /// Alternatives of different kinds.
    Union(Vec<Shape>),
}

fn kind(s: &Shape) -> u8 {
    match s {
        Shape::Never => 0,
        Shape::Unknown => 1,
        Shape::Null => 2,
        Shape::Bool => 3,
        Shape::Integer | Shape::Number => 4,
        Shape::String => 5,
        Shape::Array(_) => 6,
        Shape::Object { .. } => 7,
        Shape::Union(_) => 8,
    }
}

impl Shape {
    /// The shape of one value.
    pub fn of(value: &Value) -> Shape {
        Self::of_at(value, 0)
    }

    fn of_at(value: &Value, depth: usize) -> Shape {
        if depth >= MAX_DEPTH {
            return Shape::Unknown;
        }
        match value {
            Value::Null => Shape::Null,
            Value::Bool(_) => Shape::Bool,
            Value::Number(n) if n.is_i64() || n.is_u64() => Shape::Integer,
            Value::Number(_) => Shape::Number,
            Value::String(_) => Shape::String,
            Value::Array(items) => {
                Shape::Array(Box::new(items.iter().fold(Shape::Never, |acc, v| acc.merge(Self::of_at(v, depth + 1)))))
            }
            Value::Object(m) => {
                let open = m.len() > MAX_FIELDS;
                let fields =
                    m.iter().take(MAX_FIELDS).map(|(k, v)| (k.clone(), (Self::of_at(v, depth + 1), 1))).collect();
                Shape::Object { fields, count: 1, open }
            }
        }
    }

    /// The narrowest learned type that accepts everything `self` and `other` accept.
    pub fn merge(self, other: Shape) -> Shape {
        use Shape as S;
        match (self, other) {
            (S::Never, x) | (x, S::Never) => x,
            (S::Unknown, _) | (_, S::Unknown) => S::Unknown,
            (S::Union(a), b) => merge_into_union(a, b),
            (a, S::Union(b)) => b.into_iter().fold(a, Shape::merge),
            (S::Integer, S::Number) | (S::Number, S::Integer) => S::Number,
            (S::Array(a), S::Array(b)) => S::Array(Box::new(a.merge(*b))),
            (S::Object { fields: mut fa, count: ca, open: oa }, S::Object { fields: fb, count: cb, open: ob }) => {
                let mut open = oa || ob;
                for (k, (shape, seen)) in fb {
                    match fa.remove(&k) {
                        Some((mine, mine_seen)) => {
                            fa.insert(k, (mine.merge(shape), mine_seen + seen));
                        }
                        None if fa.len() < MAX_FIELDS => {
                            fa.insert(k, (shape, seen));
                        }
                        None => open = true,
                    }
                }
                S::Object { fields: fa, count: ca + cb, open }
            }
            (a, b) if kind(&a) == kind(&b) => a,
            (a, b) => merge_into_union(vec![a], b),
        }
    }

    /// Whether `value` fits this type (what a checker of the rendered type would say).
    pub fn accepts(&self, value: &Value) -> bool {
        match (self, value) {
            (Shape::Unknown, _) => true,
            (Shape::Never, _) => false,
            (Shape::Null, Value::Null) | (Shape::Bool, Value::Bool(_)) | (Shape::String, Value::String(_)) => true,
            (Shape::Integer, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (Shape::Number, Value::Number(_)) => true,
            (Shape::Array(el), Value::Array(items)) => items.iter().all(|v| el.accepts(v)),
            (Shape::Object { fields, count, open }, Value::Object(m)) => {
                let known = fields.iter().all(|(k, (shape, seen))| match m.get(k) {
                    Some(v) => shape.accepts(v),
                    None => seen < count,
                });
                known && (*open || m.keys().all(|k| fields.contains_key(k)))
            }
            (Shape::Union(alts), v) => alts.iter().any(|a| a.accepts(v)),
            _ => false,
        }
    }

    /// The type in TypeScript notation (deterministic: fields in key order).
    pub fn render(&self) -> String {
        let text = self.render_inner();
        if text.len() > MAX_RENDERED { "unknown".into() } else { text }
    }

    fn render_inner(&self) -> String {
        match self {
            Shape::Never => "never".into(),
            Shape::Unknown => "unknown".into(),
            Shape::Null => "null".into(),
            Shape::Bool => "boolean".into(),
            Shape::Integer | Shape::Number => "number".into(),
            Shape::String => "string".into(),
            Shape::Array(el) => match **el {
                Shape::Never => "[]".into(),
                Shape::Union(_) => format!("({})[]", el.render_inner()),
                _ => format!("{}[]", el.render_inner()),
            },
            Shape::Object { fields, count, open } => {
                let mut parts: Vec<String> = fields
                    .iter()
                    .map(|(k, (shape, seen))| {
                        let optional = if seen < count { "?" } else { "" };
                        format!("{}{optional}: {}", ts_property(k), shape.render_inner())
                    })
                    .collect();
                if *open {
                    parts.push("[key: string]: unknown".into());
                }
                if parts.is_empty() { "{}".into() } else { format!("{{ {} }}", parts.join("; ")) }
            }
            Shape::Union(alts) => alts.iter().map(Shape::render_inner).collect::<Vec<_>>().join(" | "),
        }
    }
}

/// A property name as TypeScript writes it: an identifier as it is, anything else as a JSON string
/// with `*/` and the JavaScript line terminators escaped (keys come from upstream results: they must
/// not close a comment or a line they are shown in).
fn ts_property(key: &str) -> String {
    let ident = !key.is_empty()
        && !key.starts_with(|c: char| c.is_ascii_digit())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if ident {
        return key.to_string();
    }
    let key: String = key.chars().take(64).collect();
    Value::String(key).to_string().replace("*/", "*\\/").replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029")
}

fn merge_into_union(mut alts: Vec<Shape>, b: Shape) -> Shape {
    match alts.iter().position(|a| kind(a) == kind(&b)) {
        Some(i) => {
            let a = alts.remove(i);
            alts.insert(i, a.merge(b));
        }
        None => alts.push(b),
    }
    if alts.len() > MAX_UNION {
        return Shape::Unknown;
    }
    alts.sort_by_key(kind);
    if alts.len() == 1 { alts.pop().unwrap_or(Shape::Unknown) } else { Shape::Union(alts) }
}

/// What was learned about one tool's results.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Observed {
    /// The merged type.
    pub shape: Shape,
    /// How many results it is based on.
    pub results: u64,
    /// How many of them the tool's declared output schema does not describe (0 for a tool that
    /// declares none). Results are never refused for it unless the declaration is a contract (a
    /// trusted source's): this only tells the model not to rely on the declaration.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub contradicting: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Observed {
    /// Adds one result; returns whether the learned type widened. A result the type already
    /// accepts only counts (the rendered type could not change: a field missing before stays
    /// optional, a field always present stays required), so the common path allocates nothing.
    pub fn record(&mut self, value: &Value) -> bool {
        self.results += 1;
        if self.results > 1 && self.shape.accepts(value) {
            return false;
        }
        let shape = std::mem::replace(&mut self.shape, Shape::Never);
        self.shape = shape.merge(Shape::of(value));
        true
    }

    /// Joins what another process learned about the same tool (a fleet's shared view): the type
    /// accepting both, and the larger count (counts are not added, so a view merged twice does not
    /// count twice).
    pub fn join(&mut self, other: Observed) {
        let shape = std::mem::replace(&mut self.shape, Shape::Never);
        self.shape = shape.merge(other.shape);
        self.results = self.results.max(other.results);
        self.contradicting = self.contradicting.max(other.contradicting);
    }

    /// Counts a result the tool's declared output does not describe; returns whether it is the
    /// first (what the model is told changes then).
    pub fn contradicted(&mut self) -> bool {
        self.contradicting += 1;
        self.contradicting == 1
    }

    /// The line a `.d.ts` adds to the tool's doc comment; `declares`: the tool declares an output
    /// schema (the line then says whether the results agree with it).
    pub fn doc_line(&self, declares: bool) -> String {
        let plural = if self.results == 1 { "" } else { "s" };
        let learned = format!("`.value()` has returned {} ({} result{plural}", self.shape.render(), self.results);
        match (declares, self.contradicting) {
            (false, _) => format!("{learned}; learned from results, the tool declares no output schema)"),
            (true, 0) => format!("{learned}; learned from results, all as the declared output says)"),
            (true, n) => format!(
                "{learned}; learned from results: {n} of them CONTRADICT the output the server declares — do not rely on the declaration)"
            ),
        }
    }

    /// As shown to the model: `{ "type": "<TypeScript>", "results": N, "observed": true }`, and for
    /// a tool that declares an output schema `"contradictsDeclaration": M` (results it does not
    /// describe).
    pub fn to_json(&self, declares: bool) -> Value {
        let mut v = serde_json::json!({ "type": self.shape.render(), "results": self.results, "observed": true });
        if declares {
            v["contradictsDeclaration"] = Value::from(self.contradicting);
        }
        v
    }
}

impl Default for Observed {
    fn default() -> Self {
        Observed { shape: Shape::Never, results: 0, contradicting: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn learn(values: &[Value]) -> Observed {
        let mut o = Observed::default();
        for v in values {
            o.record(v);
        }
        o
    }

    #[test]
    fn merges_optional_fields_scalar_unions_and_arrays() {
        let o = learn(&[
            json!({ "id": 1, "name": "a", "tags": ["x"] }),
            json!({ "id": 2.5, "tags": [], "owner": null }),
            json!({ "id": 3, "name": "c", "tags": ["y", "z"], "owner": "me" }),
        ]);
        assert_eq!(o.results, 3);
        assert_eq!(o.shape.render(), "{ id: number; name?: string; owner?: null | string; tags: string[] }");
    }

    #[test]
    fn hostile_keys_are_quoted_and_escaped() {
        let r = learn(&[json!({ "a b": 1, "*/ declare const x: 1; /*": 2, "l\u{2028}s": 3 })]).shape.render();
        assert!(!r.contains("*/") && !r.contains('\u{2028}') && r.contains("\"a b\": number"), "{r}");
    }

    #[test]
    fn bounds_widen_instead_of_growing() {
        let mut deep = json!(1);
        for _ in 0..20 {
            deep = json!({ "d": deep });
        }
        let r = learn(&[deep]).shape.render();
        assert!(r.matches('{').count() <= MAX_DEPTH && r.contains("unknown"), "{r}");
        let wide: serde_json::Map<String, Value> = (0..100).map(|i| (format!("k{i:03}"), json!(i))).collect();
        let r = learn(&[Value::Object(wide)]).shape.render();
        assert!(r.contains("[key: string]: unknown") && r.matches(':').count() <= MAX_FIELDS + 2, "{r}");
        let many = learn(&[json!(1), json!("s"), json!(true), json!(null), json!([1]), json!({})]);
        assert_eq!(many.shape, Shape::Unknown);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            (-1e6f64..1e6).prop_map(|f| json!(f)),
            "[a-z]{0,5}".prop_map(Value::String),
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-e]", inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The type learned from values accepts every value it was learned from.
        #[test]
        fn the_learned_type_accepts_every_value_it_was_learned_from(values in prop::collection::vec(arb_json(), 1..8)) {
            let o = learn(&values);
            for v in &values {
                prop_assert!(o.shape.accepts(v), "{} does not accept {}", o.shape.render(), v);
            }
        }
    }
}
