//! The prelude's primitives as plain QuickJS C functions: `host(kind, payload, more?, last?)`,
//! `plainJson` (module [`crate::plain_json`]), `defineNamespaces` (module
//! [`crate::define_namespaces`]), `ownFirst` (a native proxy `get` trap) and `callPlain` (`plainJson`
//! and `host` in one call).
//! `host` answers a request with its promise (made here, settled by `Vm::settle` through the kept
//! resolving functions) rather than with an id the prelude would turn into a promise and file.
//!
//! They are C functions rather than rquickjs closures because they run on every nested call:
//! rquickjs's closure path (a class call, a panic guard, argument conversion into owned Rust
//! strings) cost about 1,800 instructions per call around the host's own request handling; this
//! one about 700 (the arguments are read in place and the answer is built directly).
//!
//! Both reach their VM's state through the context's opaque pointer, which points at a boxed
//! [`ContextState`] the VM owns and drops after its runtime (nothing else in this process sets a
//! context's opaque pointer: rquickjs keeps its own state on the runtime).
#![allow(unsafe_code)]

mod own_first;
mod pages;
mod texts;

use crate::Interrupt;
use codemode_bridge::{BridgeHost, HostCallResult};
use codemode_core::engine::{GuestFailure, RequestId};
use codemode_core::error::CodeModeErrorCode;
pub(crate) use own_first::*;
pub(crate) use pages::*;
use rquickjs::{Array, Ctx, Exception, Object, Value, qjs};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
pub(crate) use texts::with_bytes;
use texts::*;

/// A request's outcome waiting to be settled in the guest.
pub(crate) enum Outcome {
    /// As the bridge encoded it: resolve with what `JSON.parse` makes of `json` when `ok`, else
    /// reject with the prelude's host error made of it.
    Json {
        /// Resolve (`true`) or reject.
        ok: bool,
        /// The encoded outcome.
        json: String,
    },
    /// Resolve with this value, made in the guest as `JSON.parse` would make it of its encoding
    /// (`HostCallResult::SettledValue`: within the bridge's limits).
    Value(serde_json::Value),
}

/// What a VM's primitives need, reached through its context's opaque pointer.
pub(crate) struct ContextState {
    pub(crate) bridge: Arc<Mutex<BridgeHost>>,
    pub(crate) interrupt: Arc<Interrupt>,
    /// The engine allocator's "refused" flag (see `alloc`), restored after a serializer fallback.
    pub(crate) refused: Arc<AtomicBool>,
    /// Most bytes of text the serializer builds before giving up (the guest heap limit).
    pub(crate) max_bytes: usize,
    /// Class id of an ordinary object, read off a fresh one.
    pub(crate) class_object: qjs::JSClassID,
    /// Class id of an array, read off a fresh one.
    pub(crate) class_array: qjs::JSClassID,
    /// The `toJSON` atom the serializer looks up on every object it writes, made once by
    /// [`primitives`] (0 before). Released with the pending references.
    pub(crate) to_json: Cell<qjs::JSAtom>,
    /// The resolving functions `[resolve, reject]` of every request `host` answered with a promise,
    /// by request id: owned references, released when the request is settled or by
    /// [`ContextState::release_pending`] before the runtime goes.
    pub(crate) pending: RefCell<HashMap<RequestId, [qjs::JSValue; 2]>>,
    /// Requests the step's answerer settled at once (`HostCallResult::Settled`), in the order they
    /// were made: their promises wait in `pending` like any other, and `Vm::run_jobs` settles them
    /// when the job queue next runs dry — where the step would have ended and the next begun with
    /// their delivery — so the cell sees what a later step's delivery gives it.
    pub(crate) answered: RefCell<Vec<(RequestId, Outcome)>>,
    /// While `Vm::settle_all` settles a batch taken from `answered`: how many of its outcomes come
    /// after the one being settled. They still wait and count as outstanding (as a step's later
    /// deliveries do until each is delivered); 0 otherwise.
    pub(crate) settling_left: Cell<usize>,
    /// The texts of the last few strings `callPlain` read as kind, head or tail, each with an owned
    /// reference to its string (see [`kept_text`]): forgotten with the heap at a reset, released
    /// by [`ContextState::release_pending`] before the runtime goes.
    pub(crate) texts: RefCell<Vec<(qjs::JSValue, Rc<str>)>>,
    /// `Math.random`'s state (xorshift64*), seeded for every run: a VM reused from its booted image
    /// would otherwise repeat one sequence, and QuickJS seeds its own only once, from the clock.
    pub(crate) rng: Cell<u64>,
    /// The buffer `callPlain` writes a request's text into, kept between calls (one allocation
    /// less a nested call). Host memory the guest never reads; emptied before each use, and not
    /// kept once a request made it larger than [`MESSAGE_KEPT_BYTES`].
    pub(crate) message: Cell<Vec<u8>>,
}

