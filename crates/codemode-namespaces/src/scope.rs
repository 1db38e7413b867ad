//! A namespace's scope (contract §10 "Scope serialization"): plain data plus callable markers, and its
//! serialization into what the guest receives.
//!
//! [`ScopeValue`] has no variant that could hold a host function: a scope factory cannot return a
//! closure for the guest to call (contract S1 holds by construction). The only code a scope carries is
//! a marker's input mapper, which runs on the host to build the backing tool's input.
//!
//! ```compile_fail
//! // N3: a raw host function is not a scope value; this does not compile.
//! use codemode_namespaces::ScopeValue;
//! let list = || async { 42 };
//! let scope = ScopeValue::object([("list", list)]);
//! ```

use crate::names::check_key;
use codemode_core::catalog::catalog_id;
use codemode_core::namespace::{GuestNamespaceCall, NamespaceOwner, PATH_SEPARATOR};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Deepest nesting of a scope. Prevents: a scope whose install in the guest or serialization
/// recurses without bound.
pub const MAX_SCOPE_DEPTH: usize = 32;
/// Most nodes visited while serializing one scope (shared references count each time they are
/// reached). Prevents: a scope of shared references that doubles at each level (2^n copies)
/// exhausting memory before its size can be measured.
pub const MAX_SCOPE_NODES: usize = 100_000;
/// Largest serialized scope data. Prevents: one namespace making every run's boot data huge.
pub const MAX_SCOPE_BYTES: usize = 256 * 1024;
/// Most callable members of one namespace.
pub const MAX_CALLS: usize = 256;

/// What a namespace's own code (an input mapper, a scope factory) says when it refuses: a message
/// for the guest's call or for the run. `"text".into()` and `format!(…).into()` make one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal(message)
    }
}

impl From<&str> for Refusal {
    fn from(message: &str) -> Self {
        Refusal(message.to_string())
    }
}

/// Builds a backing tool's input from the guest's arguments; an `Err` is the message the guest's
/// call fails with (a catchable `nested_tool_failed`).
pub type InputMapper = Arc<dyn Fn(&[Value]) -> Result<Value, Refusal> + Send + Sync>;

/// A callable scope member: calls the catalog tool `tool` (a name of the namespace's
/// `required_tools`, owned by the namespace's owner) with an input built from the guest's
/// arguments. Made by [`namespace_tool`] or [`namespace_tool_with`].
#[derive(Clone)]
pub struct NamespaceTool {
    pub(crate) tool: String,
    pub(crate) mapper: Option<InputMapper>,
    /// The mapper's type when it captures nothing (a zero-sized closure or function item): such a
    /// type has one value, so two mappers of it behave the same even though each factory call
    /// boxes a new one. `None` for capturing mappers, which are only equal to themselves.
    pub(crate) stateless: Option<std::any::TypeId>,
}

/// Equal members call the same tool with the same input mapping: no mapper on either side, the
/// same mapper, or mappers of one type that captures nothing. (What lets a run reuse an earlier
/// run's serialized scope when the factory returns an equal one.)
impl PartialEq for NamespaceTool {
    fn eq(&self, other: &Self) -> bool {
        self.tool == other.tool
            && match (&self.mapper, &other.mapper) {
                (None, None) => true,
                (Some(a), Some(b)) => {
                    Arc::ptr_eq(a, b) || (self.stateless.is_some() && self.stateless == other.stateless)
                }
                _ => false,
            }
    }
}

impl Eq for NamespaceTool {}

impl std::fmt::Debug for NamespaceTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceTool").field("tool", &self.tool).field("mapper", &self.mapper.is_some()).finish()
    }
}

impl NamespaceTool {
    /// The backing tool's name.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The backing tool's input for `args` (contract §10): the mapper's result, or without a mapper the
    /// first argument (`{}` when it is omitted or `null`). A panicking mapper fails the call only.
    pub fn input(&self, args: &[Value]) -> Result<Value, Refusal> {
        match &self.mapper {
            None => Ok(match args.first() {
                None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
                Some(v) => v.clone(),
            }),
            Some(m) => match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| m(args))) {
                Ok(r) => r,
                Err(_) => Err(format!("the input mapper of `{}` panicked", self.tool).into()),
            },
        }
    }
}

/// A callable member that passes the first guest argument (or `{}`) as the tool's input.
pub fn namespace_tool(tool: impl Into<String>) -> NamespaceTool {
    NamespaceTool { tool: tool.into(), mapper: None, stateless: None }
}

