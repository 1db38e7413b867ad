//! The JSON-safe value adapter, host side (contract §7, B6).
//!
//! Every value crossing the bridge is JSON text. Going into the host it is parsed here under a size and
//! depth limit; going into the guest it is serialized here under the same kind of limits. In both
//! directions the keys `__proto__`, `constructor` and `prototype` are dropped, so data can never be used
//! to smuggle prototype changes through naive merges in guest code or in tools written in JavaScript.
//! (The guest half of the adapter, in the prelude, turns cycles, BigInt, functions, symbols and binary
//! data into plain JSON first.)

use codemode_core::engine::RequestKind;
use codemode_core::guest::{GuestRequest, GuestRequestError};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;
use std::io;

pub use codemode_core::guest::FORBIDDEN_KEYS;

/// Why a value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdapterError {
    /// The JSON text is larger than allowed.
    #[error("value of {size} bytes exceeds the bridge limit of {limit} bytes")]
    TooLarge {
        /// Size seen (for serialization: the limit plus one).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The value nests deeper than allowed.
    #[error("value nests deeper than {limit} levels")]
    TooDeep {
        /// The limit.
        limit: u32,
    },
    /// The text is not JSON.
    #[error("not valid JSON: {0}")]
    Invalid(String),
}

/// Whether `key` is dropped at the bridge.
pub fn is_forbidden_key(key: &str) -> bool {
    FORBIDDEN_KEYS.contains(&key)
}

/// Nesting depth of a value: scalars are 0, `[]` is 1, `[[1]]` is 2. Iterative, so any depth is safe.
/// Only containers are stacked, and the first one is not: a flat value (most tool inputs and
/// results) allocates nothing.
pub fn depth(value: &Value) -> usize {
    let nested = |x: &&Value| x.is_array() || x.is_object();
    let mut max = 0;
    let mut stack: Vec<(&Value, usize)> = Vec::new();
    let mut next = Some((value, 0));
    while let Some((v, d)) = next.take().or_else(|| stack.pop()) {
        match v {
            Value::Array(items) => {
                max = max.max(d + 1);
                stack.extend(items.iter().filter(nested).map(|x| (x, d + 1)));
            }
            Value::Object(map) => {
                max = max.max(d + 1);
                stack.extend(map.values().filter(nested).map(|x| (x, d + 1)));
            }
            _ => {}
        }
    }
    max
}

/// Removes forbidden keys everywhere in `value`; returns how many were removed.
///
/// Recursive: call it only on values whose [`depth`] is already bounded.
pub fn sanitize(value: &mut Value) -> usize {
    match value {
        Value::Array(items) => items.iter_mut().map(sanitize).sum(),
        Value::Object(map) => {
            let mut removed = 0;
            // A small map (most payloads) is scanned once rather than hashed for every forbidden key.
            if map.len() > 2 * FORBIDDEN_KEYS.len() || map.keys().any(|k| FORBIDDEN_KEYS.contains(&k.as_str())) {
                for key in FORBIDDEN_KEYS {
                    if map.shift_remove(key).is_some() {
                        removed += 1;
                    }
                }
            }
            removed + map.values_mut().map(sanitize).sum::<usize>()
        }
        _ => 0,
    }
}

/// Parses JSON text coming from the guest: size limit, depth limit, forbidden keys dropped.
pub fn parse_guest_json(text: &str, max_bytes: u64, max_depth: u32) -> Result<Value, AdapterError> {
    let size = text.len() as u64;
    if size > max_bytes {
        return Err(AdapterError::TooLarge { size, limit: max_bytes });
    }
    // JavaScript strings may hold lone UTF-16 surrogates, which JSON.stringify escapes (`\ud800`)
    // but no Rust string can hold: they become U+FFFD, like any lossy UTF-16 decoder does.
    let text = replace_lone_surrogates(text);
    let mut value: Value = serde_json::from_str(&text).map_err(|e| {
        if e.to_string().contains("recursion limit") {
            AdapterError::TooDeep { limit: max_depth }
        } else {
            AdapterError::Invalid(e.to_string())
        }
    })?;
    if depth(&value) > max_depth as usize {
        return Err(AdapterError::TooDeep { limit: max_depth });
    }
    sanitize(&mut value);
    Ok(value)
}

/// Why the payload of a request was refused by [`parse_request`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestPayloadError {
    /// The text breaks a bridge limit or is not JSON (the guest sees a `RangeError`).
    Adapter(AdapterError),
    /// The JSON is not the request's shape (the guest sees a `TypeError`).
    Shape(GuestRequestError),
}