/// The largest request buffer [`ContextState::message`] keeps for the next call: a cell that once
/// sent a large input does not hold that much host memory for the rest of the VM's life.
pub(crate) const MESSAGE_KEPT_BYTES: usize = 4096;

impl ContextState {
    /// State for a VM; the class ids are filled in by [`primitives`].
    pub(crate) fn new(
        bridge: Arc<Mutex<BridgeHost>>,
        interrupt: Arc<Interrupt>,
        refused: Arc<AtomicBool>,
        max_bytes: usize,
    ) -> Box<Self> {
        Box::new(ContextState {
            bridge,
            interrupt,
            refused,
            max_bytes,
            class_object: 0,
            class_array: 0,
            to_json: Cell::new(0),
            pending: RefCell::new(HashMap::new()),
            answered: RefCell::new(Vec::new()),
            settling_left: Cell::new(0),
            texts: RefCell::new(Vec::with_capacity(TEXTS_KEPT)),
            rng: Cell::new(codemode_bridge::random_seed()),
            message: Cell::new(Vec::new()),
        })
    }

    /// Gives `Math.random` a fresh seed (a new run).
    pub(crate) fn reseed(&self) {
        self.rng.set(codemode_bridge::random_seed());
    }

    /// The resolving functions of request `id`, handed over (wrapped so that they are released when
    /// dropped), if `host` answered it with a promise that is not settled yet.
    pub(crate) fn take_pending<'js>(&self, ctx: &Ctx<'js>, id: RequestId) -> Option<[Value<'js>; 2]> {
        let funcs = self.pending.borrow_mut().remove(&id)?;
        // SAFETY: owned references of this context (made by JS_NewPromiseCapability in `host`), now
        // handed to rquickjs's `Value`, which frees each once.
        Some(funcs.map(|f| unsafe { Value::from_raw(ctx.clone(), f) }))
    }

    /// Releases the resolving functions of requests never settled (the run ended, or was dropped,
    /// with calls in flight), the kept texts' strings and the `toJSON` atom. Must run while the
    /// context is alive; the VM calls it when dropped.
    pub(crate) fn release_pending(&self, ctx: &Ctx<'_>) {
        let pending = std::mem::take(&mut *self.pending.borrow_mut());
        let texts = std::mem::take(&mut *self.texts.borrow_mut());
        for f in pending.into_values().flatten().chain(texts.into_iter().map(|(s, _)| s)) {
            // SAFETY: owned references of this live context, each freed once.
            unsafe { qjs::JS_FreeValue(ctx.as_raw().as_ptr(), f) };
        }
        let to_json = self.to_json.replace(0);
        if to_json != 0 {
            // SAFETY: the atom `primitives` made, freed once (taken out above).
            unsafe { qjs::JS_FreeAtom(ctx.as_raw().as_ptr(), to_json) };
        }
    }
}

