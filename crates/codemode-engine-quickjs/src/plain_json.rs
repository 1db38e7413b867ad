//! `plainJson` for the native engine: the optional accelerator the prelude's `install(host,
//! plainJson?)` accepts (its contract is in the prelude's layer 0 and in `codemode_core::engine`),
//! written against QuickJS's C API and installed by [`crate::ffi::primitives`].
//!
//! It replaces the prelude's isPlain walk plus `JSON.stringify` (the largest guest-side cost of a
//! nested call) for the data cells send: ordinary objects and arrays of strings, finite numbers,
//! booleans and null, with own data properties only, no `toJSON` anywhere on their prototype
//! chains, nesting at most `maxDepth` levels below `depth`. For those it returns exactly the text
//! `JSON.stringify` would, byte for byte. For anything else (a getter, a Proxy anywhere on a
//! chain, an exotic object such as a Date or a String wrapper, an array hole, a `toJSON`, a
//! non-finite number) it answers `undefined`, and the prelude's own path (the reference behaviour,
//! getters and traps included) takes the value whole.
//!
//! It runs no guest code: it only reads own properties of objects that are not proxies, which in
//! QuickJS never calls back into JavaScript, and QuickJS checks for interrupts only while it
//! interprets bytecode, so none can fire here either.
//!
//! Limits, and the abuse each one stops:
//! - its text is built in host memory, at most the guest heap limit (`memoryLimitBytes`): the text
//!   has to fit in the guest heap as a string anyway, and a value whose text outgrows it (a small
//!   graph of shared objects can describe an exponentially long text) makes it give up, so the
//!   prelude's path fails as it did before, inside the guest heap, with `memory_limit_exceeded`;
//!   giving up at that size also bounds the time it spends;
//! - its recursion stops at [`MAX_NESTING`] levels whatever `maxDepth` says: deeper values take
//!   the prelude's path, where QuickJS's own stack limit applies, so a deep value cannot exhaust
//!   the worker thread's stack;
//! - a prototype chain longer than [`MAX_CHAIN`] links is not plain (the same path again);
//! - QuickJS cannot interrupt native code, so the serializer asks the engine's interrupt check
//!   itself every [`INTERRUPT_EVERY`] values and gives up when the run is past its deadline,
//!   cancelled or stopped: the prelude's path then takes over, where QuickJS's interrupt handler
//!   stops the cell. A cell that hands it a large or exponentially shared value cannot hold a
//!   worker thread past its `timeoutMs`.
//!
//! When QuickJS runs out of guest heap half way (a string copy, a key list, the final string), the
//! pending exception is cleared, the engine's "allocation refused" flag is put back as it was, and
//! the answer is `undefined`: the prelude's path then serializes with its own memory profile, so a
//! value that fit before this shortcut existed still does.
#![allow(unsafe_code)]

use crate::ffi::ContextState;
use rquickjs::qjs;
use std::ffi::c_int;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;

/// Deepest recursion of the serializer, whatever `maxDepth` the prelude passes (its default is 64).
pub(crate) const MAX_NESTING: i32 = 256;

/// Longest prototype chain (the value included) searched for `toJSON`.
pub(crate) const MAX_CHAIN: usize = 16;

/// How many values the serializer writes between two looks at the engine's interrupt check.
pub(crate) const INTERRUPT_EVERY: u32 = 1024;

/// `plainJson(value, depth, maxDepth)`: JSON text, or `undefined` (see the module docs).
///
/// # Safety
/// Called by QuickJS only: `ctx` is a live context whose opaque pointer is null or a live
/// [`ContextState`], and `argv` holds at least `argc` values (QuickJS pads it to the declared
/// length, 3, with `undefined`).
pub(crate) unsafe extern "C" fn plain_json(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    argc: c_int,
    argv: *mut qjs::JSValue,
) -> qjs::JSValue {
    // Nothing below panics by design; should it, the answer is "not plain" rather than an abort.
    // SAFETY: as this function's contract says.
    std::panic::catch_unwind(AssertUnwindSafe(|| unsafe { serialize(ctx, argc, argv) })).unwrap_or(qjs::JS_UNDEFINED)
}

