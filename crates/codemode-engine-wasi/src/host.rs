//! The host side of the guest's imports: the bridge primitive (and `host_take` for pulled catalog
//! data), the interrupt poll, and stubs for the
//! five WASI functions the C library references. No WASI capability is granted: there are no files,
//! no environment, no arguments, no sockets; output descriptors swallow what is written.

use codemode_bridge::{BridgeHost, HostCallResult};
use codemode_core::engine::GuestLimits;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use wasmtime::{Caller, Engine, Extern, Linker, Memory, StoreLimits, StoreLimitsBuilder};

/// `errno` values of WASI preview 1.
const ERRNO_SUCCESS: i32 = 0;
const ERRNO_BADF: i32 = 8;
const ERRNO_SPIPE: i32 = 70;

/// `host_call`'s answer for a request settled at once (bit 62; request ids stay below 2^53):
/// the low 32 bits are the outcome's JSON length, [`ANSWERED_OK`] says resolve (else reject), and
/// [`ANSWERED_IN_BUFFER`] says the JSON is in the answer buffer the guest passed (else it is
/// fetched with `host_take`).
const ANSWERED: i64 = 1 << 62;
/// See [`ANSWERED`].
const ANSWERED_OK: i64 = 1 << 61;
/// See [`ANSWERED`].
const ANSWERED_IN_BUFFER: i64 = 1 << 60;

/// Host state of one guest instance (the wasmtime `Store` data).
pub(crate) struct HostState {
    /// Linear-memory and table limits of the store.
    pub(crate) limits: StoreLimits,
    /// The bridge (request ids, output buffer, limits).
    pub(crate) bridge: BridgeHost,
    /// When the guest must stop (checked by QuickJS's interrupt handler).
    pub(crate) deadline: Instant,
    /// A fatal bridge limit was hit: stop the guest at the next interrupt poll.
    pub(crate) fatal: bool,
    /// The current drive step's cancel flag (`DriveInput::cancel`): set, the guest stops at the next
    /// interrupt poll.
    pub(crate) cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// The interrupt handler told QuickJS to stop during this drive step.
    pub(crate) fired: bool,
    /// Address of the guest's scratch buffer for error messages, and its length.
    pub(crate) scratch: (u32, u32),
    /// The guest's memory, once instantiated.
    pub(crate) memory: Option<Memory>,
    /// The answer of the last `pull` (or the outcome of a request settled at once that did not fit
    /// the answer buffer), until the shim copies it into the guest (`host_take`).
    pub(crate) pulled: Option<std::sync::Arc<str>>,
}

/// Linear memory a store may reach beyond the guest heap limit: QuickJS's runtime, the prelude, the
/// 1 MiB stack and allocator overhead. Stops the guest from growing memory without bound even if the
/// heap accounting had a bug.
pub(crate) const MEMORY_HEADROOM: u64 = 32 << 20;

impl HostState {
    pub(crate) fn new(limits: GuestLimits) -> Self {
        let max_memory = limits.memory_limit_bytes.saturating_add(MEMORY_HEADROOM).min(u64::from(u32::MAX));
        HostState {
            limits: StoreLimitsBuilder::new()
                .memory_size(usize::try_from(max_memory).unwrap_or(usize::MAX))
                .instances(1)
                .memories(1)
                .tables(4)
                .build(),
            bridge: BridgeHost::new(limits),
            deadline: Instant::now() + std::time::Duration::from_secs(3600),
            fatal: false,
            cancel: None,
            fired: false,
            scratch: (0, 0),
            memory: None,
            pulled: None,
        }
    }
}

fn memory(caller: &mut Caller<'_, HostState>) -> wasmtime::Result<Memory> {
    if let Some(m) = caller.data().memory {
        return Ok(m);
    }
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => {
            caller.data_mut().memory = Some(m);
            Ok(m)
        }
        _ => Err(wasmtime::format_err!("the guest exports no memory")),
    }
}

/// The guest's text at `ptr..ptr + len`, borrowed unless it holds lone surrogates (see
/// [`codemode_bridge::adapter::guest_text`]).
fn guest_str(data: &[u8], ptr: u32, len: u32) -> wasmtime::Result<std::borrow::Cow<'_, str>> {
    let start = ptr as usize;
    let end = start.checked_add(len as usize).ok_or_else(|| wasmtime::format_err!("guest pointer overflow"))?;
    let bytes = data.get(start..end).ok_or_else(|| wasmtime::format_err!("guest pointer out of bounds"))?;
    Ok(codemode_bridge::adapter::guest_text(bytes))
}

fn write_u32(mem: &Memory, caller: &mut Caller<'_, HostState>, at: u32, v: u32) -> wasmtime::Result<()> {
    mem.write(caller, at as usize, &v.to_le_bytes()).map_err(|e| wasmtime::format_err!("{e}"))
}

