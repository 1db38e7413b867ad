//! Lossless JSON Schema → TypeScript declarations, for `mcp/<server>.d.ts`,
//! `tools.describe` and `MCP.<server>.$api()`. The compact hints ([`crate::hints`]) stay for the
//! quick index and search results; this is the full type.
//!
//! Draft 2020-12 and draft 7, as MCP servers emit them: `type` (also arrays of types, and
//! OpenAPI's `nullable`), `enum` / `const` (literal unions), `properties` / `required`,
//! `additionalProperties` and `patternProperties` (index signatures), `items`, `prefixItems` and
//! draft 7's array-form `items` / `additionalItems` (tuples with optional elements and a rest),
//! `oneOf` / `anyOf` (unions), `allOf` (intersections), local `$ref`s into `$defs` / `definitions`
//! and to the root (named type aliases, so cycles are fine). `description` and the constraint
//! keywords (`format`, `pattern`, `minimum`, `maxLength`, …) become doc comments. `not` and
//! `if` / `then` / `else` cannot be expressed: the type is the widest honest one (the keyword is
//! ignored) with a comment saying so.
//!
//! **Sound, never narrower than the schema**: every value the schema accepts fits the declared
//! type (a property test checks it with [`TsType::accepts`], a structural checker of the rendered
//! type). **Bounded**: at most [`MAX_DEPTH`] levels, [`MAX_ALIASES`] aliases, [`MAX_LITERALS`]
//! literals per enum and [`MAX_DECLARATION`] characters; past a bound the type widens (`unknown`,
//! the literals' base types). **Deterministic**: properties in schema order, aliases by name.
//! **Injection-safe**: comments can neither end (`*/`) nor break a line; names that are not
//! identifiers are quoted strings.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Deepest nesting rendered; deeper schemas are `unknown`. Prevents: a deeply nested (or
/// hostile) schema making declarations huge or the renderer recurse without bound.
pub const MAX_DEPTH: usize = 12;
/// Most named aliases (`$defs`) per declaration; more references become `unknown`.
pub const MAX_ALIASES: usize = 64;
/// Most literals of one `enum` rendered as a union; a longer enum becomes its base types.
pub const MAX_LITERALS: usize = 50;
/// Longest declaration (characters); a longer one is replaced by the compact hint's `object`.
/// Prevents: one tool's schema filling the model's context when it reads the `.d.ts`.
pub const MAX_DECLARATION: usize = 16_384;
/// Longest doc comment line kept.
const MAX_DOC: usize = 300;

/// A TypeScript type.
#[derive(Debug, Clone, PartialEq)]
pub enum TsType {
    /// `unknown`.
    Unknown,
    /// `never` (a schema that accepts nothing, `false`).
    Never,
    /// `null`.
    Null,
    /// `boolean`.
    Boolean,
    /// `number` (integers too; the doc says `integer`).
    Number {
        /// The schema asked for an integer.
        integer: bool,
    },
    /// `string`.
    String,
    /// A literal (`"a"`, `1`, `true`, `null`), as JSON.
    Literal(Value),
    /// `T[]`.
    Array(Box<TsType>),
    /// `[A?, B?, ...C[]]`: JSON Schema does not require prefix items to be present.
    Tuple {
        /// The prefix items.
        items: Vec<TsType>,
        /// The type of the items after them (`None`: no more items allowed).
        rest: Option<Box<TsType>>,
    },
    /// An object type.
    Object {
        /// Properties, in schema order.
        props: Vec<Prop>,
        /// The type of other properties: `Some` renders an index signature; `None` with
        /// `closed` false leaves them unconstrained (TypeScript's structural typing).
        index: Option<Box<TsType>>,
        /// `additionalProperties: false`: no other properties.
        closed: bool,
    },
    /// `A | B`.
    Union(Vec<TsType>),
    /// `A & B`.
    Intersection(Vec<TsType>),
    /// A named alias (`$defs`), resolved in [`Declaration::aliases`].
    Ref(String),
}