/// # Safety
/// As [`plain_json`].
unsafe fn serialize(ctx: *mut qjs::JSContext, argc: c_int, argv: *mut qjs::JSValue) -> qjs::JSValue {
    // SAFETY: the opaque pointer is null or the VM's live state (see `ffi::primitives`).
    let state = unsafe { crate::ffi::state(ctx) };
    let Some(state) = state else { return qjs::JS_UNDEFINED };
    if argc < 3 || argv.is_null() {
        return qjs::JS_UNDEFINED;
    }
    // SAFETY: `argv` holds at least `argc` >= 3 values, borrowed for this call.
    let args = unsafe { std::slice::from_raw_parts(argv, 3) };
    let (Some(depth), Some(max_depth)) = (int_of(args[1]), int_of(args[2])) else { return qjs::JS_UNDEFINED };
    let refused_before = state.refused.load(Ordering::Relaxed);
    let mut out = Vec::new();
    // SAFETY: as this function's contract says; `args[0]` is a value of this call.
    if !unsafe { append_plain(ctx, state, args[0], depth, max_depth, &mut out) } {
        return qjs::JS_UNDEFINED;
    }
    // SAFETY: `out` is valid UTF-8 (see `Writer::quote`) of `out.len()` bytes.
    let text = unsafe { qjs::JS_NewStringLen(ctx, out.as_ptr().cast(), out.len() as qjs::size_t) };
    // SAFETY: a value just made in this context, or the exception marker.
    if unsafe { qjs::JS_IsException(text) } {
        // SAFETY: as in `append_plain`.
        unsafe { forget_failure(ctx, state, refused_before) };
        return qjs::JS_UNDEFINED;
    }
    text
}

/// Appends the JSON text of `v` (at nesting `depth` of at most `max_depth`) to `out`, as
/// `plainJson` writes it: true when written. False when the value is not plain data, its text
/// would pass the guest heap limit (counted from `out`'s length at the start) or QuickJS ran out of
/// guest heap (the exception is then cleared and the "allocation refused" flag put back, see the
/// module docs); `out` may then hold part of a text, which the caller drops.
///
/// # Safety
/// `ctx` is a live context under its runtime's lock whose opaque pointer is `state`, and `v` a
/// value it holds.
pub(crate) unsafe fn append_plain(
    ctx: *mut qjs::JSContext,
    state: &ContextState,
    v: qjs::JSValue,
    depth: i32,
    max_depth: i32,
    out: &mut Vec<u8>,
) -> bool {
    let refused_before = state.refused.load(Ordering::Relaxed);
    let start = out.len();
    let mut w = Writer { ctx, state, out: std::mem::take(out), start, visits: 0 };
    let step = w.value(v, depth, max_depth.min(MAX_NESTING));
    *out = w.out;
    match step {
        Ok(()) => true,
        Err(Step::NotPlain) => false,
        Err(Step::Failed) => {
            // SAFETY: as this function's contract says; QuickJS left an exception pending.
            unsafe { forget_failure(ctx, state, refused_before) };
            false
        }
    }
}

/// Out of guest heap half way: clears the pending exception and puts the engine's "allocation
/// refused" flag back as it was, so the prelude's own path can try with its own memory profile.
///
/// # Safety
/// `ctx` is a live context under its runtime's lock with an exception pending.
unsafe fn forget_failure(ctx: *mut qjs::JSContext, state: &ContextState, refused_before: bool) {
    // SAFETY: this context has a pending exception, which JS_GetException hands over.
    unsafe { qjs::JS_FreeValue(ctx, qjs::JS_GetException(ctx)) };
    state.refused.store(refused_before, Ordering::Relaxed);
}

/// A depth argument: an int, or a float64 holding one (the prelude's numbers may be either).
pub(crate) fn int_of(v: qjs::JSValue) -> Option<i32> {
    // SAFETY: reading a value's tag, and its payload as the tag says it is.
    unsafe {
        match qjs::JS_VALUE_GET_NORM_TAG(v) {
            qjs::JS_TAG_INT => Some(qjs::JS_VALUE_GET_INT(v)),
            qjs::JS_TAG_FLOAT64 => {
                let d = qjs::JS_VALUE_GET_FLOAT64(v);
                (d.trunc() == d && d >= f64::from(i32::MIN) && d <= f64::from(i32::MAX)).then_some(d as i32)
            }
            _ => None,
        }
    }
}

