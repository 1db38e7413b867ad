//! `defineNamespaces` for the native engine: the prelude's optional third primitive (its contract
//! is in the prelude's layer 0; the reference behaviour is `boot`'s own loop in layer 4,
//! `defineNamespacesHere`, which the Boa engine runs). It defines a run's namespaces (contract L5) at
//! boot: for each visible namespace, one getter that builds the namespace object on the first
//! read, as the accessor `namespaces.<globalName>` and as the direct global `<globalName>`.
//!
//! Interpreted, that loop cost a run with two namespaces about as much as the rest of its boot (a
//! closure per namespace, the index split into strings, the loop's own bytecode); here the index
//! is read as bytes and each namespace costs one C function with its data and two property
//! definitions. The WebAssembly engine's shim (`guest/shim.c`) has the same function in C; both
//! must keep the prelude loop's behaviour.
//!
//! Nothing here runs guest code: the index is a line of the host's boot text (`name len` pairs,
//! see `codemode_bridge::BootText::with_namespace_texts`), `reserved` is the prelude's private
//! null-prototype set, and the root, a fresh null-prototype object, is made here and returned
//! non-extensible. Only `build` (the prelude's `buildScope`) is called, by a getter.
#![allow(unsafe_code)]

use rquickjs::qjs;
use std::ffi::c_int;

/// Slots of a namespace getter's data.
const BUILD: usize = 0;
const TEXTS: usize = 1;
const START: usize = 2;
const LEN: usize = 3;
/// The built namespace object, `undefined` until the first read.
const BUILT: usize = 4;
const SLOTS: c_int = 5;

/// A namespace's getter: builds the namespace object on its first read and keeps it in its own data
/// (slot [`BUILT`]), so both accessors (they share this one function) return the same object. The
/// slot belongs to the function's data record, which QuickJS's collector marks with the others.
///
/// # Safety
/// Called by QuickJS only, with the data record of a function made by [`define_namespaces`]
/// ([`SLOTS`] values).
unsafe extern "C" fn namespace_get(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    _argc: c_int,
    _argv: *mut qjs::JSValue,
    _magic: c_int,
    data: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: `data` points at this function's SLOTS values (the contract), live while it runs.
    unsafe {
        let built = *data.add(BUILT);
        if !qjs::JS_IsUndefined(built) {
            return qjs::JS_DupValue(ctx, built);
        }
        let mut args = [*data.add(TEXTS), *data.add(START), *data.add(LEN)];
        let made = qjs::JS_Call(ctx, *data.add(BUILD), qjs::JS_UNDEFINED, 3, args.as_mut_ptr());
        if qjs::JS_IsException(made) {
            return made;
        }
        // The record's storage is a plain array of values: replacing one (the old one freed, the
        // new one owned by the record) is what QuickJS's own data functions may do.
        let slot = data.add(BUILT);
        qjs::JS_FreeValue(ctx, *slot);
        *slot = qjs::JS_DupValue(ctx, made);
        made
    }
}

/// The pairs of a namespace index (`name len`, tokens separated by single spaces, as the prelude
/// pairs `index.split(" ")`), with each text's start: in order, ending at a name without a length
/// and at a length that is not a non-negative integer in its shortest decimal form or that runs
/// past `texts_len` (UTF-16 code units). A name may be empty (the caller skips it; its text still
/// takes its place).
pub(crate) fn index_pairs(index: &[u8], texts_len: f64) -> Vec<(&[u8], f64, f64)> {
    // An empty index is one empty token, a name without a length: no pairs, as in the prelude.
    let mut tokens = index.split(|&b| b == b' ');
    let mut pairs = Vec::new();
    let mut at = 0f64;
    while let (Some(name), Some(len)) = (tokens.next(), tokens.next()) {
        // At most 15 digits: exact in a double, and longer than any text a JS string can hold.
        let shortest = !len.is_empty() && len.len() <= 15 && (len.len() == 1 || len[0] != b'0');
        if !shortest || !len.iter().all(u8::is_ascii_digit) {
            break;
        }
        let len = len.iter().fold(0f64, |v, d| v * 10.0 + f64::from(d - b'0'));
        if at + len > texts_len {
            break;
        }
        pairs.push((name, at, len));
        at += len;
    }
    pairs
}