/// A callable member whose input `mapper` builds from the guest's arguments, e.g.
/// `namespace_tool_with("github_update_issue", |a| Ok(json!({"number": a.first(), "patch": a.get(1)})))`.
///
/// A mapper that captures nothing (like that one) is equal to every other mapper of its closure
/// type, so a factory returning the same scope run after run has it serialized once; a capturing
/// mapper is equal only to itself (see [`NamespaceTool`]'s equality).
pub fn namespace_tool_with<M>(tool: impl Into<String>, mapper: M) -> NamespaceTool
where
    M: Fn(&[Value]) -> Result<Value, Refusal> + Send + Sync + 'static,
{
    let stateless = (std::mem::size_of::<M>() == 0).then(std::any::TypeId::of::<M>);
    NamespaceTool { tool: tool.into(), mapper: Some(Arc::new(mapper)), stateless }
}

/// A value a scope factory returns: JSON data, arrays and objects of scope values, callable
/// markers, and shared references (serialized as copies).
///
/// Two values are equal when they serialize the same way and their members behave the same (see
/// [`NamespaceTool`]'s equality); a shared reference equals only a shared reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeValue {
    /// Plain JSON data (its object keys are checked like scope keys).
    Json(Value),
    /// An array.
    Array(Vec<ScopeValue>),
    /// An object, in insertion order; duplicate keys are refused.
    Object(Vec<(String, ScopeValue)>),
    /// A callable member.
    Tool(NamespaceTool),
    /// A value referenced from several places (Rust ownership makes cycles impossible; each reference
    /// serializes as a copy, contract S2).
    Shared(Arc<ScopeValue>),
}

impl ScopeValue {
    /// An object from `(key, value)` pairs.
    pub fn object<K: Into<String>, V: Into<ScopeValue>>(entries: impl IntoIterator<Item = (K, V)>) -> Self {
        ScopeValue::Object(entries.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }

    /// An array.
    pub fn array<V: Into<ScopeValue>>(items: impl IntoIterator<Item = V>) -> Self {
        ScopeValue::Array(items.into_iter().map(Into::into).collect())
    }
}

impl From<Value> for ScopeValue {
    fn from(v: Value) -> Self {
        ScopeValue::Json(v)
    }
}

impl From<NamespaceTool> for ScopeValue {
    fn from(t: NamespaceTool) -> Self {
        ScopeValue::Tool(t)
    }
}

impl From<Arc<ScopeValue>> for ScopeValue {
    fn from(v: Arc<ScopeValue>) -> Self {
        ScopeValue::Shared(v)
    }
}

impl From<&str> for ScopeValue {
    fn from(s: &str) -> Self {
        ScopeValue::Json(Value::String(s.to_string()))
    }
}

/// A serialized scope: the guest's data and the host's call table.
#[derive(Debug, Clone)]
pub struct SerializedScope {
    /// The data, `null` at each callable path.
    pub data: Value,
    /// The callable paths, in scope order.
    pub calls: Vec<GuestNamespaceCall>,
    /// Path → member.
    pub targets: HashMap<String, NamespaceTool>,
    /// `data` as JSON text (written once, for the size check, and reused for the boot text).
    pub data_json: String,
}

/// Serializes `scope` for namespace `global_name` whose members may target only `required` tools
/// of `owner`
/// (contract S1–S3, N5, N6). Errors name the offending path (`Shipping.orders.list`).
pub fn serialize_scope(
    global_name: &str,
    scope: &ScopeValue,
    owner: &NamespaceOwner,
    required: &BTreeSet<String>,
) -> Result<SerializedScope, String> {
    let mut w = Walker { owner, required, nodes: 0, calls: Vec::new(), targets: HashMap::new(), path: Vec::new() };
    let data = match scope {
        ScopeValue::Object(_) | ScopeValue::Json(Value::Object(_)) | ScopeValue::Shared(_) => {
            w.walk(global_name, scope, 0)?
        }
        _ => return Err(format!("`{global_name}`: a scope must be an object")),
    };
    if !data.is_object() {
        return Err(format!("`{global_name}`: a scope must be an object"));
    }
    let data_json =
        serde_json::to_string(&data).map_err(|e| format!("`{global_name}`: the scope cannot be serialized: {e}"))?;
    let bytes = data_json.len();
    if bytes > MAX_SCOPE_BYTES {
        return Err(format!(
            "`{global_name}`: the scope serializes to {bytes} bytes; at most {MAX_SCOPE_BYTES} allowed"
        ));
    }
    Ok(SerializedScope { data, calls: w.calls, targets: w.targets, data_json })
}

struct Walker<'a> {
    owner: &'a NamespaceOwner,
    required: &'a BTreeSet<String>,
    nodes: usize,
    calls: Vec<GuestNamespaceCall>,
    targets: HashMap<String, NamespaceTool>,
    path: Vec<String>,
}