/// One property of an object type.
#[derive(Debug, Clone, PartialEq)]
pub struct Prop {
    /// The name as the schema has it.
    pub name: String,
    /// Its type.
    pub ty: TsType,
    /// Not in `required`.
    pub optional: bool,
    /// Doc comment lines from the description.
    pub description: Vec<String>,
    /// Doc comment lines from the constraints (`@minimum 1`, …).
    pub constraints: Vec<String>,
}

/// A schema's declaration: the root type, the aliases it refers to, and notes on what could not
/// be expressed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Declaration {
    /// The type of the schema's values.
    pub root: Option<TsType>,
    /// Named aliases (from `$defs` / `definitions`, and `Self` for the root), by name.
    pub aliases: BTreeMap<String, TsType>,
}

struct Converter<'a> {
    root: &'a Value,
    aliases: BTreeMap<String, TsType>,
    /// Alias names by `$ref` target, as assigned.
    names: BTreeMap<String, String>,
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
}

/// A string literal as TypeScript writes it, safe on any line (JavaScript line terminators escaped).
fn ts_string(s: &str) -> String {
    Value::String(s.into()).to_string().replace('\u{2028}', "\\u2028").replace('\u{2029}', "\\u2029")
}

/// Text of the schema's choosing made safe for a doc comment line.
fn comment_text(s: &str) -> String {
    let s: String = s.chars().take(MAX_DOC).collect();
    s.replace("*/", "*\\/").replace(['\r', '\n', '\u{2028}', '\u{2029}'], " ")
}

fn property_key(name: &str) -> String {
    if is_ident(name) { name.to_string() } else { ts_string(name) }
}

/// Unescapes one JSON pointer segment.
fn pointer_segment(s: &str) -> String {
    s.replace("~1", "/").replace("~0", "~")
}

fn union(mut alts: Vec<TsType>) -> TsType {
    // Flatten, drop duplicates; `unknown` absorbs everything.
    let mut flat = Vec::new();
    for a in alts.drain(..) {
        match a {
            TsType::Union(inner) => flat.extend(inner),
            TsType::Never => {}
            other => flat.push(other),
        }
    }
    if flat.contains(&TsType::Unknown) {
        return TsType::Unknown;
    }
    let mut out: Vec<TsType> = Vec::new();
    for t in flat {
        if !out.contains(&t) {
            out.push(t);
        }
    }
    match out.len() {
        0 => TsType::Never,
        1 => out.pop().unwrap_or(TsType::Unknown),
        _ => TsType::Union(out),
    }
}

fn intersection(parts: Vec<TsType>) -> TsType {
    let parts: Vec<TsType> = parts.into_iter().filter(|t| *t != TsType::Unknown).collect();
    match parts.len() {
        0 => TsType::Unknown,
        1 => parts.into_iter().next().unwrap_or(TsType::Unknown),
        _ => TsType::Intersection(parts),
    }
}

/// The description lines of a schema.
fn description_of(schema: &Map<String, Value>) -> Vec<String> {
    schema
        .get("description")
        .and_then(Value::as_str)
        .map(|d| {
            d.split(['\r', '\n', '\u{2028}', '\u{2029}'])
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(comment_text)
                .collect()
        })
        .unwrap_or_default()
}

/// The constraint lines of a schema (what the type cannot say).
fn doc_of(schema: &Map<String, Value>) -> Vec<String> {
    let mut doc = Vec::new();
    if schema.get("type").and_then(Value::as_str) == Some("integer") {
        doc.push("integer".into());
    }
    for k in [
        "format",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "default",
    ] {
        if let Some(v) = schema.get(k) {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            doc.push(format!("@{k} {}", comment_text(&text)));
        }
    }
    if schema.contains_key("not") {
        doc.push("(also constrained by `not`, which the type cannot express)".into());
    }
    if schema.contains_key("if") {
        doc.push("(also constrained by `if`/`then`/`else`, which the type cannot express)".into());
    }
    if schema.get("deprecated").and_then(Value::as_bool) == Some(true) {
        doc.push("@deprecated".into());
    }
    doc
}