/// `defineNamespaces(global, index, texts, reserved, build) -> root`: see the module docs and the
/// prelude's layer 0.
///
/// # Safety
/// Called by QuickJS only: `ctx` is a live context under its runtime's lock, and `argv` holds at
/// least 5 values (QuickJS pads it to the declared length with `undefined`).
pub(crate) unsafe extern "C" fn define_namespaces(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    argc: c_int,
    argv: *mut qjs::JSValue,
) -> qjs::JSValue {
    const USAGE: &str = "defineNamespaces(global, index, texts, reserved, build)";
    if argc < 5 || argv.is_null() {
        // SAFETY: as the contract says.
        return unsafe { crate::ffi::throw_type(ctx, USAGE) };
    }
    // SAFETY: at least 5 values, borrowed for this call.
    let [global, index, texts, reserved, build] =
        (unsafe { std::slice::from_raw_parts(argv, 5) }).try_into().unwrap_or([qjs::JS_UNDEFINED; 5]);
    // SAFETY: values of this call, under the runtime's lock; every reference made below is freed
    // once on every path (the exception marker needs no freeing).
    unsafe {
        if !qjs::JS_IsObject(global)
            || !qjs::JS_IsString(index)
            || !qjs::JS_IsString(texts)
            || !qjs::JS_IsObject(reserved)
            || !qjs::JS_IsFunction(ctx, build)
        {
            return crate::ffi::throw_type(ctx, USAGE);
        }
        let mut texts_len = 0i64;
        if qjs::JS_GetLength(ctx, texts, &mut texts_len) < 0 {
            return qjs::JS_EXCEPTION;
        }
        let root = qjs::JS_NewObjectProto(ctx, qjs::JS_NULL);
        if qjs::JS_IsException(root) {
            return root;
        }
        // The index's bytes (a copy QuickJS frees after the closure); out of memory is an exception.
        let defined = crate::ffi::with_bytes(ctx, index, |text| {
            for (name, start, len) in index_pairs(text, texts_len as f64) {
                if name.is_empty() {
                    continue;
                }
                let atom = qjs::JS_NewAtomLen(ctx, name.as_ptr().cast(), name.len() as qjs::size_t);
                if atom == qjs::JS_ATOM_NULL {
                    return false;
                }
                let defined = define_namespace(ctx, [root, global, texts, reserved, build], atom, start, len);
                qjs::JS_FreeAtom(ctx, atom);
                if defined < 0 {
                    return false;
                }
            }
            true
        });
        // Frozen: its properties are non-configurable accessors, so making it non-extensible is
        // all `Object.freeze` would still do.
        if defined == Some(true) && qjs::JS_PreventExtensions(ctx, root) >= 0 {
            root
        } else {
            qjs::JS_FreeValue(ctx, root);
            qjs::JS_EXCEPTION
        }
    }
}