/// Parses the payload of a `kind` request into its typed form, with the bridge's limits: what
/// [`parse_guest_json`] followed by [`GuestRequest::parse`] answers.
///
/// Tool calls (`Call` / `Mcp`, the requests a cell makes thousands of) take a shortcut: straight
/// from the text into the typed request, without a [`Value`] of the envelope and its conversion.
/// It keeps the same size limit and lone-surrogate rule, the depth limit (the payload nests one
/// level deeper than its input) and drops forbidden keys (from the input: the envelope's fields are
/// fixed, others refused there). Whenever the shortcut finds anything wrong, the general path parses
/// the payload again and gives the answer, so which refusal a malformed payload gets does not depend
/// on the shortcut (a property test compares the two).
pub fn parse_request(
    kind: RequestKind,
    text: &str,
    max_bytes: u64,
    max_depth: u32,
) -> Result<GuestRequest, RequestPayloadError> {
    if text.len() as u64 <= max_bytes
        && let Some(Ok(mut request)) = GuestRequest::parse_tool_call(kind, &replace_lone_surrogates(text))
        && let Some(input) = request.tool_input_mut()
        && depth(input) < max_depth as usize
    {
        sanitize(input);
        return Ok(request);
    }
    parse_request_generally(kind, text, max_bytes, max_depth)
}

/// [`parse_request`] without the shortcut: through a [`Value`] of the whole payload.
fn parse_request_generally(
    kind: RequestKind,
    text: &str,
    max_bytes: u64,
    max_depth: u32,
) -> Result<GuestRequest, RequestPayloadError> {
    let value = parse_guest_json(text, max_bytes, max_depth).map_err(RequestPayloadError::Adapter)?;
    GuestRequest::parse(kind, value).map_err(RequestPayloadError::Shape)
}

/// Text a QuickJS guest hands the host (a C string of QuickJS: UTF-8, except that an unpaired
/// UTF-16 surrogate is kept as its own 3-byte sequence, `ED A0..BF 80..BF`) as a Rust string: each
/// unpaired surrogate becomes one U+FFFD, as it does in values (contract O3), and any other invalid
/// byte becomes U+FFFD too. Borrows when the text is valid UTF-8 already.
pub fn guest_text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return std::borrow::Cow::Borrowed(text);
    }
    // U+FFFD is three bytes in UTF-8 too: rewrite each surrogate sequence in place.
    let mut fixed = bytes.to_vec();
    let mut i = 0;
    while i + 2 < fixed.len() {
        if fixed[i] == 0xED && (0xA0..=0xBF).contains(&fixed[i + 1]) && (0x80..=0xBF).contains(&fixed[i + 2]) {
            fixed[i..i + 3].copy_from_slice("\u{FFFD}".as_bytes());
            i += 3;
        } else {
            i += 1;
        }
    }
    std::borrow::Cow::Owned(String::from_utf8_lossy(&fixed).into_owned())
}

/// Rewrites `\uXXXX` escapes of unpaired UTF-16 surrogates in JSON text as `\ufffd`; paired
/// surrogates and everything else are kept. Linear; borrows when there is nothing to rewrite.
pub fn replace_lone_surrogates(text: &str) -> std::borrow::Cow<'_, str> {
    let b = text.as_bytes();
    let unit = |at: usize| -> Option<u16> {
        let hex = b.get(at..at + 6)?;
        if hex[0] != b'\\' || hex[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&hex[2..6]).ok()?, 16).ok()
    };
    // Most messages hold no backslash at all: one byte search (memchr) settles them, where the two
    // substring searches cost ~270 instructions a nested call.
    let needs = text.as_bytes().contains(&b'\\') && (text.contains("\\ud") || text.contains("\\uD"));
    if !needs {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit(i) {
            Some(0xD800..=0xDBFF) => {
                if unit(i + 6).is_some_and(|lo| (0xDC00..=0xDFFF).contains(&lo)) {
                    i += 12;
                } else {
                    out.push_str(&text[copied..i]);
                    out.push_str("\\ufffd");
                    i += 6;
                    copied = i;
                }
            }
            Some(0xDC00..=0xDFFF) => {
                out.push_str(&text[copied..i]);
                out.push_str("\\ufffd");
                i += 6;
                copied = i;
            }
            // Any other escape (including an escaped backslash) is two characters or more: skip its
            // first two so `\\\\ud800` (a backslash, then text) is not mistaken for an escape.
            _ => i += 2,
        }
    }
    out.push_str(&text[copied.min(text.len())..]);
    std::borrow::Cow::Owned(out)
}

