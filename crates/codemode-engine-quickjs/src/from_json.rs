//! Outcomes into guest values: the JSON text of a settled request read by serde_json straight into
//! QuickJS values — the values `JSON.parse` makes of it, without going through QuickJS's own
//! tokenizer.
//!
//! Why: every settled nested call's value is parsed here. QuickJS's `JSON.parse` makes a string
//! value of every property name before it turns it into an atom, and reads every number with
//! `strtod`; serde_json's reader (already in the process for the bridge) hands over borrowed text
//! and integers, and the values are made with the calls `JSON.parse` itself makes:
//! `JS_NewObject` / `JS_NewArray`, `JS_DefinePropertyValue` with `JS_PROP_C_W_E` (own data
//! properties, in the text's order; `__proto__` is an ordinary own property, as there), strings
//! from UTF-8, numbers correctly rounded (serde_json's `float_roundtrip`; integers beyond 2^53
//! rounded as `JSON.parse` rounds them; `-0` stays `-0`).
//!
//! Anything serde_json refuses — text no JSON value serializer made here would write, such as a
//! lone surrogate escape, a number beyond the double range or nesting past its recursion limit —
//! is left to [`crate::ffi::parse_json`] (QuickJS's parser), which decides as `JSON.parse`
//! does. Only an allocation the guest heap refuses (out of memory) ends the parse as an
//! exception. No guest code runs: the objects are fresh ordinary objects and arrays.
#![allow(unsafe_code)]

use rquickjs::qjs;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use std::cell::Cell;
use std::fmt;

/// Why the direct reading stopped.
pub(crate) enum NotRead {
    /// serde_json refused the text (the caller's fallback decides).
    Refused,
    /// QuickJS refused an allocation: its exception is pending.
    Exception,
}

/// Reads `json` into a new value of `ctx` (an owned reference).
///
/// # Safety
/// `ctx` is a live context, used under its runtime's lock.
pub(crate) unsafe fn read(ctx: *mut qjs::JSContext, json: &str) -> Result<qjs::JSValue, NotRead> {
    let thrown = Cell::new(false);
    let mut de = serde_json::Deserializer::from_str(json);
    let built = Build { ctx, thrown: &thrown }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    match built {
        Ok(v) => Ok(v.take()),
        Err(_) if thrown.get() => Err(NotRead::Exception),
        Err(_) => Err(NotRead::Refused),
    }
}

/// An owned reference to a value of `ctx`, freed when dropped unless taken.
struct Owned {
    ctx: *mut qjs::JSContext,
    value: qjs::JSValue,
}

impl Owned {
    fn take(self) -> qjs::JSValue {
        let value = self.value;
        std::mem::forget(self);
        value
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: an owned reference of the live context `read` was given, freed once.
        unsafe { qjs::JS_FreeValue(self.ctx, self.value) }
    }
}

// The calls both readings make, each as `JSON.parse` makes it. `None` / `false`: QuickJS refused
// an allocation and its exception is pending.

/// Wraps a value QuickJS just made, `None` for the exception marker.
fn owned(ctx: *mut qjs::JSContext, value: qjs::JSValue) -> Option<Owned> {
    // SAFETY: checking a value just made.
    if unsafe { qjs::JS_IsException(value) } { None } else { Some(Owned { ctx, value }) }
}

/// A new string of `s`.
///
/// # Safety
/// `ctx` is a live context, used under its runtime's lock.
unsafe fn new_string(ctx: *mut qjs::JSContext, s: &str) -> Option<Owned> {
    // SAFETY: `s` is valid UTF-8 of the given length; the context is live.
    owned(ctx, unsafe { qjs::JS_NewStringLen(ctx, s.as_ptr().cast(), s.len() as qjs::size_t) })
}