/// The linker with every import the guest module may use.
pub(crate) fn linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut l = Linker::new(engine);
    l.func_wrap(
        "codemode",
        "host_call",
        |mut caller: Caller<'_, HostState>,
         kp: u32,
         kl: u32,
         pp: u32,
         pl: u32,
         ap: u32,
         acap: u32,
         held: u32|
         -> wasmtime::Result<i64> {
            let mem = memory(&mut caller)?;
            // Read in place: the guest's memory and the bridge are borrowed side by side (no copy of
            // either text per call).
            let answer = {
                let (data, state) = mem.data_and_store_mut(&mut caller);
                let kind = guest_str(data, kp, kl)?;
                let payload = guest_str(data, pp, pl)?;
                state.bridge.host_call_holding(&kind, &payload, held as usize)
            };
            let (code, message) = match answer {
                HostCallResult::Request(id) => return Ok(i64::try_from(id).unwrap_or(i64::MAX)),
                HostCallResult::Accepted => return Ok(0),
                // A pull answers with the text's length; the shim allocates that much and asks for
                // the bytes with `host_take` (-6: nothing under that key).
                HostCallResult::Data(Some(text)) => {
                    let len = text.len() as i64;
                    caller.data_mut().pulled = Some(text);
                    return Ok(len);
                }
                HostCallResult::Data(None) => return Ok(-6),
                // Settled at once: the outcome's JSON goes into the guest's answer buffer
                // (`ap..ap + acap`, its own memory) when it fits, else the shim allocates its length
                // and fetches it with `host_take`, as a pull's text.
                HostCallResult::Settled { ok, json, .. } => {
                    let len = u32::try_from(json.len())
                        .map_err(|_| wasmtime::format_err!("a settled outcome too large for the guest"))?;
                    let mut code = ANSWERED | i64::from(len);
                    if ok {
                        code |= ANSWERED_OK;
                    }
                    if len <= acap {
                        mem.write(&mut caller, ap as usize, json.as_bytes())
                            .map_err(|e| wasmtime::format_err!("{e}"))?;
                        code |= ANSWERED_IN_BUFFER;
                    } else {
                        caller.data_mut().pulled = Some(std::sync::Arc::from(json));
                    }
                    return Ok(code);
                }
                HostCallResult::Throw { name: "TypeError", message } => (-1, message),
                HostCallResult::Throw { name: "RangeError", message } => (-2, message),
                HostCallResult::Throw { message, .. } => (-3, message),
                // Never: this engine's bridge is not told to hand values over (`take_values`).
                HostCallResult::SettledValue { .. } | HostCallResult::Fatal => {
                    caller.data_mut().fatal = true;
                    return Ok(-4);
                }
            };
            let (at, cap) = caller.data().scratch;
            if cap > 0 {
                let mut bytes = message.into_bytes();
                bytes.truncate(cap as usize - 1);
                bytes.push(0);
                mem.write(&mut caller, at as usize, &bytes).map_err(|e| wasmtime::format_err!("{e}"))?;
            }
            Ok(code)
        },
    )?;
    l.func_wrap(
        "codemode",
        "host_take",
        |mut caller: Caller<'_, HostState>, dst: u32, len: u32| -> wasmtime::Result<i32> {
            let Some(text) = caller.data_mut().pulled.take() else {
                return Ok(-1);
            };
            if text.len() != len as usize {
                return Ok(-1);
            }
            let mem = memory(&mut caller)?;
            mem.write(&mut caller, dst as usize, text.as_bytes()).map_err(|e| wasmtime::format_err!("{e}"))?;
            Ok(0)
        },
    )?;
    l.func_wrap("codemode", "should_interrupt", |mut caller: Caller<'_, HostState>| -> i32 {
        let st = caller.data_mut();
        let cancelled = st.cancel.as_ref().is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed));
        if st.fatal || cancelled || Instant::now() >= st.deadline {
            st.fired = true;
            1
        } else {
            0
        }
    })?;
    let w = "wasi_snapshot_preview1";
    l.func_wrap(w, "clock_time_get", |mut caller: Caller<'_, HostState>, _id: i32, _precision: i64, out: u32| {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        let mem = memory(&mut caller)?;
        mem.write(&mut caller, out as usize, &now.to_le_bytes()).map_err(|e| wasmtime::format_err!("{e}"))?;
        wasmtime::Result::<i32>::Ok(ERRNO_SUCCESS)
    })?;
    l.func_wrap(w, "fd_close", |_fd: i32| -> i32 { ERRNO_BADF })?;
    l.func_wrap(w, "fd_fdstat_get", |_fd: i32, _out: i32| -> i32 { ERRNO_BADF })?;
    l.func_wrap(w, "fd_seek", |_fd: i32, _off: i64, _whence: i32, _out: i32| -> i32 { ERRNO_SPIPE })?;
    l.func_wrap(
        w,
        "fd_write",
        |mut caller: Caller<'_, HostState>, _fd: i32, iovs: u32, n: u32, written: u32| -> wasmtime::Result<i32> {
            // Output descriptors swallow everything (the C library only writes diagnostics).
            let mem = memory(&mut caller)?;
            let mut total: u32 = 0;
            for i in 0..n.min(1024) {
                let at = iovs as usize + i as usize * 8 + 4;
                let mut len = [0u8; 4];
                mem.read(&caller, at, &mut len).map_err(|e| wasmtime::format_err!("{e}"))?;
                total = total.saturating_add(u32::from_le_bytes(len));
            }
            write_u32(&mem, &mut caller, written, total)?;
            Ok(ERRNO_SUCCESS)
        },
    )?;
    Ok(l)
}