/// Whether `value` certainly passes [`encode_for_guest`]'s limits: it nests at most `max_depth`
/// levels (forbidden keys' values included, as the encoder counts them) and an upper bound of its
/// text (every string byte at its escaped length, every number at 25 bytes, the forbidden keys
/// left out as the encoder leaves them out) is at most `max_bytes`. `false` says only that the
/// bound is over: the value may still fit, and only encoding it tells. Iterative, and it stops as
/// soon as either limit is passed.
pub fn fits_for_guest(value: &Value, max_bytes: u64, max_depth: u32) -> bool {
    fn string_bound(s: &str) -> u64 {
        // `"` and `\\` take 2 bytes, control characters at most 6 (`\u001f`), anything else its own.
        2 + s
            .bytes()
            .map(|b| {
                if b < 0x20 {
                    6
                } else if b == b'"' || b == b'\\' {
                    2
                } else {
                    1
                }
            })
            .sum::<u64>()
    }
    // A scalar's bound, `None` for a container.
    fn scalar_bound(v: &Value) -> Option<u64> {
        match v {
            Value::Null | Value::Bool(_) => Some(5),
            Value::Number(_) => Some(25),
            Value::String(s) => Some(string_bound(s)),
            Value::Array(_) | Value::Object(_) => None,
        }
    }
    // A container's element: a scalar counted now (if written), a container walked later.
    fn child<'v>(x: &'v Value, d: usize, kept: bool, size: &mut u64, stack: &mut Vec<(&'v Value, usize, bool)>) {
        match scalar_bound(x) {
            Some(b) if kept => *size += b,
            Some(_) => {}
            None => stack.push((x, d, kept)),
        }
    }
    let max_depth = max_depth as usize;
    let mut bound: u64 = 0;
    // Containers still to walk: (value, its depth, whether it is written). A forbidden key's value
    // is not written, but its nesting counts against the depth limit as in `encode_for_guest`.
    // Scalars are counted where they are met, so a flat value allocates nothing.
    let mut stack: Vec<(&Value, usize, bool)> = Vec::new();
    let mut next = Some((value, 0, true));
    while let Some((v, d, written)) = next.take().or_else(|| stack.pop()) {
        let mut size = 0;
        match v {
            Value::Array(items) => {
                if d + 1 > max_depth {
                    return false;
                }
                size += 2 + items.len() as u64;
                for x in items {
                    child(x, d + 1, written, &mut size, &mut stack);
                }
            }
            Value::Object(map) => {
                if d + 1 > max_depth {
                    return false;
                }
                size += 2;
                for (k, x) in map {
                    let kept = written && !is_forbidden_key(k);
                    if kept {
                        size += string_bound(k) + 2;
                    }
                    child(x, d + 1, kept, &mut size, &mut stack);
                }
            }
            scalar => size += scalar_bound(scalar).unwrap_or(0),
        }
        if written {
            bound += size;
            if bound > max_bytes {
                return false;
            }
        }
    }
    true
}

/// Serializes a host value for the guest: depth limit, size limit (checked while writing, so an
/// oversized value is never fully copied), forbidden keys dropped.
pub fn encode_for_guest(value: &Value, max_bytes: u64, max_depth: u32) -> Result<String, AdapterError> {
    if depth(value) > max_depth as usize {
        return Err(AdapterError::TooDeep { limit: max_depth });
    }
    // Most results are small: one allocation instead of a chain of doublings from 8 bytes.
    let mut w = LimitedWriter { buf: Vec::with_capacity(128), limit: max_bytes as usize };
    match serde_json::to_writer(&mut w, &Sanitized(value)) {
        Ok(()) => Ok(String::from_utf8(w.buf).map_err(|e| AdapterError::Invalid(e.to_string()))?),
        Err(e) if e.is_io() => Err(AdapterError::TooLarge { size: max_bytes.saturating_add(1), limit: max_bytes }),
        Err(e) => Err(AdapterError::Invalid(e.to_string())),
    }
}

struct LimitedWriter {
    buf: Vec<u8>,
    limit: usize,
}