/// Points the context at `state`, where its C functions (`Math.random`, `host`, `plainJson`) find
/// their VM's state.
///
/// `state` must stay where it is, alive, for as long as the context can run JavaScript: the VM
/// owns both and drops the state after the runtime.
pub(crate) fn attach(ctx: &Ctx<'_>, state: &mut ContextState) {
    // SAFETY: this context, used under its runtime's lock (we are inside `ctx.with`). The opaque
    // pointer is only read back by this module's C functions, which run inside this context while
    // the VM (and so `state`, boxed at a stable address) is alive.
    unsafe { qjs::JS_SetContextOpaque(ctx.as_raw().as_ptr(), (state as *mut ContextState).cast::<c_void>()) };
}

/// Replaces `Math.random` by [`random`], whose state is in the context's [`ContextState`]
/// (reseeded per run). Called before the prelude loads, so the prelude and every cell see this one.
pub(crate) fn install_random(ctx: &Ctx<'_>) -> rquickjs::Result<()> {
    let math: Object<'_> = ctx.globals().get("Math")?;
    // `set` keeps the property's attributes: writable, configurable, not enumerable.
    math.set("random", c_function(ctx, random, c"random", 0)?)
}

/// `Math.random`: xorshift64* over the VM's [`ContextState::rng`], as the WebAssembly engine's.
///
/// # Safety
/// Called by QuickJS only: `ctx` is a live context whose opaque pointer is null or a live
/// [`ContextState`].
unsafe extern "C" fn random(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    _argc: c_int,
    _argv: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: as this function's contract says.
    let x = match unsafe { state(ctx) } {
        Some(s) => {
            let mut r = s.rng.get();
            r ^= r >> 12;
            r ^= r << 25;
            r ^= r >> 27;
            s.rng.set(r);
            r.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        None => 0,
    };
    qjs::JS_NewFloat64((x >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0))
}

/// Makes `host`, `plainJson`, `defineNamespaces` (module [`crate::define_namespaces`]), `ownFirst`
/// and `callPlain` for `ctx`, whose opaque pointer is `state` ([`attach`]).
pub(crate) fn primitives<'js>(ctx: &Ctx<'js>, state: &mut ContextState) -> rquickjs::Result<Primitives<'js>> {
    // The class ids of an ordinary object and of an array, read before any guest code runs.
    let object = Object::new(ctx.clone())?;
    let array = Array::new(ctx.clone())?;
    // SAFETY: both values are live objects of this context (held above); JS_GetClassID only reads
    // the class id of the object a value points to.
    unsafe {
        state.class_object = qjs::JS_GetClassID(object.as_raw());
        state.class_array = qjs::JS_GetClassID(array.as_raw());
        // A NUL-free 6-byte name.
        state.to_json.set(qjs::JS_NewAtomLen(ctx.as_raw().as_ptr(), c"toJSON".as_ptr(), 6));
    }
    if state.to_json.get() == qjs::JS_ATOM_NULL {
        return Err(rquickjs::Error::Allocation);
    }
    if state.class_object == state.class_array {
        return Err(rquickjs::Error::new_from_js_message("object", "array", "QuickJS gave both the same class id"));
    }
    Ok(Primitives {
        host: c_function(ctx, host, c"host", 2)?,
        plain_json: c_function(ctx, crate::plain_json::plain_json, c"plainJson", 3)?,
        define_namespaces: c_function(ctx, crate::define_namespaces::define_namespaces, c"defineNamespaces", 5)?,
        own_first: c_function(ctx, own_first, c"ownFirst", 1)?,
        call_plain: c_function(ctx, call_plain, c"callPlain", 5)?,
    })
}

/// The primitives the prelude's `install` takes from this engine (its layer 0 says what each does).
pub(crate) struct Primitives<'js> {
    /// `host(kind, payload, more?, last?)`.
    pub(crate) host: Value<'js>,
    /// `plainJson(value, depth, maxDepth)`.
    pub(crate) plain_json: Value<'js>,
    /// `defineNamespaces(...)`.
    pub(crate) define_namespaces: Value<'js>,
    /// `ownFirst(fallback)`.
    pub(crate) own_first: Value<'js>,
    /// `callPlain(kind, head, value, tail, maxDepth)`.
    pub(crate) call_plain: Value<'js>,
}

