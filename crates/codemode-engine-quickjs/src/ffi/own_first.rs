//! `ownFirst`, the native `get` trap of the `tools` proxy: a property the target holds itself is
//! answered from its own data, without running guest code or walking the prototype chain.
#![allow(unsafe_code)]

use super::*;

/// `ownFirst(fallback)`: a proxy `get` trap that answers the target's own data property `key` when
/// its value is not `undefined` — reading no accessor, running no guest code — and calls
/// `fallback(target, key)` for everything else (its contract is in the prelude's layer 0). The
/// traps of `tools` and `MCP` run on every call made through them; this one spares each a
/// JavaScript frame.
///
/// # Safety
/// Called by QuickJS only: `ctx` is a live context and `argv` holds at least `argc` values.
pub(super) unsafe extern "C" fn own_first(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    argc: c_int,
    argv: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: as this function's contract says; `argv[0]` exists when `argc` >= 1.
    unsafe {
        if argc < 1 || argv.is_null() || !qjs::JS_IsFunction(ctx, *argv) {
            return throw_type(ctx, "ownFirst(fallback)");
        }
        // The trap keeps its own reference of `fallback` (QuickJS duplicates the data values).
        qjs::JS_NewCFunctionData(ctx, Some(own_first_trap), 2, 0, 1, argv)
    }
}

/// The value of `object`'s own property `atom` if it is a data property: `Ok(Some(value))`, an
/// owned reference; `Ok(None)` when it has no such property or it is an accessor (its getter is
/// not called); `Err(())` when QuickJS failed, its exception pending.
///
/// # Safety
/// `ctx` is a live context under its runtime's lock, `object` an object value it holds and `atom`
/// a live atom. No guest code runs unless `object` is a proxy (its `getOwnPropertyDescriptor`
/// trap would).
pub(crate) unsafe fn own_data_property(
    ctx: *mut qjs::JSContext,
    object: qjs::JSValue,
    atom: qjs::JSAtom,
) -> Result<Option<qjs::JSValue>, ()> {
    let mut desc = std::mem::MaybeUninit::<qjs::JSPropertyDescriptor>::uninit();
    // SAFETY: as the contract says; on success QuickJS fills every field of `desc` with owned
    // references.
    let found = unsafe { qjs::JS_GetOwnProperty(ctx, desc.as_mut_ptr(), object, atom) };
    if found <= 0 {
        return if found < 0 { Err(()) } else { Ok(None) };
    }
    // SAFETY: filled by the successful call above; the getter and setter references it handed
    // over are freed once, and the value's too when it is not returned.
    unsafe {
        let desc = desc.assume_init();
        qjs::JS_FreeValue(ctx, desc.getter);
        qjs::JS_FreeValue(ctx, desc.setter);
        if desc.flags & qjs::JS_PROP_GETSET as c_int != 0 {
            qjs::JS_FreeValue(ctx, desc.value);
            return Ok(None);
        }
        Ok(Some(desc.value))
    }
}

/// The trap [`own_first`] makes: `data[0]` is the fallback.
///
/// # Safety
/// Called by QuickJS only: `ctx` is a live context, `argv` holds at least `argc` values and
/// `data` the one value the trap was made with.
pub(super) unsafe extern "C" fn own_first_trap(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    argc: c_int,
    argv: *mut qjs::JSValue,
    _magic: c_int,
    data: *mut qjs::JSValue,
) -> qjs::JSValue {
    let arg = |i: usize| {
        if argv.is_null() || usize::try_from(argc).is_ok_and(|n| n <= i) {
            qjs::JS_UNDEFINED
        } else {
            // SAFETY: `i` < `argc` values at `argv`, borrowed for this call.
            unsafe { *argv.add(i) }
        }
    };
    let mut args = [arg(0), arg(1)];
    // SAFETY: values of this call, under the runtime's lock; `data` holds the fallback. The
    // prelude's targets are plain frozen objects (were one a proxy, JS_GetOwnProperty would run its
    // `getOwnPropertyDescriptor` trap, as the fallback's `key in t` would run its `has`), and the
    // handler holding this trap is out of guest code's reach.
    unsafe {
        let (target, key) = (args[0], args[1]);
        if qjs::JS_IsObject(target) && (qjs::JS_IsString(key) || qjs::JS_IsSymbol(key)) {
            let atom = qjs::JS_ValueToAtom(ctx, key);
            if atom == qjs::JS_ATOM_NULL {
                return qjs::JS_EXCEPTION;
            }
            let found = own_data_property(ctx, target, atom);
            qjs::JS_FreeAtom(ctx, atom);
            match found {
                Err(()) => return qjs::JS_EXCEPTION,
                Ok(Some(value)) if !qjs::JS_IsUndefined(value) => return value,
                Ok(_) => {}
            }
        }
        qjs::JS_Call(ctx, *data, qjs::JS_UNDEFINED, 2, args.as_mut_ptr())
    }
}