impl Converter<'_> {
    fn convert(&mut self, schema: &Value, depth: usize) -> TsType {
        if depth >= MAX_DEPTH {
            return TsType::Unknown;
        }
        let obj = match schema {
            Value::Bool(true) => return TsType::Unknown,
            Value::Bool(false) => return TsType::Never,
            Value::Object(o) => o,
            _ => return TsType::Unknown,
        };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            // Siblings of `$ref` (2020-12) narrow it: intersect them.
            let target = self.reference(r, depth);
            let mut rest = obj.clone();
            rest.remove("$ref");
            rest.remove("description");
            let has_more =
                rest.keys().any(|k| !matches!(k.as_str(), "$defs" | "definitions" | "$schema" | "$id" | "title"));
            return if has_more {
                intersection(vec![target, self.convert(&Value::Object(rest), depth + 1)])
            } else {
                target
            };
        }
        if let Some(c) = obj.get("const") {
            return TsType::Literal(c.clone());
        }
        let mut parts = Vec::new();
        if let Some(values) = obj.get("enum").and_then(Value::as_array) {
            parts.push(if values.len() <= MAX_LITERALS {
                union(values.iter().map(|v| TsType::Literal(v.clone())).collect())
            } else {
                union(values.iter().map(base_of).collect())
            });
        } else if let Some(base) = self.base(obj, depth) {
            parts.push(base);
        }
        for key in ["oneOf", "anyOf"] {
            if let Some(alts) = obj.get(key).and_then(Value::as_array) {
                parts.push(union(alts.iter().map(|a| self.convert(a, depth + 1)).collect()));
            }
        }
        if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
            parts.extend(all.iter().map(|a| self.convert(a, depth + 1)));
        }
        let mut ty = intersection(parts);
        if obj.get("nullable").and_then(Value::as_bool) == Some(true) {
            ty = union(vec![ty, TsType::Null]);
        }
        ty
    }

    /// The type from `type` and the keywords of each type (`None`: no type information at all).
    fn base(&mut self, obj: &Map<String, Value>, depth: usize) -> Option<TsType> {
        let types: Vec<&str> = match obj.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => {
                // No `type`: object keywords describe an object as the schema's authors mean it;
                // otherwise there is nothing to say.
                if obj.contains_key("properties") || obj.contains_key("additionalProperties") {
                    vec!["object"]
                } else if obj.contains_key("items") || obj.contains_key("prefixItems") {
                    vec!["array"]
                } else {
                    return None;
                }
            }
        };
        Some(union(
            types
                .into_iter()
                .map(|t| match t {
                    "null" => TsType::Null,
                    "boolean" => TsType::Boolean,
                    "integer" => TsType::Number { integer: true },
                    "number" => TsType::Number { integer: false },
                    "string" => TsType::String,
                    "array" => self.array(obj, depth),
                    "object" => self.object(obj, depth),
                    _ => TsType::Unknown,
                })
                .collect(),
        ))
    }

    fn array(&mut self, obj: &Map<String, Value>, depth: usize) -> TsType {
        // 2020-12 `prefixItems` + `items` (the rest); draft 7 array-form `items` + `additionalItems`.
        let (prefix, rest) = match (obj.get("prefixItems").and_then(Value::as_array), obj.get("items")) {
            (Some(p), rest) => (Some(p), rest),
            (None, Some(Value::Array(p))) => (Some(p), obj.get("additionalItems")),
            (None, items) => (None, items),
        };
        match prefix {
            Some(p) => {
                let items = p.iter().map(|s| self.convert(s, depth + 1)).collect();
                let rest = match rest {
                    Some(Value::Bool(false)) => None,
                    None | Some(Value::Bool(true)) => Some(Box::new(TsType::Unknown)),
                    Some(s) => Some(Box::new(self.convert(s, depth + 1))),
                };
                TsType::Tuple { items, rest }
            }
            None => TsType::Array(Box::new(match rest {
                Some(s) => self.convert(s, depth + 1),
                None => TsType::Unknown,
            })),
        }
    }

    fn object(&mut self, obj: &Map<String, Value>, depth: usize) -> TsType {
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut props = Vec::new();
        if let Some(p) = obj.get("properties").and_then(Value::as_object) {
            for (name, s) in p {
                props.push(Prop {
                    name: name.clone(),
                    ty: self.convert(s, depth + 1),
                    optional: !required.contains(&name.as_str()),
                    description: s.as_object().map(description_of).unwrap_or_default(),
                    constraints: s.as_object().map(doc_of).unwrap_or_default(),
                });
            }
        }
        // Required names without a property schema are still required, of any type.
        for r in &required {
            if !props.iter().any(|p| p.name == *r) {
                props.push(Prop {
                    name: (*r).to_string(),
                    ty: TsType::Unknown,
                    optional: false,
                    description: Vec::new(),
                    constraints: Vec::new(),
                });
            }
        }
        let pattern = obj.get("patternProperties").and_then(Value::as_object).filter(|p| !p.is_empty());
        let (index, closed) = match (obj.get("additionalProperties"), pattern) {
            (_, Some(_)) => (Some(Box::new(TsType::Unknown)), false),
            (Some(Value::Bool(false)), None) => (None, true),
            (None | Some(Value::Bool(true)), None) => (None, false),
            (Some(s), None) => {
                // Declared properties must fit an index signature too: widen it with their types.
                let extra = self.convert(s, depth + 1);
                let mut all = vec![extra];
                all.extend(props.iter().map(|p| p.ty.clone()));
                if props.iter().any(|p| p.optional) {
                    all.push(TsType::Unknown);
                }
                (Some(Box::new(union(all))), false)
            }
        };
        TsType::Object { props, index, closed }
    }

    /// A named alias for a local `$ref` (converted once; cycles end at the name).
    fn reference(&mut self, r: &str, depth: usize) -> TsType {
        if let Some(name) = self.names.get(r) {
            return TsType::Ref(name.clone());
        }
        let target = if r == "#" {
            Some(self.root)
        } else if let Some(ptr) = r.strip_prefix('#') {
            self.root.pointer(ptr)
        } else {
            None
        };
        let Some(target) = target else { return TsType::Unknown };
        if self.names.len() >= MAX_ALIASES {
            return TsType::Unknown;
        }
        let base = if r == "#" {
            "Self".to_string()
        } else {
            let last = r.rsplit('/').next().map(pointer_segment).unwrap_or_default();
            let clean: String = last.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(40).collect();
            let clean = if clean.is_empty() || clean.starts_with(|c: char| c.is_ascii_digit()) {
                format!("T{clean}")
            } else {
                clean
            };
            let mut upper = clean.clone();
            if let Some(f) = upper.get_mut(0..1) {
                f.make_ascii_uppercase();
            }
            upper
        };
        let mut name = base.clone();
        let mut n = 2;
        while self.names.values().any(|v| *v == name) {
            name = format!("{base}{n}");
            n += 1;
        }
        self.names.insert(r.to_string(), name.clone());
        let target = target.clone();
        let ty = self.convert(&target, depth + 1);
        self.aliases.insert(name.clone(), ty);
        TsType::Ref(name)
    }
}