type CFunction = unsafe extern "C" fn(*mut qjs::JSContext, qjs::JSValue, c_int, *mut qjs::JSValue) -> qjs::JSValue;

fn c_function<'js>(ctx: &Ctx<'js>, f: CFunction, name: &std::ffi::CStr, length: c_int) -> rquickjs::Result<Value<'js>> {
    // SAFETY: a generic C function of this context with a static NUL-terminated name; the
    // returned value is a new reference, handed to rquickjs's `Value`, which frees it.
    unsafe {
        let v = qjs::JS_NewCFunction2(
            ctx.as_raw().as_ptr(),
            Some(f),
            name.as_ptr(),
            length,
            qjs::JSCFunctionEnum_JS_CFUNC_generic,
            0,
        );
        if qjs::JS_IsException(v) {
            return Err(rquickjs::Error::Exception);
        }
        Ok(Value::from_raw(ctx.clone(), v))
    }
}

/// The context state behind `ctx`, if any.
///
/// # Safety
/// `ctx` is a live context whose opaque pointer is null or a live [`ContextState`].
pub(crate) unsafe fn state<'a>(ctx: *mut qjs::JSContext) -> Option<&'a ContextState> {
    // SAFETY: as this function's contract says.
    unsafe { qjs::JS_GetContextOpaque(ctx).cast::<ContextState>().as_ref() }
}

/// The runtime's GC threshold (a test's check that no collection ran: one sets a new threshold).
#[cfg(test)]
pub(crate) fn gc_threshold(ctx: &Ctx<'_>) -> usize {
    // SAFETY: a live context under its lock; reading a runtime field.
    unsafe { qjs::JS_GetGCThreshold(qjs::JS_GetRuntime(ctx.as_raw().as_ptr())) as usize }
}

/// `host(kind, payload, more?, last?)`: the prelude's one host primitive (its contract is in the
/// prelude's layer 0), answered by [`BridgeHost::host_call`].
///
/// # Safety
/// Called by QuickJS only: `ctx` is a live context whose opaque pointer is null or a live
/// [`ContextState`], and `argv` holds at least `argc` values (QuickJS pads it to the declared
/// length, 2, with `undefined`).
unsafe extern "C" fn host(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    argc: c_int,
    argv: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: as this function's contract says.
    unsafe { guarded(ctx, || host_call(ctx, argc, argv)) }
}

/// Runs a request primitive's body `f`. A panic in it (a bug: in the bridge, or in the runtime or
/// a tool while a request is answered inline) becomes a fatal stop of the cell, reported as
/// `internal_error`, rather than an abort of the process.
///
/// # Safety
/// As [`host`]; `f` runs under the same contract.
unsafe fn guarded(ctx: *mut qjs::JSContext, f: impl FnOnce() -> qjs::JSValue) -> qjs::JSValue {
    if let Ok(v) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
        return v;
    }
    // SAFETY: as the contract says.
    let state = unsafe { state(ctx) };
    if let Some(state) = state {
        state.bridge.lock().unwrap_or_else(PoisonError::into_inner).set_fatal(GuestFailure {
            code: Some(CodeModeErrorCode::InternalError),
            message: "internal error: the host failed while handling a request of the cell".into(),
        });
    }
    // SAFETY: as the contract says.
    unsafe { answer(ctx, state, HostCallResult::Fatal) }
}