/// A new empty array, or ordinary object.
///
/// # Safety
/// As [`new_string`].
unsafe fn new_container(ctx: *mut qjs::JSContext, array: bool) -> Option<Owned> {
    // SAFETY: the context is live.
    owned(ctx, unsafe { if array { qjs::JS_NewArray(ctx) } else { qjs::JS_NewObject(ctx) } })
}

/// Defines `item` as element `index` of `array` (handed over whatever the outcome).
///
/// # Safety
/// As [`new_string`]; `array` is an array of `ctx`.
unsafe fn set_item(ctx: *mut qjs::JSContext, array: &Owned, index: u32, item: Owned) -> bool {
    // SAFETY: as the contract says; QuickJS takes the item's reference.
    unsafe { qjs::JS_DefinePropertyValueUint32(ctx, array.value, index, item.take(), qjs::JS_PROP_C_W_E as _) >= 0 }
}

/// Defines `item` as `object`'s own data property `key` (handed over whatever the outcome).
///
/// # Safety
/// As [`new_string`]; `object` is an ordinary object of `ctx`.
unsafe fn set_key(ctx: *mut qjs::JSContext, object: &Owned, key: &str, item: Owned) -> bool {
    // SAFETY: `key` is valid UTF-8 of the given length; the context is live.
    let atom = unsafe { qjs::JS_NewAtomLen(ctx, key.as_ptr().cast(), key.len() as qjs::size_t) };
    if atom == qjs::JS_ATOM_NULL {
        return false;
    }
    // SAFETY: `object` is a live ordinary object of this context and `atom` a live atom (freed
    // right after); QuickJS takes the item's reference.
    let status = unsafe { qjs::JS_DefinePropertyValue(ctx, object.value, atom, item.take(), qjs::JS_PROP_C_W_E as _) };
    // SAFETY: the atom made above, freed once.
    unsafe { qjs::JS_FreeAtom(ctx, atom) };
    status >= 0
}

/// The seed and visitor: makes each value in `ctx`; `thrown` records that QuickJS refused.
#[derive(Clone, Copy)]
struct Build<'a> {
    ctx: *mut qjs::JSContext,
    thrown: &'a Cell<bool>,
}

impl Build<'_> {
    /// A made value, or the error that ends the reading as an exception.
    fn made<E: de::Error>(self, value: Option<Owned>) -> Result<Owned, E> {
        value.ok_or_else(|| self.refused())
    }

    /// A definition's outcome, or the error that ends the reading as an exception.
    fn defined<E: de::Error>(self, ok: bool) -> Result<(), E> {
        if ok { Ok(()) } else { Err(self.refused()) }
    }

    fn refused<E: de::Error>(self) -> E {
        self.thrown.set(true);
        E::custom("allocation refused")
    }
}