fn base_of(v: &Value) -> TsType {
    match v {
        Value::Null => TsType::Null,
        Value::Bool(_) => TsType::Boolean,
        Value::Number(_) => TsType::Number { integer: false },
        Value::String(_) => TsType::String,
        Value::Array(_) => TsType::Array(Box::new(TsType::Unknown)),
        Value::Object(_) => TsType::Object { props: Vec::new(), index: None, closed: false },
    }
}

impl Declaration {
    /// The declaration of `schema`'s values.
    pub fn of(schema: &Value) -> Declaration {
        let mut c = Converter { root: schema, aliases: BTreeMap::new(), names: BTreeMap::new() };
        let root = c.convert(schema, 0);
        Declaration { root: Some(root), aliases: c.aliases }
    }

    /// Whether `value` fits the declared type (a structural checker of what is rendered).
    pub fn accepts(&self, value: &Value) -> bool {
        self.root.as_ref().is_some_and(|r| r.accepts(value, &self.aliases, 0))
    }

    /// The root type as TypeScript, on one line (aliases are referred to by name), or `None` when it
    /// is longer than [`MAX_DECLARATION`].
    pub fn inline(&self) -> Option<String> {
        let text = self.root.as_ref()?.render(None);
        (text.len() <= MAX_DECLARATION).then_some(text)
    }