/// # Safety
/// As [`host`].
unsafe fn host_call(ctx: *mut qjs::JSContext, argc: c_int, argv: *mut qjs::JSValue) -> qjs::JSValue {
    // SAFETY: as the contract says.
    let Some(state) = (unsafe { state(ctx) }) else {
        // SAFETY: as above.
        return unsafe { answer(ctx, None, HostCallResult::Fatal) };
    };
    if argc < 2 || argv.is_null() {
        // SAFETY: as above.
        return unsafe { throw_type(ctx, "host(kind, payload) takes two strings") };
    }
    // `host(kind, payload, more?, last?)`: up to three parts of the payload, joined here.
    let n = usize::try_from(argc).map_or(2, |n| n.min(4));
    // SAFETY: `argv` holds at least `argc` >= n >= 2 values, borrowed for this call.
    let args = unsafe { std::slice::from_raw_parts(argv, n) };
    let call = |kind: &str, payload: &str| bridge_call(state, kind, payload);
    // SAFETY: values of this call, under the runtime's lock.
    let answered = unsafe {
        with_text(ctx, args[0], |kind| {
            if n == 2 {
                with_text(ctx, args[1], |payload| call(kind, payload))
            } else {
                with_joined(ctx, &args[1..], |payload| call(kind, payload))
            }
        })
    };
    match answered {
        // SAFETY: as above.
        Some(Some(result)) => unsafe { answer(ctx, Some(state), result) },
        // SAFETY: as above.
        _ => unsafe { throw_type(ctx, "host(kind, payload) takes two strings") },
    }
}

/// Hands request `kind` with `payload` to the VM's bridge.
fn bridge_call(state: &ContextState, kind: &str, payload: &str) -> HostCallResult {
    // Outcomes answered at once and not settled yet count as outstanding (see `answered` and
    // `settling_left`).
    let held = state.answered.borrow().len() + state.settling_left.get();
    // A lock poisoned by a panic in an earlier call (which stopped that cell) is taken as it is:
    // the bridge is made anew for every run.
    state.bridge.lock().unwrap_or_else(PoisonError::into_inner).host_call_holding(kind, payload, held)
}

/// `callPlain(kind, head, value, tail, maxDepth)`: what `host(kind, head, plainJson(value, 1,
/// maxDepth), tail)` does when `plainJson` gives a string, in one call and without the JSON string
/// (its contract is in the prelude's layer 0). The message is written straight into one host buffer:
/// no JavaScript string is made for the input's text and none is read back. `undefined`, and
/// nothing sent, when `plainJson` would answer `undefined` (the prelude then takes its own path).
/// Its limits are `plainJson`'s ([`crate::plain_json`]): the input's text is bounded by the guest
/// heap limit, its nesting by [`crate::plain_json::MAX_NESTING`], and it asks the interrupt check
/// while it writes.
///
/// # Safety
/// As [`host`] (QuickJS pads `argv` to the declared length, 5).
unsafe extern "C" fn call_plain(
    ctx: *mut qjs::JSContext,
    _this: qjs::JSValue,
    argc: c_int,
    argv: *mut qjs::JSValue,
) -> qjs::JSValue {
    // SAFETY: as this function's contract says.
    unsafe { guarded(ctx, || call_plain_inner(ctx, argc, argv)) }
}

/// # Safety
/// As [`call_plain`].
unsafe fn call_plain_inner(ctx: *mut qjs::JSContext, argc: c_int, argv: *mut qjs::JSValue) -> qjs::JSValue {
    const USAGE: &str = "callPlain(kind, head, value, tail, maxDepth)";
    // SAFETY: as the contract says.
    let Some(state) = (unsafe { state(ctx) }) else {
        // SAFETY: as above.
        return unsafe { answer(ctx, None, HostCallResult::Fatal) };
    };
    if argc < 5 || argv.is_null() {
        // SAFETY: as above.
        return unsafe { throw_type(ctx, USAGE) };
    }
    // SAFETY: `argv` holds at least `argc` >= 5 values, borrowed for this call.
    let args = unsafe { std::slice::from_raw_parts(argv, 5) };
    let Some(max_depth) = crate::plain_json::int_of(args[4]) else {
        // SAFETY: as above.
        return unsafe { throw_type(ctx, USAGE) };
    };
    // The VM's buffer, taken (a call made while it is out, should one ever be, starts its own);
    // room for a typical message (an id, a small input): growing it from nothing took several
    // reallocations a call.
    let mut kept = KeptMessage::take(state);
    let message = &mut kept.0;
    // SAFETY: values of this call, under the runtime's lock.
    if unsafe { kept_text(ctx, state, args[1], |head| message.extend_from_slice(head.as_bytes())) }.is_none() {
        // SAFETY: as above.
        return unsafe { throw_type(ctx, USAGE) };
    }
    // SAFETY: as above; no guest code runs while the input is written.
    if !unsafe { crate::plain_json::append_plain(ctx, state, args[2], 1, max_depth, message) } {
        return qjs::JS_UNDEFINED;
    }
    // SAFETY: as above.
    if unsafe { kept_text(ctx, state, args[3], |tail| message.extend_from_slice(tail.as_bytes())) }.is_none() {
        // SAFETY: as above.
        return unsafe { throw_type(ctx, USAGE) };
    }
    // Head and tail are valid UTF-8 (`with_text`), and so is the input's text (`plain_json`'s
    // quoting); should it not be, nothing is sent and the prelude's path takes the value.
    let Ok(payload) = std::str::from_utf8(message) else { return qjs::JS_UNDEFINED };
    // SAFETY: as above.
    match unsafe { kept_text(ctx, state, args[0], |kind| bridge_call(state, kind, payload)) } {
        // SAFETY: as above.
        Some(result) => unsafe { answer(ctx, Some(state), result) },
        // SAFETY: as above.
        None => unsafe { throw_type(ctx, USAGE) },
    }
}