impl<'de> DeserializeSeed<'de> for Build<'_> {
    type Value = Owned;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Owned, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Build<'_> {
    type Value = Owned;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Owned, E> {
        Ok(Owned { ctx: self.ctx, value: qjs::JS_NULL })
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Owned, E> {
        Ok(Owned { ctx: self.ctx, value: if b { qjs::JS_TRUE } else { qjs::JS_FALSE } })
    }

    // Integers beyond 2^53 round to the nearest double (ties to even), as `JSON.parse` rounds
    // their digits; `JS_NewFloat64` keeps an integral value as a small integer where it fits.
    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Owned, E> {
        Ok(Owned { ctx: self.ctx, value: qjs::JS_NewFloat64(n as f64) })
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Owned, E> {
        Ok(Owned { ctx: self.ctx, value: qjs::JS_NewFloat64(n as f64) })
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Owned, E> {
        Ok(Owned { ctx: self.ctx, value: qjs::JS_NewFloat64(n) })
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Owned, E> {
        // SAFETY: the context is live (see `read`).
        self.made(unsafe { new_string(self.ctx, s) })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Owned, A::Error> {
        // SAFETY: the context is live (see `read`).
        let array = self.made(unsafe { new_container(self.ctx, true) })?;
        let mut index: u32 = 0;
        while let Some(item) = items.next_element_seed(self)? {
            // SAFETY: `array` is an array of this live context.
            self.defined(unsafe { set_item(self.ctx, &array, index, item) })?;
            index = index.checked_add(1).ok_or_else(|| de::Error::custom("too many items"))?;
        }
        Ok(array)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Owned, A::Error> {
        // SAFETY: the context is live (see `read`).
        let object = self.made(unsafe { new_container(self.ctx, false) })?;
        while let Some(key) = entries.next_key::<Key<'de>>()? {
            let value = entries.next_value_seed(self)?;
            // SAFETY: `object` is an ordinary object of this live context.
            self.defined(unsafe { set_key(self.ctx, &object, key.as_str(), value) })?;
        }
        Ok(object)
    }
}

/// A property name: borrowed from the text where it has no escape, unescaped otherwise.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl Key<'_> {
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a property name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Makes the guest value of a host value: what `JSON.parse` makes of the value's encoding for the
/// guest (`codemode_bridge::adapter::encode_for_guest`), built with the same calls as [`read`] —
/// forbidden keys left out as the encoding leaves them out, numbers as the double `JSON.parse`
/// reads from their text (an integer rounded to the nearest, a double exactly: the encoding
/// writes its shortest round-trip form), strings as they are. `None`: QuickJS refused an
/// allocation and its exception is pending. Recursive: the bridge hands over only values nested at
/// most `codemode_bridge::host::VALUE_DEPTH_MAX` levels.
///
/// # Safety
/// `ctx` is a live context, used under its runtime's lock.
pub(crate) unsafe fn build(ctx: *mut qjs::JSContext, value: &serde_json::Value) -> Option<qjs::JSValue> {
    // SAFETY: as the contract says.
    unsafe { build_owned(ctx, value) }.map(Owned::take)
}

/// [`build`], owned.
///
/// # Safety
/// As [`build`].
unsafe fn build_owned(ctx: *mut qjs::JSContext, value: &serde_json::Value) -> Option<Owned> {
    use serde_json::Value as J;
    match value {
        J::Null => Some(Owned { ctx, value: qjs::JS_NULL }),
        J::Bool(b) => Some(Owned { ctx, value: if *b { qjs::JS_TRUE } else { qjs::JS_FALSE } }),
        J::Number(n) => {
            let d = match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i as f64,
                (None, Some(u)) => u as f64,
                _ => n.as_f64().unwrap_or(f64::NAN),
            };
            Some(Owned { ctx, value: qjs::JS_NewFloat64(d) })
        }
        // SAFETY: the context is live (the contract).
        J::String(s) => unsafe { new_string(ctx, s) },
        J::Array(items) => {
            // SAFETY: as above.
            let array = unsafe { new_container(ctx, true) }?;
            for (index, item) in items.iter().enumerate() {
                // SAFETY: as above.
                let item = unsafe { build_owned(ctx, item) }?;
                let Ok(index) = u32::try_from(index) else {
                    // More items than an array holds (never within the bridge's size limit).
                    // SAFETY: the context is live; the exception stays pending for the caller.
                    unsafe { qjs::JS_ThrowOutOfMemory(ctx) };
                    return None;
                };
                // SAFETY: `array` is an array of this live context.
                if !unsafe { set_item(ctx, &array, index, item) } {
                    return None;
                }
            }
            Some(array)
        }
        J::Object(map) => {
            // SAFETY: as above.
            let object = unsafe { new_container(ctx, false) }?;
            for (key, item) in map.iter().filter(|(k, _)| !codemode_bridge::adapter::is_forbidden_key(k)) {
                // SAFETY: as above.
                let item = unsafe { build_owned(ctx, item) }?;
                // SAFETY: `object` is an ordinary object of this live context.
                if !unsafe { set_key(ctx, &object, key, item) } {
                    return None;
                }
            }
            Some(object)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rquickjs::{Context, Ctx, Function, Object, Runtime, Value};
    use serde_json::{Map, Value as Json};

    /// Compares two values as a guest could: type, `Object.is` for primitives, prototype,
    /// extensibility, own keys in order and every property's attributes and value. "" when equal,
    /// else where and how they differ.
    const SAME: &str = r#"(function same(a, b, path = "$") {
        if (typeof a !== typeof b) return `${path}: ${typeof a} vs ${typeof b}`;
        if (a === null || typeof a !== "object") return Object.is(a, b) ? "" : `${path}: ${String(a)} vs ${String(b)}`;
        if (b === null) return `${path}: object vs null`;
        if (Array.isArray(a) !== Array.isArray(b)) return `${path}: array vs not`;
        if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return `${path}: prototype`;
        if (Object.isExtensible(a) !== Object.isExtensible(b)) return `${path}: extensible`;
        const ka = Reflect.ownKeys(a), kb = Reflect.ownKeys(b);
        if (ka.length !== kb.length) return `${path}: ${ka.length} vs ${kb.length} keys`;
        for (let i = 0; i < ka.length; i++) {
            const at = `${path}.${String(ka[i])}`;
            if (ka[i] !== kb[i]) return `${path}: key ${String(ka[i])} vs ${String(kb[i])}`;
            const da = Object.getOwnPropertyDescriptor(a, ka[i]), db = Object.getOwnPropertyDescriptor(b, kb[i]);
            for (const f of ["writable", "enumerable", "configurable", "get", "set"]) {
                if (da[f] !== db[f]) return `${at}: ${f}`;
            }
            const r = same(da.value, db.value, at);
            if (r) return r;
        }
        return "";
    })"#;

    fn with_context<R>(f: impl FnOnce(&Ctx<'_>) -> R) -> R {
        let rt = Runtime::new().unwrap();
        let ctx = Context::full(&rt).unwrap();
        ctx.with(|ctx| f(&ctx))
    }

    /// `Ok(true)`: read directly; `Ok(false)`: left to QuickJS's parser. Either way the value must
    /// be the one `JSON.parse` makes of `text`.
    fn compare(ctx: &Ctx<'_>, text: &str) -> Result<bool, String> {
        // SAFETY: a live context under its lock; the value (if any) is freed right away.
        let direct = match unsafe { read(ctx.as_raw().as_ptr(), text) } {
            Ok(v) => {
                // SAFETY: a new reference of this context, owned by the `Value` from here.
                drop(unsafe { Value::from_raw(ctx.clone(), v) });
                true
            }
            Err(NotRead::Refused) => false,
            Err(NotRead::Exception) => return Err(format!("exception reading {text}")),
        };
        let ours = crate::ffi::parse_json(ctx, &mut text.to_string()).map_err(|e| format!("{e} for {text}"))?;
        let json: Object<'_> = ctx.globals().get("JSON").unwrap();
        let parse: Function<'_> = json.get("parse").unwrap();
        let reference: Value<'_> = parse.call((text,)).map_err(|e| format!("JSON.parse: {e} for {text}"))?;
        let same: Function<'_> = ctx.eval(SAME).unwrap();
        let diff: String = same.call((ours, reference)).unwrap();
        if diff.is_empty() { Ok(direct) } else { Err(format!("{diff} for {text}")) }
    }

    fn json_value() -> impl Strategy<Value = Json> {
        let number = prop_oneof![
            any::<i64>().prop_map(Json::from),
            any::<u64>().prop_map(Json::from),
            any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Json::Number)),
            (-1e6f64..1e6).prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Json::Number)),
            Just(serde_json::json!(-0.0)),
            Just(serde_json::json!(9_007_199_254_740_993u64)),
        ];
        let leaf = prop_oneof![
            Just(Json::Null),
            any::<bool>().prop_map(Json::Bool),
            number,
            any::<String>().prop_map(Json::String)
        ];
        let key = prop_oneof![
            any::<String>(),
            "[a-z]{1,3}",
            "(0|[1-9][0-9]{0,10})",
            Just("__proto__".to_string()),
            Just("constructor".to_string()),
            Just("prototype".to_string()),
            Just("-0".to_string()),
            Just("4294967295".to_string()),
        ];
        leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
                prop::collection::vec((key.clone(), inner), 0..6)
                    .prop_map(|entries| Json::Object(entries.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    /// `build`'s value of `value` against what `JSON.parse` makes of its encoding for the guest.
    fn compare_built(ctx: &Ctx<'_>, value: &Json) -> Result<(), String> {
        let text = codemode_bridge::adapter::encode_for_guest(value, u64::MAX, 64).map_err(|e| e.to_string())?;
        let built = crate::ffi::value_of(ctx, value).map_err(|e| format!("{e} building {text}"))?;
        let json: Object<'_> = ctx.globals().get("JSON").unwrap();
        let parse: Function<'_> = json.get("parse").unwrap();
        let reference: Value<'_> = parse.call((text.as_str(),)).map_err(|e| format!("JSON.parse: {e} for {text}"))?;
        let same: Function<'_> = ctx.eval(SAME).unwrap();
        let diff: String = same.call((built, reference)).unwrap();
        if diff.is_empty() { Ok(()) } else { Err(format!("{diff} for {text}")) }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// A host value handed over as it is (`HostCallResult::SettledValue`) becomes what the
        /// guest would have parsed from its encoding: forbidden keys left out, numbers and
        /// strings alike.
        #[test]
        fn host_values_build_as_json_parse_reads_their_encoding(value in json_value()) {
            prop_assert_eq!(with_context(|ctx| compare_built(ctx, &value)), Ok(()));
        }

        /// Every text serde_json writes of a value is read directly (never left to the fallback,
        /// so the comparison is of the direct reading) into what `JSON.parse` makes of it.
        #[test]
        fn serialized_values_read_directly_as_json_parse_reads_them(value in json_value()) {
            let text = serde_json::to_string(&value).unwrap();
            let direct = with_context(|ctx| compare(ctx, &text));
            prop_assert_eq!(direct, Ok(true));
        }
    }

    #[test]
    fn edge_texts_read_as_json_parse_reads_them() {
        with_context(|ctx| {
            let read_directly = [
                "-0.0",
                "-0",
                "0",
                "1e308",
                "-1e-320",
                "123456789012345678901234567890",
                "18446744073709551615",
                "-9223372036854775808",
                "9007199254740993",
                "2147483648",
                "-2147483649",
                r#""\ud83d\ude00 \u0000 \n \"x\" é""#,
                r#"{"__proto__": {"a": 1}, "constructor": 2}"#,
                r#"{"b": 1, "1": 2, "a": 3, "0": 4, "4294967295": 5, "-0": 6}"#,
                r#"{"a": 1, "a": 2}"#,
                r#"{"k\u00e9y\n": [], "": {}}"#,
                "  [ 1 , [ ] , { } , null , true , false ]  ",
            ];
            for text in read_directly {
                assert_eq!(compare(ctx, text), Ok(true), "{text}");
            }
            // Refused by serde_json, decided by QuickJS's parser as `JSON.parse` decides.
            let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
            for text in [r#""\ud800""#, r#"{"\udc00": 1}"#, "1e400", "-1e400", deep.as_str()] {
                assert_eq!(compare(ctx, text), Ok(false), "{text}");
            }
        });
    }

    #[test]
    fn text_json_parse_refuses_is_refused() {
        with_context(|ctx| {
            for text in ["", "[1,]", "{\"a\":1,}", "NaN", "'x'", "[1] 2", "{a:1}"] {
                assert!(crate::ffi::parse_json(ctx, &mut text.to_string()).is_err(), "{text}");
            }
        });
    }
}