impl io::Write for LimitedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            return Err(io::Error::other("bridge size limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Serializes a value without its forbidden keys.
struct Sanitized<'a>(&'a Value);

impl Serialize for Sanitized<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Sanitized(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let kept = map.iter().filter(|(k, _)| !is_forbidden_key(k));
                let mut m = s.serialize_map(None)?;
                for (k, v) in kept {
                    m.serialize_entry(k, &Sanitized(v))?;
                }
                m.end()
            }
            other => other.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn guest_text_writes_one_replacement_character_per_lone_surrogate() {
        // "a", lone high surrogate U+D800, "b", lone low surrogate U+DC00, "c", as QuickJS encodes them.
        let bytes = b"a\xED\xA0\x80b\xED\xB0\x80c";
        assert_eq!(guest_text(bytes), "a\u{FFFD}b\u{FFFD}c");
        // A surrogate sequence cut short, and a stray continuation byte: lossy, one U+FFFD each.
        assert_eq!(guest_text(b"x\xED\xA0"), "x\u{FFFD}\u{FFFD}");
        assert_eq!(guest_text(b"\x80y"), "\u{FFFD}y");
        // Valid text (a pair arrives as one 4-byte sequence) is borrowed as it is.
        let valid = "é 😀 漢";
        assert!(matches!(guest_text(valid.as_bytes()), std::borrow::Cow::Borrowed(t) if t == valid));
    }

    #[test]
    fn forbidden_keys_are_dropped_both_ways() {
        let v = parse_guest_json(
            r#"{"__proto__": {"polluted": 1}, "a": {"constructor": {"prototype": {"x": 1}}, "b": 2}}"#,
            1 << 20,
            64,
        )
        .unwrap();
        assert_eq!(v, json!({"a": {"b": 2}}));
        let out = encode_for_guest(&json!({"__proto__": 1, "k": [{"prototype": 2, "z": 3}]}), 1 << 20, 64).unwrap();
        assert_eq!(out, r#"{"k":[{"z":3}]}"#);
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        let v = parse_guest_json(r#"{"a":"x\ud800y","b":"\udc00","c":"\ud83d\ude00","d":"\\ud800"}"#, 1000, 8).unwrap();
        assert_eq!(v, json!({"a": "x\u{fffd}y", "b": "\u{fffd}", "c": "😀", "d": "\\ud800"}));
        assert!(matches!(replace_lone_surrogates("plain"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(replace_lone_surrogates(r#""\uD800\uDC00""#), r#""\uD800\uDC00""#, "a pair is kept");
        assert_eq!(replace_lone_surrogates(r#""\ud800"#), r#""\ufffd"#, "truncated text is still handled");
    }

    #[test]
    fn limits() {
        assert_eq!(parse_guest_json("[1,2,3]", 3, 64), Err(AdapterError::TooLarge { size: 7, limit: 3 }));
        let deep = "[".repeat(10) + &"]".repeat(10);
        assert_eq!(parse_guest_json(&deep, 1 << 20, 9), Err(AdapterError::TooDeep { limit: 9 }));
        assert!(parse_guest_json(&deep, 1 << 20, 10).is_ok());
        let very_deep = "[".repeat(5000) + &"]".repeat(5000);
        assert_eq!(parse_guest_json(&very_deep, 1 << 20, 100), Err(AdapterError::TooDeep { limit: 100 }));
        assert!(matches!(parse_guest_json("{", 10, 10), Err(AdapterError::Invalid(_))));
        let big = json!("x".repeat(100));
        assert!(matches!(encode_for_guest(&big, 50, 10), Err(AdapterError::TooLarge { .. })));
        let mut nested = json!(1);
        for _ in 0..20 {
            nested = json!([nested]);
        }
        assert_eq!(encode_for_guest(&nested, 1 << 20, 19), Err(AdapterError::TooDeep { limit: 19 }));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            (-1e12f64..1e12).prop_map(|f| json!(f)),
            "[a-z_\\u{e9}\\u{1F600}\"\\\\]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(
                    (prop_oneof!["[a-z]{1,6}", Just("__proto__".to_string()), Just("constructor".to_string())], inner),
                    0..6
                )
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// `fits_for_guest` is an upper bound: a value it passes encodes within the limits, and
        /// it passes every value at 25 times its encoded length (so it is not always `false`).
        #[test]
        fn a_value_that_fits_encodes_within_the_limits(v in arb_json(), limit in 0u64..400, max_depth in 0u32..8) {
            if fits_for_guest(&v, limit, max_depth) {
                prop_assert!(encode_for_guest(&v, limit, max_depth).is_ok());
            }
            let text = encode_for_guest(&v, u64::MAX, 64).unwrap();
            prop_assert!(fits_for_guest(&v, 25 * text.len() as u64, depth(&v) as u32));
            prop_assert_eq!(fits_for_guest(&v, u64::MAX, max_depth), depth(&v) <= max_depth as usize);
        }

        #[test]
        fn round_trip_preserves_sanitized_values(v in arb_json()) {
            let text = encode_for_guest(&v, 1 << 24, 64).unwrap();
            let back = parse_guest_json(&text, 1 << 24, 64).unwrap();
            let mut expected = v.clone();
            sanitize(&mut expected);
            prop_assert_eq!(&back, &expected);
            // Sanitizing is idempotent and leaves nothing forbidden behind.
            let mut again = back.clone();
            prop_assert_eq!(sanitize(&mut again), 0);
        }

        #[test]
        fn size_limit_is_exact(v in arb_json()) {
            let text = encode_for_guest(&v, 1 << 24, 64).unwrap();
            let n = text.len() as u64;
            prop_assert!(encode_for_guest(&v, n, 64).is_ok());
            prop_assert!(parse_guest_json(&text, n, 64).is_ok());
            if n > 0 {
                let too_large_encode = matches!(encode_for_guest(&v, n - 1, 64), Err(AdapterError::TooLarge { .. }));
                let too_large_parse = matches!(parse_guest_json(&text, n - 1, 64), Err(AdapterError::TooLarge { .. }));
                prop_assert!(too_large_encode);
                prop_assert!(too_large_parse);
            }
        }

        /// `parse_request`'s shortcut for tool calls: for every payload a tool call can carry, it
        /// answers what `parse_guest_json` + `GuestRequest::parse` answer (the same request, or a
        /// refusal of the same class: a limit or bad JSON, or a wrong shape).
        #[test]
        fn tool_calls_parse_as_the_general_path_does(
            input in arb_json(),
            mcp in any::<bool>(),
            id in prop_oneof![Just(json!("plugin:demo:x")), Just(json!(7)), Just(json!(null))],
            mode in prop_oneof![
                Just(None), Just(Some(json!("raw"))), Just(Some(json!("value"))), Just(Some(json!("x")))
            ],
            line in prop_oneof![Just(None), Just(Some(json!(3))), Just(Some(json!(-1))), Just(Some(json!(null)))],
            with_input in any::<bool>(),
            extra in prop_oneof![Just(None), arb_json().prop_map(Some)],
            max_bytes in 16u64..400,
            max_depth in 0u32..6,
            surrogate in any::<bool>(),
        ) {
            let kind = if mcp { RequestKind::Mcp } else { RequestKind::Call };
            let mut env = serde_json::Map::new();
            if mcp {
                env.insert("server".into(), id.clone());
                env.insert("tool".into(), json!("t"));
            } else {
                env.insert("id".into(), id);
            }
            if let Some(m) = mode {
                env.insert("mode".into(), m);
            }
            if with_input {
                env.insert("input".into(), input);
            }
            if let Some(l) = line {
                env.insert("line".into(), l);
            }
            if let Some(x) = extra {
                env.insert("extra".into(), x);
            }
            let mut text = Value::Object(env).to_string();
            if surrogate {
                text = text.replacen('{', "{\"s\":\"\\ud800\",", 1);
            }
            let general = parse_request_generally(kind, &text, max_bytes, max_depth);
            let direct = parse_request(kind, &text, max_bytes, max_depth);
            match (&direct, &general) {
                (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
                (Err(RequestPayloadError::Adapter(a)), Err(RequestPayloadError::Adapter(b))) => {
                    prop_assert_eq!(std::mem::discriminant(a), std::mem::discriminant(b))
                }
                (Err(RequestPayloadError::Shape(a)), Err(RequestPayloadError::Shape(b))) => {
                    prop_assert_eq!(a.kind, b.kind)
                }
                _ => prop_assert!(false, "{}: direct {:?}, general {:?}", text, direct, general),
            }
        }

        /// The iterative `depth` (which stacks containers only) equals the definition, recursively.
        #[test]
        fn depth_is_the_nesting_of_containers(v in arb_json()) {
            fn nesting(v: &Value) -> usize {
                match v {
                    Value::Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
                    Value::Object(map) => 1 + map.values().map(nesting).max().unwrap_or(0),
                    _ => 0,
                }
            }
            prop_assert_eq!(depth(&v), nesting(&v));
        }

        #[test]
        fn depth_limit_is_exact(v in arb_json()) {
            let d = depth(&v) as u32;
            prop_assert!(encode_for_guest(&v, 1 << 24, d).is_ok());
            if d > 0 {
                prop_assert_eq!(encode_for_guest(&v, 1 << 24, d - 1), Err(AdapterError::TooDeep { limit: d - 1 }));
            }
        }
    }
}