/// [`ContextState::message`] while `callPlain` writes a request into it: handed back to the state
/// when dropped, whichever way the call ends (unless it grew past [`MESSAGE_KEPT_BYTES`]).
pub(crate) struct KeptMessage<'a>(pub(crate) Vec<u8>, &'a ContextState);

impl<'a> KeptMessage<'a> {
    pub(crate) fn take(state: &'a ContextState) -> Self {
        let mut buf = state.message.take();
        buf.clear();
        buf.reserve(256);
        KeptMessage(buf, state)
    }
}

impl Drop for KeptMessage<'_> {
    fn drop(&mut self) {
        if self.0.capacity() <= MESSAGE_KEPT_BYTES {
            self.1.message.set(std::mem::take(&mut self.0));
        }
    }
}

/// The JavaScript answer to a host call: a value, or a thrown exception (`JS_EXCEPTION`).
///
/// # Safety
/// `ctx` is a live context under its runtime's lock.
unsafe fn answer(ctx: *mut qjs::JSContext, state: Option<&ContextState>, result: HostCallResult) -> qjs::JSValue {
    match result {
        HostCallResult::Request(id) => match state {
            // SAFETY: as the contract says.
            Some(state) => unsafe { promise_for(ctx, state, id) },
            None => qjs::JS_NewFloat64(id as f64),
        },
        HostCallResult::Accepted => qjs::JS_MKVAL(qjs::JS_TAG_INT, 0),
        // SAFETY: `text` is valid UTF-8 of the given length; the new string (or the exception
        // marker, with an out-of-memory error pending) goes to QuickJS.
        HostCallResult::Data(Some(text)) => unsafe {
            qjs::JS_NewStringLen(ctx, text.as_ptr().cast(), text.len() as qjs::size_t)
        },
        HostCallResult::Data(None) => qjs::JS_UNDEFINED,
        HostCallResult::Throw { name, message } => {
            // SAFETY: as the contract says.
            let Some(ctx) = (unsafe { rquickjs_ctx(ctx) }) else { return qjs::JS_EXCEPTION };
            let _ = match name {
                "TypeError" => Exception::throw_type(&ctx, &message),
                "RangeError" => Exception::throw_range(&ctx, &message),
                _ => Exception::throw_message(&ctx, &message),
            };
            qjs::JS_EXCEPTION
        }
        // Settled at once: a promise filed under the id like any other, its outcome kept to be
        // settled when the job queue next runs dry (see `ContextState::answered`).
        HostCallResult::Settled { id, ok, json } => {
            // SAFETY: as the contract says.
            unsafe { answered(ctx, state, id, Outcome::Json { ok, json }) }
        }
        HostCallResult::SettledValue { id, value } => {
            // SAFETY: as the contract says.
            unsafe { answered(ctx, state, id, Outcome::Value(value)) }
        }
        HostCallResult::Fatal => {
            if let Some(state) = state {
                state.interrupt.fatal.store(true, Ordering::Relaxed);
            }
            // SAFETY: as the contract says.
            let Some(ctx) = (unsafe { rquickjs_ctx(ctx) }) else { return qjs::JS_EXCEPTION };
            let _ = Exception::throw_internal(&ctx, "a code mode limit was reached; the cell is being stopped");
            qjs::JS_EXCEPTION
        }
    }
}

