//! The guest vocabulary both sides of the bridge agree on: names the guest API reserves.
//!
//! The catalog uses these to decide which tool names may become properties of guest objects; the
//! bridge prelude enforces the same lists a second time inside the guest (a test keeps the two
//! copies equal).

/// Property names the JavaScript language itself looks up on objects: `then` (`await` treats an
/// object with a `then` function as a promise), the coercion hooks (`toString`, `valueOf`,
/// `toLocaleString`), `toJSON` (`JSON.stringify`), and `Object.prototype`'s members and accessors.
///
/// A tool is never installed under one of these names on a guest object (`tools`, an `MCP.<server>`
/// namespace): otherwise `await MCP.server` would call a tool named `then`, and `String(MCP.server)`
/// one named `toString`. Prevents: a hostile upstream server making the model's code call its tools
/// by accident. Such tools stay reachable explicitly (`MCP.server.$call("then", input)`, or by id).
pub const JS_INTERNAL_NAMES: [&str; 15] = [
    "then",
    "constructor",
    "prototype",
    "__proto__",
    "toString",
    "toLocaleString",
    "valueOf",
    "toJSON",
    "hasOwnProperty",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "__defineGetter__",
    "__defineSetter__",
    "__lookupGetter__",
    "__lookupSetter__",
];

/// The helpers every `MCP.<server>` namespace has; a tool with one of these names is reachable only
/// through `$call`.
pub const MCP_NAMESPACE_HELPERS: [&str; 4] = ["$api", "$call", "resources", "prompts"];

/// Whether `name` is one of [`JS_INTERNAL_NAMES`].
pub fn is_js_internal_name(name: &str) -> bool {
    JS_INTERNAL_NAMES.contains(&name)
}