    /// The aliases as `type Name = …;` lines with `prefix` before each name, and the root type
    /// rendered multi-line at `indent` (property doc comments included), with the aliases renamed
    /// `prefix + Name`. `None` when longer than [`MAX_DECLARATION`]. `params_documented`: the
    /// top-level properties' descriptions are already `@param` lines of the function's comment,
    /// so only their constraints are repeated.
    pub fn render(&self, indent: &str, prefix: &str, params_documented: bool) -> Option<(Vec<String>, String)> {
        let rename = |n: &str| format!("{prefix}{n}");
        let aliases: Vec<String> = self
            .aliases
            .iter()
            .map(|(n, t)| format!("type {} = {};", rename(n), t.render_with(Some(indent), &rename, false)))
            .collect();
        let root = self.root.as_ref()?.render_with(Some(indent), &rename, params_documented);
        let total = aliases.iter().map(String::len).sum::<usize>() + root.len();
        (total <= MAX_DECLARATION).then_some((aliases, root))
    }
}

impl TsType {
    /// Renders on one line (`indent: None`) or multi-line with property doc comments.
    pub fn render(&self, indent: Option<&str>) -> String {
        self.render_renamed(indent, &|n: &str| n.to_string())
    }

    fn render_renamed(&self, indent: Option<&str>, rename: &dyn Fn(&str) -> String) -> String {
        self.render_with(indent, rename, false)
    }

    fn render_with(&self, indent: Option<&str>, rename: &dyn Fn(&str) -> String, skip_descriptions: bool) -> String {
        let wrap = |t: &TsType| match t {
            TsType::Union(_) | TsType::Intersection(_) => format!("({})", t.render_renamed(indent, rename)),
            other => other.render_renamed(indent, rename),
        };
        match self {
            TsType::Unknown => "unknown".into(),
            TsType::Never => "never".into(),
            TsType::Null => "null".into(),
            TsType::Boolean => "boolean".into(),
            TsType::Number { .. } => "number".into(),
            TsType::String => "string".into(),
            TsType::Literal(v) => match v {
                Value::String(s) => ts_string(s),
                Value::Array(_) | Value::Object(_) => "unknown".into(),
                other => other.to_string(),
            },
            TsType::Array(el) => format!("{}[]", wrap(el)),
            TsType::Tuple { items, rest } => {
                let mut parts: Vec<String> = items.iter().map(|t| format!("{}?", wrap(t))).collect();
                if let Some(r) = rest {
                    parts.push(format!("...{}[]", wrap(r)));
                }
                format!("[{}]", parts.join(", "))
            }
            TsType::Object { props, index, .. } => {
                let inner = indent.map(|i| format!("{i}  "));
                let mut fields: Vec<String> = Vec::new();
                for p in props {
                    let key = property_key(&p.name);
                    let opt = if p.optional { "?" } else { "" };
                    let ty = p.ty.render_renamed(inner.as_deref(), rename);
                    match &inner {
                        Some(pad) => {
                            let mut f = String::new();
                            let doc: Vec<&String> = if skip_descriptions {
                                p.constraints.iter().collect()
                            } else {
                                p.description.iter().chain(&p.constraints).collect()
                            };
                            if !doc.is_empty() {
                                if doc.len() == 1 {
                                    f.push_str(&format!("{pad}/** {} */\n", doc[0]));
                                } else {
                                    f.push_str(&format!("{pad}/**\n"));
                                    for l in &doc {
                                        f.push_str(&format!("{pad} * {l}\n"));
                                    }
                                    f.push_str(&format!("{pad} */\n"));
                                }
                            }
                            f.push_str(&format!("{pad}{key}{opt}: {ty};"));
                            fields.push(f);
                        }
                        None => fields.push(format!("{key}{opt}: {ty}")),
                    }
                }
                if let Some(ix) = index {
                    let ty = ix.render_renamed(inner.as_deref(), rename);
                    match &inner {
                        Some(pad) => fields.push(format!("{pad}[key: string]: {ty};")),
                        None => fields.push(format!("[key: string]: {ty}")),
                    }
                }
                match (indent, fields.is_empty()) {
                    (_, true) => "{}".into(),
                    (Some(i), false) => format!("{{\n{}\n{i}}}", fields.join("\n")),
                    (None, false) => format!("{{ {} }}", fields.join("; ")),
                }
            }
            TsType::Union(alts) => alts.iter().map(wrap).collect::<Vec<_>>().join(" | "),
            TsType::Intersection(parts) => parts.iter().map(wrap).collect::<Vec<_>>().join(" & "),
            TsType::Ref(n) => rename(n),
        }
    }