/// A new promise for request `id`, its resolving functions kept in `state.pending` until the
/// request is settled (see `Vm::settle`): the prelude's `track` then has nothing to do.
///
/// # Safety
/// `ctx` is a live context under its runtime's lock, `state` its context state.
unsafe fn promise_for(ctx: *mut qjs::JSContext, state: &ContextState, id: RequestId) -> qjs::JSValue {
    let mut funcs = [qjs::JS_UNDEFINED; 2];
    // SAFETY: as the contract says; on success `funcs` holds two owned references.
    let promise = unsafe { qjs::JS_NewPromiseCapability(ctx, funcs.as_mut_ptr()) };
    // SAFETY: checking the value just made.
    if unsafe { qjs::JS_IsException(promise) } {
        return promise;
    }
    if let Some(stale) = state.pending.borrow_mut().insert(id, funcs) {
        // Request ids are never reused within a VM; should one be, the older promise stays pending.
        for f in stale {
            // SAFETY: owned references of this context, freed once.
            unsafe { qjs::JS_FreeValue(ctx, f) };
        }
    }
    promise
}

/// Throws a `TypeError` with `message`; returns the exception marker.
///
/// # Safety
/// `ctx` is a live context under its runtime's lock.
pub(crate) unsafe fn throw_type(ctx: *mut qjs::JSContext, message: &str) -> qjs::JSValue {
    // SAFETY: as the contract says.
    if let Some(ctx) = unsafe { rquickjs_ctx(ctx) } {
        let _ = Exception::throw_type(&ctx, message);
    }
    qjs::JS_EXCEPTION
}

/// rquickjs's handle on a raw context, for its exception helpers (it takes a reference of the
/// context and gives it back when dropped).
///
/// # Safety
/// `ctx` is a live context under its runtime's lock (we are inside a call QuickJS makes while
/// rquickjs holds that lock), and the handle does not outlive this call.
unsafe fn rquickjs_ctx<'js>(ctx: *mut qjs::JSContext) -> Option<Ctx<'js>> {
    // SAFETY: as the contract says.
    NonNull::new(ctx).map(|nn| unsafe { Ctx::from_raw(nn) })
}

/// A JavaScript string's text, lone surrogates as U+FFFD (rquickjs's own conversion refuses them,
/// which would turn an error message such as `"bad \uD800"` into no message at all).
pub(crate) fn text_of(s: &rquickjs::String<'_>) -> Option<String> {
    let v = s.as_raw();
    let ctx = s.ctx().as_raw().as_ptr();
    // SAFETY: `s` is a live string of a context whose lock the caller holds (it has a `String<'js>`).
    unsafe { with_text(ctx, v, |text| text.to_string()) }
}

/// Calls `f` with `args` (borrowed: QuickJS takes its own references) and `this` undefined, without
/// rquickjs's argument marshalling (the prelude's `settle` and `poll` run at every drive step).
pub(crate) fn call<'js>(
    ctx: &Ctx<'js>,
    f: &rquickjs::Function<'js>,
    args: &mut [qjs::JSValue],
) -> rquickjs::Result<Value<'js>> {
    let argc =
        c_int::try_from(args.len()).map_err(|_| rquickjs::Error::TooManyArgs { expected: 0, given: args.len() })?;
    // SAFETY: `f` and every argument are live values of `ctx`, whose lock the caller holds (it has
    // a `Ctx<'js>`); JS_Call does not consume them. The result is a new reference, handed to
    // rquickjs's `Value`, which frees it; an exception stays pending for the caller to catch.
    unsafe {
        let r = qjs::JS_Call(ctx.as_raw().as_ptr(), f.as_raw(), qjs::JS_UNDEFINED, argc, args.as_mut_ptr());
        if qjs::JS_IsException(r) {
            return Err(rquickjs::Error::Exception);
        }
        Ok(Value::from_raw(ctx.clone(), r))
    }
}