/// Defines one namespace's two accessors (`atom` on `root` and on `global`) unless its name is
/// reserved or defined already: 0 when defined or skipped, -1 with an exception pending.
///
/// # Safety
/// `ctx` is a live context under its runtime's lock, the values are the primitive's arguments and
/// `atom` an atom it holds.
unsafe fn define_namespace(
    ctx: *mut qjs::JSContext,
    [root, global, texts, reserved, build]: [qjs::JSValue; 5],
    atom: qjs::JSAtom,
    start: f64,
    len: f64,
) -> c_int {
    // SAFETY: as the contract says; every reference made here is freed on every path.
    unsafe {
        let is_reserved = qjs::JS_GetProperty(ctx, reserved, atom);
        if qjs::JS_IsException(is_reserved) {
            return -1;
        }
        let skip = qjs::JS_IsBool(is_reserved) && qjs::JS_VALUE_GET_BOOL(is_reserved);
        qjs::JS_FreeValue(ctx, is_reserved);
        let present = if skip { 0 } else { qjs::JS_HasProperty(ctx, root, atom) };
        if present < 0 {
            return -1;
        }
        if skip || present > 0 {
            return 0;
        }
        let mut data = [build, texts, qjs::JS_NewNumber(ctx, start), qjs::JS_NewNumber(ctx, len), qjs::JS_UNDEFINED];
        // The data record takes its own references of the five values (the two numbers are not
        // reference-counted).
        let get = qjs::JS_NewCFunctionData2(ctx, Some(namespace_get), c"get".as_ptr(), 0, 0, SLOTS, data.as_mut_ptr());
        if qjs::JS_IsException(get) {
            return -1;
        }
        let accessor = (qjs::JS_PROP_HAS_GET | qjs::JS_PROP_HAS_ENUMERABLE | qjs::JS_PROP_HAS_CONFIGURABLE) as c_int;
        let mut defined = qjs::JS_DefineProperty(
            ctx,
            root,
            atom,
            qjs::JS_UNDEFINED,
            get,
            qjs::JS_UNDEFINED,
            accessor | (qjs::JS_PROP_ENUMERABLE | qjs::JS_PROP_THROW) as c_int,
        );
        if defined >= 0 {
            // A global the VM does not let us define (the host refuses such names) stays reachable
            // as `namespaces.<name>` only, as in the prelude's loop, which catches the error; an
            // uncatchable one (an interrupt) goes on.
            let g = qjs::JS_DefineProperty(ctx, global, atom, qjs::JS_UNDEFINED, get, qjs::JS_UNDEFINED, accessor);
            if g < 0 {
                let e = qjs::JS_GetException(ctx);
                if qjs::JS_IsUncatchableError(e) {
                    qjs::JS_Throw(ctx, e);
                    defined = -1;
                } else {
                    qjs::JS_FreeValue(ctx, e);
                }
            }
        }
        qjs::JS_FreeValue(ctx, get);
        if defined < 0 { -1 } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::index_pairs;

    /// The index is read as the prelude's loop reads it (`split(" ")`, pairs, shortest decimal
    /// lengths), so both QuickJS engines and Boa define the same namespaces.
    #[test]
    fn index_pairs_read_as_the_prelude_reads_them() {
        let pairs = |index: &str, texts: f64| -> Vec<(String, f64, f64)> {
            index_pairs(index.as_bytes(), texts)
                .into_iter()
                .map(|(n, s, l)| (String::from_utf8_lossy(n).into_owned(), s, l))
                .collect()
        };
        let own = |v: &[(&str, f64, f64)]| v.iter().map(|&(n, s, l)| (n.to_string(), s, l)).collect::<Vec<_>>();
        assert_eq!(pairs("", 10.0), own(&[]));
        assert_eq!(pairs("A 3 B 0 C 7", 10.0), own(&[("A", 0.0, 3.0), ("B", 3.0, 0.0), ("C", 3.0, 7.0)]));
        // An empty name keeps its text's place; a name without a length ends the list.
        assert_eq!(pairs(" 2 C 3 D", 5.0), own(&[("", 0.0, 2.0), ("C", 2.0, 3.0)]));
        // Lengths that stop the list: past the texts, signed, leading zero, not decimal, empty, long.
        for bad in ["A 1 B 10", "A 1 B -1", "A 1 B 01", "A 1 B 1e1", "A 1 B 1.0", "A 1 B ", "A 1 B 1234567890123456"] {
            assert_eq!(pairs(bad, 9.0), own(&[("A", 0.0, 1.0)]), "{bad}");
        }
        // Double spaces make an empty token, read as a name or a length like `split` does.
        assert_eq!(pairs("A 1  B 2", 9.0), own(&[("A", 0.0, 1.0)]));
        assert_eq!(pairs("A 0", 0.0), own(&[("A", 0.0, 0.0)]));
    }
}
