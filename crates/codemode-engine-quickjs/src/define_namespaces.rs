//! `defineNamespaces` for the native engine: the prelude's optional third primitive (its contract
//! is in the prelude's layer 0; the reference behaviour is `boot`'s own loop in layer 4, which the
//! Boa engine runs). It defines a run's namespaces (SPEC L5) at boot: for each visible namespace,
//! one getter that builds the namespace object on the first read, as the accessor
//! `namespaces.<globalName>` and as the direct global `<globalName>`.
//!
//! Interpreted, that loop cost a run with two namespaces about as much as the rest of its boot (a
//! closure and two descriptor objects per namespace, the loop's own bytecode); here each namespace
//! costs one C function with its data and two property definitions. The WebAssembly engine's shim
//! (`guest/shim.c`) has the same function in C; both must keep the prelude loop's behaviour.
//!
//! Nothing here runs guest code: the entries come from the prelude's `JSON.parse` of the host's
//! boot head before any cell code ran, `reserved` is the prelude's private null-prototype set and
//! `root` a fresh null-prototype object. Only `build` (the prelude's `buildScope`) is called, by a
//! getter.
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

/// `entry[key]` when `entry` is an object, else `undefined` (a new reference either way, or the
/// exception marker).
///
/// # Safety
/// `ctx` is a live context under its runtime's lock and `entry` a value it holds.
unsafe fn member(ctx: *mut qjs::JSContext, entry: qjs::JSValue, key: &std::ffi::CStr) -> qjs::JSValue {
    // SAFETY: as the contract says.
    unsafe {
        if qjs::JS_IsObject(entry) { qjs::JS_GetPropertyStr(ctx, entry, key.as_ptr()) } else { qjs::JS_UNDEFINED }
    }
}

/// `defineNamespaces(root, global, entries, texts, reserved, build)`: see the module docs and the
/// prelude's layer 0.
///
/// # Safety
/// Called by QuickJS only: `ctx` is a live context under its runtime's lock, and `argv` holds at
/// least 6 values (QuickJS pads it to the declared length with `undefined`).
pub(crate) unsafe extern "C" fn define_namespaces(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    argc: c_int,
    argv: *mut qjs::JSValue,
) -> qjs::JSValue {
    const USAGE: &str = "defineNamespaces(root, global, entries, texts, reserved, build)";
    if argc < 6 || argv.is_null() {
        // SAFETY: as the contract says.
        return unsafe { crate::ffi::throw_type(ctx, USAGE) };
    }
    // SAFETY: at least 6 values, borrowed for this call.
    let [root, global, entries, texts, reserved, build] =
        (unsafe { std::slice::from_raw_parts(argv, 6) }).try_into().unwrap_or([qjs::JS_UNDEFINED; 6]);
    // SAFETY: values of this call, under the runtime's lock; every reference made below is freed
    // once on every path (the exception marker needs no freeing).
    unsafe {
        if !qjs::JS_IsObject(root)
            || !qjs::JS_IsObject(global)
            || !qjs::JS_IsArray(entries)
            || !qjs::JS_IsString(texts)
            || !qjs::JS_IsObject(reserved)
            || !qjs::JS_IsFunction(ctx, build)
        {
            return crate::ffi::throw_type(ctx, USAGE);
        }
        let (mut count, mut texts_len) = (0i64, 0i64);
        if qjs::JS_GetLength(ctx, entries, &mut count) < 0 || qjs::JS_GetLength(ctx, texts, &mut texts_len) < 0 {
            return qjs::JS_EXCEPTION;
        }
        let mut at = 0f64;
        for i in 0..count {
            let entry = qjs::JS_GetPropertyInt64(ctx, entries, i);
            if qjs::JS_IsException(entry) {
                return entry;
            }
            let len_value = member(ctx, entry, c"len");
            if qjs::JS_IsException(len_value) {
                qjs::JS_FreeValue(ctx, entry);
                return len_value;
            }
            // A bad length would misplace every later namespace: stop at it (as the prelude's loop).
            let mut len = 0f64;
            let is_number = qjs::JS_IsNumber(len_value) && qjs::JS_ToFloat64(ctx, &mut len, len_value) == 0;
            qjs::JS_FreeValue(ctx, len_value);
            #[allow(clippy::neg_cmp_op_on_partial_ord)] // NaN stops the loop, as `!(len >= 0)` does
            let bad = !is_number || !(len >= 0.0) || at + len > texts_len as f64;
            if bad {
                qjs::JS_FreeValue(ctx, entry);
                break;
            }
            let start = at;
            at += len;
            let name = member(ctx, entry, c"globalName");
            qjs::JS_FreeValue(ctx, entry);
            if qjs::JS_IsException(name) {
                return name;
            }
            if !qjs::JS_IsString(name) {
                qjs::JS_FreeValue(ctx, name);
                continue;
            }
            let atom = qjs::JS_ValueToAtom(ctx, name);
            qjs::JS_FreeValue(ctx, name);
            if atom == qjs::JS_ATOM_NULL {
                return qjs::JS_EXCEPTION;
            }
            let is_reserved = qjs::JS_GetProperty(ctx, reserved, atom);
            if qjs::JS_IsException(is_reserved) {
                qjs::JS_FreeAtom(ctx, atom);
                return is_reserved;
            }
            let skip = qjs::JS_IsBool(is_reserved) && qjs::JS_VALUE_GET_BOOL(is_reserved);
            qjs::JS_FreeValue(ctx, is_reserved);
            let present = if skip { 0 } else { qjs::JS_HasProperty(ctx, root, atom) };
            if present < 0 {
                qjs::JS_FreeAtom(ctx, atom);
                return qjs::JS_EXCEPTION;
            }
            if skip || present > 0 {
                qjs::JS_FreeAtom(ctx, atom);
                continue;
            }
            let mut data =
                [build, texts, qjs::JS_NewNumber(ctx, start), qjs::JS_NewNumber(ctx, len), qjs::JS_UNDEFINED];
            // The data record takes its own references of the five values (the two numbers are not
            // reference-counted).
            let get =
                qjs::JS_NewCFunctionData2(ctx, Some(namespace_get), c"get".as_ptr(), 0, 0, SLOTS, data.as_mut_ptr());
            if qjs::JS_IsException(get) {
                qjs::JS_FreeAtom(ctx, atom);
                return get;
            }
            let accessor =
                (qjs::JS_PROP_HAS_GET | qjs::JS_PROP_HAS_ENUMERABLE | qjs::JS_PROP_HAS_CONFIGURABLE) as c_int;
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
                // A global the VM does not let us define (the host refuses such names) stays
                // reachable as `namespaces.<name>` only, as in the prelude's loop, which catches the
                // error; an uncatchable one (an interrupt) goes on.
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
            qjs::JS_FreeAtom(ctx, atom);
            if defined < 0 {
                return qjs::JS_EXCEPTION;
            }
        }
        qjs::JS_UNDEFINED
    }
}