/// Why a value is not written.
enum Step {
    /// Not plain data (or too large): the prelude's path takes it.
    NotPlain,
    /// QuickJS failed (out of guest heap) with an exception pending.
    Failed,
}

/// A value reference this serializer owns, freed when dropped.
struct Held {
    ctx: *mut qjs::JSContext,
    v: qjs::JSValue,
}

impl Drop for Held {
    fn drop(&mut self) {
        // SAFETY: `v` is a reference this serializer owns, in `ctx`.
        unsafe { qjs::JS_FreeValue(self.ctx, self.v) };
    }
}

/// Property names from JS_GetOwnPropertyNames, freed when dropped.
struct Names {
    ctx: *mut qjs::JSContext,
    tab: *mut qjs::JSPropertyEnum,
    len: u32,
}

impl Drop for Names {
    fn drop(&mut self) {
        if !self.tab.is_null() {
            // SAFETY: the table and length JS_GetOwnPropertyNames returned, freed once.
            unsafe { qjs::JS_FreePropertyEnum(self.ctx, self.tab, self.len) };
        }
    }
}

struct Writer<'s> {
    ctx: *mut qjs::JSContext,
    state: &'s ContextState,
    out: Vec<u8>,
    /// Where this value's text starts in `out` (what came before is not counted against the limit).
    start: usize,
    /// Values met so far (see [`INTERRUPT_EVERY`]).
    visits: u32,
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), Step> {
        if bytes.len() > self.state.max_bytes.saturating_sub(self.out.len() - self.start) {
            return Err(Step::NotPlain);
        }
        self.out.extend_from_slice(bytes);
        Ok(())
    }

    fn value(&mut self, v: qjs::JSValue, depth: i32, max_depth: i32) -> Result<(), Step> {
        self.visits = self.visits.wrapping_add(1);
        if self.visits.is_multiple_of(INTERRUPT_EVERY) && self.state.interrupt.should_stop() {
            return Err(Step::NotPlain);
        }
        // SAFETY: reading the tag of a value this call holds a reference to (directly or through
        // its holder).
        let tag = unsafe { qjs::JS_VALUE_GET_NORM_TAG(v) };
        match tag {
            qjs::JS_TAG_STRING | qjs::JS_TAG_STRING_ROPE => self.c_string(v, true),
            // SAFETY: tag-checked payload reads.
            qjs::JS_TAG_BOOL => self.put(if unsafe { qjs::JS_VALUE_GET_BOOL(v) } { b"true" } else { b"false" }),
            qjs::JS_TAG_NULL => self.put(b"null"),
            qjs::JS_TAG_INT => {
                // SAFETY: as above.
                let n = unsafe { qjs::JS_VALUE_GET_INT(v) };
                self.put(itoa::Buffer::new().format(n).as_bytes())
            }
            qjs::JS_TAG_FLOAT64 => self.number(v),
            qjs::JS_TAG_OBJECT => self.object(v, depth, max_depth),
            _ => Err(Step::NotPlain),
        }
    }

    /// A finite number as ToString(number) writes it (JSON.stringify's rule).
    fn number(&mut self, v: qjs::JSValue) -> Result<(), Step> {
        // SAFETY: `v` has the float64 tag.
        let d = unsafe { qjs::JS_VALUE_GET_FLOAT64(v) };
        if !d.is_finite() {
            return Err(Step::NotPlain);
        }
        // Integral values below 2^53 print as their digits (-0 as "0"), as ToString prints them.
        if d.trunc() == d && d.abs() < 9_007_199_254_740_992.0 {
            return self.put(itoa::Buffer::new().format(d as i64).as_bytes());
        }
        // SAFETY: JS_ToString of a number runs no guest code; its result is owned (`Held`).
        let s = Held { ctx: self.ctx, v: unsafe { qjs::JS_ToString(self.ctx, v) } };
        // SAFETY: checking the value just made.
        if unsafe { qjs::JS_IsException(s.v) } {
            return Err(Step::Failed);
        }
        self.c_string(s.v, false)
    }

    /// The text of string `v`, quoted or as it is.
    fn c_string(&mut self, v: qjs::JSValue, quoted: bool) -> Result<(), Step> {
        // SAFETY: `v` is a string value held by the caller, in this writer's context.
        let written = unsafe {
            crate::ffi::with_bytes(self.ctx, v, |bytes| if quoted { self.quote(bytes) } else { self.put(bytes) })
        };
        written.unwrap_or(Err(Step::Failed))
    }

    /// `s` (QuickJS's UTF-8, which keeps an unpaired surrogate as its 3-byte sequence) quoted as
    /// JSON.stringify quotes it: `\" \\ \b \f \n \r \t`, other controls and unpaired surrogates as
    /// lowercase `\u` escapes, everything else as it is. The result is valid UTF-8.
    fn quote(&mut self, s: &[u8]) -> Result<(), Step> {
        self.put(b"\"")?;
        let mut run = 0; // start of the bytes not written yet
        let mut i = 0;
        while i < s.len() {
            let ch = s[i];
            let mut esc = [b'\\', 0, 0, 0, 0, 0];
            let (elen, width) = match ch {
                b'"' | b'\\' => {
                    esc[1] = ch;
                    (2, 1)
                }
                0x08 | 0x0c | b'\n' | b'\r' | b'\t' => {
                    esc[1] = match ch {
                        0x08 => b'b',
                        0x0c => b'f',
                        b'\n' => b'n',
                        b'\r' => b'r',
                        _ => b't',
                    };
                    (2, 1)
                }
                0..0x20 => {
                    esc[1..6].copy_from_slice(&[
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(ch >> 4)],
                        HEX[usize::from(ch & 15)],
                    ]);
                    (6, 1)
                }
                // U+D800..U+DFFF: an unpaired surrogate (a pair arrives as one 4-byte sequence).
                0xED if s.get(i + 1).is_some_and(|b| b & 0xE0 == 0xA0) && i + 2 < s.len() => {
                    let cp = 0xD000u32 | (u32::from(s[i + 1] & 0x3F) << 6) | u32::from(s[i + 2] & 0x3F);
                    esc[1] = b'u';
                    for (k, shift) in [12u32, 8, 4, 0].into_iter().enumerate() {
                        esc[2 + k] = HEX[((cp >> shift) & 15) as usize];
                    }
                    (6, 3)
                }
                _ => {
                    i += 1;
                    continue;
                }
            };
            self.put(&s[run..i])?;
            self.put(&esc[..elen])?;
            i += width;
            run = i;
        }
        self.put(&s[run..])?;
        self.put(b"\"")
    }

    fn object(&mut self, v: qjs::JSValue, depth: i32, max_depth: i32) -> Result<(), Step> {
        // SAFETY: `v` is an object value held by the caller; these only read its header.
        let (proxy, class) = unsafe { (qjs::JS_IsProxy(v), qjs::JS_GetClassID(v)) };
        if depth >= max_depth || proxy {
            return Err(Step::NotPlain);
        }
        let is_array = class == self.state.class_array;
        if !is_array && class != self.state.class_object {
            return Err(Step::NotPlain);
        }
        self.check_chain(v)?;
        if is_array { self.array(v, depth, max_depth) } else { self.fields(v, depth, max_depth) }
    }

    /// JSON.stringify reads `toJSON` through the whole prototype chain (getters included): the
    /// value is plain only if no link is a Proxy and none has an own `toJSON`, data or accessor.
    fn check_chain(&mut self, v: qjs::JSValue) -> Result<(), Step> {
        // SAFETY: `v` is a non-proxy object: looking up an own property runs no guest code.
        match unsafe { qjs::JS_GetOwnProperty(self.ctx, std::ptr::null_mut(), v, self.state.to_json.get()) } {
            0 => {}
            found if found > 0 => return Err(Step::NotPlain),
            _ => return Err(Step::Failed),
        }
        // SAFETY: the prototype of a non-proxy object, read without running code; owned by `Held`.
        let mut link = Held { ctx: self.ctx, v: unsafe { qjs::JS_GetPrototype(self.ctx, v) } };
        for _ in 1..MAX_CHAIN {
            // SAFETY: tag checks of a held value.
            let (null, exception, object) =
                unsafe { (qjs::JS_IsNull(link.v), qjs::JS_IsException(link.v), qjs::JS_IsObject(link.v)) };
            if null {
                return Ok(());
            }
            if exception {
                return Err(Step::Failed);
            }
            // SAFETY: `link.v` is an object we hold.
            if !object || unsafe { qjs::JS_IsProxy(link.v) } {
                return Err(Step::NotPlain);
            }
            // SAFETY: a non-proxy object we hold: no guest code runs for either call.
            match unsafe { qjs::JS_GetOwnProperty(self.ctx, std::ptr::null_mut(), link.v, self.state.to_json.get()) } {
                0 => {}
                found if found > 0 => return Err(Step::NotPlain),
                _ => return Err(Step::Failed),
            }
            // SAFETY: as above; the old link is freed when replaced.
            link = Held { ctx: self.ctx, v: unsafe { qjs::JS_GetPrototype(self.ctx, link.v) } };
        }
        Err(Step::NotPlain)
    }

    /// The value of `v`'s own data property `atom`: not plain for an accessor or a hole.
    fn own_data(&mut self, v: qjs::JSValue, atom: qjs::JSAtom) -> Result<Held, Step> {
        // SAFETY: `v` is a non-proxy object held by the caller (no guest code runs).
        match unsafe { crate::ffi::own_data_property(self.ctx, v, atom) } {
            Ok(Some(value)) => Ok(Held { ctx: self.ctx, v: value }),
            Ok(None) => Err(Step::NotPlain),
            Err(()) => Err(Step::Failed),
        }
    }

    fn fields(&mut self, v: qjs::JSValue, depth: i32, max_depth: i32) -> Result<(), Step> {
        let mut names = Names { ctx: self.ctx, tab: std::ptr::null_mut(), len: 0 };
        let flags = (qjs::JS_GPN_STRING_MASK | qjs::JS_GPN_ENUM_ONLY) as c_int;
        // SAFETY: `v` is a non-proxy ordinary object (no guest code runs); the table is freed by
        // `names`. Its order is [[OwnPropertyKeys]]'s, the order JSON.stringify writes.
        if unsafe { qjs::JS_GetOwnPropertyNames(self.ctx, &mut names.tab, &mut names.len, v, flags) } < 0 {
            return Err(Step::Failed);
        }
        self.put(b"{")?;
        for i in 0..names.len as usize {
            // SAFETY: `i` < the table's length.
            let atom = unsafe { (*names.tab.add(i)).atom };
            let x = self.own_data(v, atom)?;
            if i > 0 {
                self.put(b",")?;
            }
            let mut len: qjs::size_t = 0;
            // SAFETY: an atom of the table we hold; the buffer is freed below.
            let k = unsafe { qjs::JS_AtomToCStringLen(self.ctx, &mut len, atom) };
            if k.is_null() {
                return Err(Step::Failed);
            }
            // SAFETY: `len` readable bytes at `k` until freed.
            let key = unsafe { std::slice::from_raw_parts(k.cast::<u8>(), len as usize) };
            let r = self.quote(key);
            // SAFETY: freed once.
            unsafe { qjs::JS_FreeCString(self.ctx, k) };
            r?;
            self.put(b":")?;
            self.value(x.v, depth + 1, max_depth)?;
        }
        self.put(b"}")
    }

    fn array(&mut self, v: qjs::JSValue, depth: i32, max_depth: i32) -> Result<(), Step> {
        let mut len: i64 = 0;
        // SAFETY: an array's `length` is its own data property: reading it runs no guest code.
        if unsafe { qjs::JS_GetLength(self.ctx, v, &mut len) } < 0 {
            return Err(Step::Failed);
        }
        self.put(b"[")?;
        for i in 0..len {
            let Ok(index) = u32::try_from(i) else { return Err(Step::NotPlain) };
            if i > 0 {
                self.put(b",")?;
            }
            // SAFETY: an index atom (not allocated for indices below 2^31), freed right after use.
            let atom = unsafe { qjs::JS_NewAtomUInt32(self.ctx, index) };
            if atom == 0 {
                return Err(Step::Failed);
            }
            let x = self.own_data(v, atom);
            // SAFETY: freed once.
            unsafe { qjs::JS_FreeAtom(self.ctx, atom) };
            self.value(x?.v, depth + 1, max_depth)?;
        }
        self.put(b"]")
    }
}