    /// Whether `value` fits this type, with `aliases` resolving references.
    pub fn accepts(&self, value: &Value, aliases: &BTreeMap<String, TsType>, depth: usize) -> bool {
        self.accepts_within(value, aliases, depth, 0)
    }

    /// [`Self::accepts`], counting the references followed since the last step into `value`'s
    /// children (`hops`). References that lead back to themselves without consuming any of the
    /// value (`Node = Node & Node`) are accepted after [`MAX_REF_HOPS`], as a cycle proves nothing
    /// against the value; without the bound such a type took time exponential in the depth.
    fn accepts_within(&self, value: &Value, aliases: &BTreeMap<String, TsType>, depth: usize, hops: usize) -> bool {
        if depth > 256 {
            return true;
        }
        match (self, value) {
            (TsType::Unknown, _) => true,
            (TsType::Never, _) => false,
            (TsType::Null, Value::Null) | (TsType::Boolean, Value::Bool(_)) | (TsType::String, Value::String(_)) => {
                true
            }
            (TsType::Number { .. }, Value::Number(_)) => true,
            (TsType::Literal(l), v) => literal_eq(l, v),
            (TsType::Array(el), Value::Array(items)) => {
                items.iter().all(|v| el.accepts_within(v, aliases, depth + 1, 0))
            }
            (TsType::Tuple { items, rest }, Value::Array(vs)) => {
                vs.iter().enumerate().all(|(i, v)| match items.get(i) {
                    Some(t) => t.accepts_within(v, aliases, depth + 1, 0),
                    None => rest.as_ref().is_some_and(|r| r.accepts_within(v, aliases, depth + 1, 0)),
                })
            }
            (TsType::Object { props, index, closed }, Value::Object(m)) => {
                let declared = props.iter().all(|p| match m.get(&p.name) {
                    Some(v) => p.ty.accepts_within(v, aliases, depth + 1, 0),
                    None => p.optional,
                });
                let others = m.iter().filter(|(k, _)| !props.iter().any(|p| p.name == **k)).all(|(_, v)| match index {
                    Some(ix) => ix.accepts_within(v, aliases, depth + 1, 0),
                    None => !closed,
                });
                declared && others
            }
            (TsType::Union(alts), v) => alts.iter().any(|a| a.accepts_within(v, aliases, depth + 1, hops)),
            (TsType::Intersection(parts), v) => parts.iter().all(|p| p.accepts_within(v, aliases, depth + 1, hops)),
            (TsType::Ref(_), _) if hops >= MAX_REF_HOPS => true,
            (TsType::Ref(n), v) => aliases.get(n).is_none_or(|t| t.accepts_within(v, aliases, depth + 1, hops + 1)),
            _ => false,
        }
    }
}

/// Most references [`TsType::accepts`] follows on one value before treating the rest as a cycle.
const MAX_REF_HOPS: usize = 8;

/// JSON equality as JSON Schema's `const` / `enum` define it (numbers by value: `1` equals `1.0`).
fn literal_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| literal_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| literal_eq(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests;