impl Walker<'_> {
    fn at(&self, global: &str) -> String {
        let mut s = global.to_string();
        for seg in &self.path {
            s.push(PATH_SEPARATOR);
            s.push_str(seg);
        }
        s
    }

    fn step(&mut self, global: &str, depth: usize) -> Result<(), String> {
        self.nodes += 1;
        if self.nodes > MAX_SCOPE_NODES {
            return Err(format!("`{}`: the scope has more than {MAX_SCOPE_NODES} values", self.at(global)));
        }
        if depth > MAX_SCOPE_DEPTH {
            return Err(format!("`{}`: the scope is nested deeper than {MAX_SCOPE_DEPTH} levels", self.at(global)));
        }
        Ok(())
    }

    fn key(&mut self, global: &str, key: &str) -> Result<(), String> {
        check_key(key).map_err(|e| format!("`{}`: {e}", self.at(global)))
    }

    fn walk(&mut self, global: &str, v: &ScopeValue, depth: usize) -> Result<Value, String> {
        self.step(global, depth)?;
        match v {
            ScopeValue::Json(j) => self.json(global, j, depth),
            ScopeValue::Shared(inner) => self.walk(global, inner, depth),
            ScopeValue::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    if let ScopeValue::Tool(t) = item {
                        self.path.push(i.to_string());
                        let at = self.at(global);
                        self.path.pop();
                        return Err(format!(
                            "`{at}`: callable members belong in objects, not arrays (tool `{}`)",
                            t.tool
                        ));
                    }
                    self.path.push(i.to_string());
                    out.push(self.walk(global, item, depth + 1)?);
                    self.path.pop();
                }
                Ok(Value::Array(out))
            }
            ScopeValue::Object(entries) => {
                let mut out = serde_json::Map::new();
                for (k, item) in entries {
                    self.key(global, k)?;
                    self.path.push(k.clone());
                    if out.contains_key(k) {
                        return Err(format!("`{}`: duplicate key", self.at(global)));
                    }
                    let value = match item {
                        ScopeValue::Tool(t) => self.tool(global, t, depth + 1)?,
                        other => self.walk(global, other, depth + 1)?,
                    };
                    out.insert(k.clone(), value);
                    self.path.pop();
                }
                Ok(Value::Object(out))
            }
            ScopeValue::Tool(t) => self.tool(global, t, depth),
        }
    }

    fn tool(&mut self, global: &str, t: &NamespaceTool, depth: usize) -> Result<Value, String> {
        self.step(global, depth)?;
        if !self.required.contains(&t.tool) {
            // N5: a callable path may target only the namespace's declared tools.
            return Err(format!(
                "`{}`: targets tool `{}`, which is not one of the namespace's required tools",
                self.at(global),
                t.tool
            ));
        }
        if self.calls.len() >= MAX_CALLS {
            return Err(format!("`{}`: more than {MAX_CALLS} callable members", self.at(global)));
        }
        let path = self.path.join(&PATH_SEPARATOR.to_string());
        let tool_id = catalog_id(self.owner.source, &self.owner.name, &t.tool);
        self.calls.push(GuestNamespaceCall { path: path.clone(), tool_id });
        self.targets.insert(path, t.clone());
        Ok(Value::Null)
    }

    fn json(&mut self, global: &str, v: &Value, depth: usize) -> Result<Value, String> {
        match v {
            Value::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    self.path.push(i.to_string());
                    self.step(global, depth + 1)?;
                    out.push(self.json(global, item, depth + 1)?);
                    self.path.pop();
                }
                Ok(Value::Array(out))
            }
            Value::Object(map) => {
                let mut out = serde_json::Map::new();
                for (k, item) in map {
                    self.key(global, k)?;
                    self.path.push(k.clone());
                    self.step(global, depth + 1)?;
                    out.insert(k.clone(), self.json(global, item, depth + 1)?);
                    self.path.pop();
                }
                Ok(Value::Object(out))
            }
            other => Ok(other.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn owner() -> NamespaceOwner {
        NamespaceOwner::plugin("shop")
    }

    fn req(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn n6_nested_objects_and_shared_references() {
        let shared = Arc::new(ScopeValue::Json(json!({"currency": "EUR", "rates": [1, 2]})));
        let scope = ScopeValue::object([
            ("settings", ScopeValue::Shared(shared.clone())),
            ("again", ScopeValue::Shared(shared)),
            (
                "orders",
                ScopeValue::object([
                    ("list", ScopeValue::from(namespace_tool("list_orders"))),
                    ("limit", json!(10).into()),
                ]),
            ),
        ]);
        let s = serialize_scope("Shop", &scope, &owner(), &req(&["list_orders"])).unwrap();
        assert_eq!(
            s.data,
            json!({"settings": {"currency": "EUR", "rates": [1, 2]}, "again": {"currency": "EUR", "rates": [1, 2]},
                   "orders": {"list": null, "limit": 10}})
        );
        assert_eq!(
            s.calls,
            vec![GuestNamespaceCall { path: "orders.list".into(), tool_id: "plugin:shop:list_orders".into() }]
        );
        assert_eq!(s.targets["orders.list"].tool(), "list_orders");
    }

    #[test]
    fn s3_n5_bad_scopes_name_their_path() {
        let cases: Vec<(ScopeValue, &str)> = vec![
            (ScopeValue::object([("a", ScopeValue::object([("__proto__", json!(1))]))]), "`Ns.a`: key `__proto__`"),
            (ScopeValue::Json(json!({"deep": {"constructor": 1}})), "`Ns.deep`: key `constructor`"),
            (ScopeValue::object([("", json!(1))]), "empty keys"),
            (ScopeValue::object([("a.b", json!(1))]), "path separator"),
            (ScopeValue::object([("then", namespace_tool("t"))]), "`Ns`: key `then`"),
            (ScopeValue::object([("x", namespace_tool("other"))]), "`Ns.x`: targets tool `other`"),
            (ScopeValue::array([json!(1)]), "must be an object"),
            (ScopeValue::from(namespace_tool("t")), "must be an object"),
            (ScopeValue::object([("l", ScopeValue::array([ScopeValue::from(namespace_tool("t"))]))]), "`Ns.l.0`"),
            (ScopeValue::object([("a", json!(1)), ("a", json!(2))]), "`Ns.a`: duplicate key"),
        ];
        for (scope, want) in cases {
            let err = serialize_scope("Ns", &scope, &owner(), &req(&["t"])).unwrap_err();
            assert!(err.contains(want), "want `{want}` in `{err}`");
        }
    }

    #[test]
    fn size_limits_stop_exponential_sharing() {
        // 2^18 values if expanded, within the depth limit: refused by the node budget.
        let mut v = Arc::new(ScopeValue::Json(json!("x")));
        for _ in 0..17 {
            v = Arc::new(ScopeValue::array([ScopeValue::Shared(v.clone()), ScopeValue::Shared(v)]));
        }
        let scope = ScopeValue::object([("bomb", ScopeValue::Shared(v))]);
        assert!(serialize_scope("Ns", &scope, &owner(), &req(&[])).unwrap_err().contains("more than"));
        let mut deep = json!(1);
        for _ in 0..40 {
            deep = json!({ "d": deep });
        }
        assert!(serialize_scope("Ns", &ScopeValue::Json(deep), &owner(), &req(&[])).unwrap_err().contains("deeper"));
        let big = ScopeValue::Json(json!({"s": "x".repeat(MAX_SCOPE_BYTES)}));
        assert!(serialize_scope("Ns", &big, &owner(), &req(&[])).unwrap_err().contains("bytes"));
    }

    #[test]
    fn default_and_mapped_inputs() {
        let plain = namespace_tool("t");
        assert_eq!(plain.input(&[]), Ok(json!({})));
        assert_eq!(plain.input(&[Value::Null]), Ok(json!({})));
        assert_eq!(plain.input(&[json!({"a": 1}), json!(2)]), Ok(json!({"a": 1})));
        let mapped = namespace_tool_with("t", |a| Ok(json!({"n": a.first().cloned().unwrap_or(Value::Null)})));
        assert_eq!(mapped.input(&[json!(5)]), Ok(json!({"n": 5})));
        let refusing = namespace_tool_with("t", |_| Err("bad arguments".into()));
        assert_eq!(refusing.input(&[]), Err("bad arguments".into()));
        let panicking = namespace_tool_with("t", |_| panic!("boom"));
        assert!(panicking.input(&[]).unwrap_err().0.contains("panicked"));
    }
}