/// The promise for request `id`, answered at once with `outcome`, which waits in
/// [`ContextState::answered`] to be settled.
///
/// # Safety
/// As [`answer`].
unsafe fn answered(
    ctx: *mut qjs::JSContext,
    state: Option<&ContextState>,
    id: RequestId,
    outcome: Outcome,
) -> qjs::JSValue {
    let Some(state) = state else {
        // Never: the primitive is registered with its state. The outcome cannot be kept.
        // SAFETY: as the contract says.
        return unsafe { answer(ctx, None, HostCallResult::Fatal) };
    };
    // SAFETY: as the contract says.
    let promise = unsafe { promise_for(ctx, state, id) };
    // SAFETY: checking the value just made.
    if !unsafe { qjs::JS_IsException(promise) } {
        state.answered.borrow_mut().push((id, outcome));
    }
    promise
}

/// The guest value of a host value, as `JSON.parse` makes it of the value's encoding for the guest
/// (see [`crate::from_json::build`]).
pub(crate) fn value_of<'js>(ctx: &Ctx<'js>, value: &serde_json::Value) -> rquickjs::Result<Value<'js>> {
    // SAFETY: the context is live under its lock (we hold a `Ctx`); the result is a new reference,
    // owned by the `Value` from here.
    match unsafe { crate::from_json::build(ctx.as_raw().as_ptr(), value) } {
        // SAFETY: a new reference of this context, owned by the `Value` from here.
        Some(v) => Ok(unsafe { Value::from_raw(ctx.clone(), v) }),
        None => Err(rquickjs::Error::Exception),
    }
}

/// The value `JSON.parse` makes of `json`: read by serde_json straight into QuickJS values
/// ([`crate::from_json`]), or, for text serde_json refuses, by QuickJS's own JSON parser.
/// JS_ParseJSON reads up to a NUL after the text: it is pushed onto `json` for the call (in place
/// when the string has spare room, else with one reallocation) and taken off again, where
/// rquickjs's `json_parse` copies the text twice.
pub(crate) fn parse_json<'js>(ctx: &Ctx<'js>, json: &mut String) -> rquickjs::Result<Value<'js>> {
    // SAFETY: the context is live under its lock (we hold a `Ctx`). The result is a new reference,
    // handed to rquickjs's `Value`, which frees it.
    match unsafe { crate::from_json::read(ctx.as_raw().as_ptr(), json) } {
        // SAFETY: a new reference of this context, owned by the `Value` from here.
        Ok(v) => return Ok(unsafe { Value::from_raw(ctx.clone(), v) }),
        Err(crate::from_json::NotRead::Exception) => return Err(rquickjs::Error::Exception),
        Err(crate::from_json::NotRead::Refused) => {}
    }
    let len = json.len();
    json.push('\0');
    // SAFETY: `json` holds `len` bytes of text followed by the NUL JS_ParseJSON requires, and lives
    // through the call; the context is live under its lock (we hold a `Ctx`). The result is a new
    // reference (handed to rquickjs's `Value`, which frees it) or the exception marker.
    let v = unsafe {
        qjs::JS_ParseJSON(ctx.as_raw().as_ptr(), json.as_ptr().cast(), len as qjs::size_t, c"<input>".as_ptr())
    };
    json.truncate(len);
    // SAFETY: checking the value just made; on success it is owned by the `Value`.
    unsafe {
        if qjs::JS_IsException(v) {
            return Err(rquickjs::Error::Exception);
        }
        Ok(Value::from_raw(ctx.clone(), v))
    }
}
