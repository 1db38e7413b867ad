//! Reading the text of QuickJS strings the primitives are passed: copied out of the heap, or, for
//! the message parts a tool function passes on every call, kept by address between calls.
#![allow(unsafe_code)]

use super::*;

/// A string argument's text (QuickJS's UTF-8, lone surrogates as U+FFFD), passed to `f`; `None`
/// for a value that is not a string or when QuickJS runs out of memory copying it.
///
/// # Safety
/// `ctx` is a live context under its runtime's lock and `v` a value it holds.
pub(super) unsafe fn with_text<R>(ctx: *mut qjs::JSContext, v: qjs::JSValue, f: impl FnOnce(&str) -> R) -> Option<R> {
    // SAFETY: as the contract says; a string value only (no conversion that could run code).
    if !unsafe { qjs::JS_IsString(v) } {
        return None;
    }
    // SAFETY: as the contract says, and `v` is a string.
    unsafe { with_bytes(ctx, v, |bytes| f(&codemode_bridge::adapter::guest_text(bytes))) }
}

/// How many strings' texts [`kept_text`] keeps: a tool's kind, head and tail, for a few tools.
pub(super) const TEXTS_KEPT: usize = 8;

/// Longest text [`kept_text`] keeps (a head holds the tool's id; longer ones are read each time).
pub(super) const TEXT_KEPT_MAX: usize = 512;

/// [`with_text`] for the prelude's message parts, which are the same strings call after call (a
/// tool function keeps its head and tail; the kind is a literal): the text of a string read
/// before is taken from [`ContextState::texts`] instead of being copied out of the heap, checked
/// and freed again (~0.65k instructions a call for the three parts).
///
/// A string is recognized by its address, and the entry holds a reference to it, so the address
/// cannot be reused by another string while the entry lives; QuickJS strings never change. The
/// entries go with the heap: released before the runtime is freed, forgotten (never freed into
/// the restored heap) when a reused VM's region is reset.
///
/// # Safety
/// As [`with_text`]; `state` is `ctx`'s state.
pub(super) unsafe fn kept_text<R>(
    ctx: *mut qjs::JSContext,
    state: &ContextState,
    v: qjs::JSValue,
    f: impl FnOnce(&str) -> R,
) -> Option<R> {
    // SAFETY: as the contract says; a string value only.
    if !unsafe { qjs::JS_IsString(v) } {
        return None;
    }
    // SAFETY: `v` is a string, so a pointer value.
    let at = unsafe { qjs::JS_VALUE_GET_PTR(v) };
    let kept = state
        .texts
        .borrow()
        .iter()
        // SAFETY: every kept value is a string (a pointer value).
        .find(|(s, _)| unsafe { qjs::JS_VALUE_GET_PTR(*s) } == at)
        .map(|(_, text)| text.clone());
    if let Some(text) = kept {
        return Some(f(&text));
    }
    // SAFETY: as the contract says, and `v` is a string.
    unsafe {
        with_bytes(ctx, v, |bytes| {
            let text = codemode_bridge::adapter::guest_text(bytes);
            if text.len() <= TEXT_KEPT_MAX {
                let mut texts = state.texts.borrow_mut();
                if texts.len() == TEXTS_KEPT {
                    let (oldest, _) = texts.remove(0);
                    // SAFETY: the entry's own reference, freed once (the entry is gone).
                    qjs::JS_FreeValue(ctx, oldest);
                }
                // SAFETY: a new reference to `v`, owned by the entry.
                texts.push((qjs::JS_DupValue(ctx, v), Rc::from(&*text)));
            }
            f(&text)
        })
    }
}

/// The bytes of string `v` as QuickJS encodes it (UTF-8, an unpaired surrogate kept as its own
/// 3-byte sequence), passed to `f`; `None` when QuickJS runs out of memory copying them.
///
/// # Safety
/// `ctx` is a live context under its runtime's lock and `v` a string value it holds.
pub(crate) unsafe fn with_bytes<R>(ctx: *mut qjs::JSContext, v: qjs::JSValue, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let mut len: qjs::size_t = 0;
    // SAFETY: `v` is a string; the buffer (null when out of memory) is freed below.
    let p = unsafe { qjs::JS_ToCStringLen2(ctx, &mut len, v, false) };
    if p.is_null() {
        return None;
    }
    // SAFETY: QuickJS returned `len` readable bytes at `p` (a length that fits in memory, so in
    // usize), valid until freed.
    let r = f(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len as usize) });
    // SAFETY: the buffer JS_ToCStringLen2 returned, freed once.
    unsafe { qjs::JS_FreeCString(ctx, p) };
    Some(r)
}

/// The texts of the string values `parts`, joined, passed to `f`; `None` when one is not a string
/// or QuickJS runs out of memory.
///
/// # Safety
/// `ctx` is a live context under its runtime's lock and `parts` values it holds.
pub(super) unsafe fn with_joined<R>(
    ctx: *mut qjs::JSContext,
    parts: &[qjs::JSValue],
    f: impl FnOnce(&str) -> R,
) -> Option<R> {
    let mut joined = String::new();
    for &v in parts {
        // SAFETY: as the contract says.
        unsafe { with_text(ctx, v, |t| joined.push_str(t)) }?;
    }
    Some(f(&joined))
}
