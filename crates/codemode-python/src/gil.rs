//! Entering Python from the runtime's own threads, safely at interpreter exit; and awaitables
//! resolved from those threads.
//!
//! A native thread that takes the GIL while the interpreter finalizes is ended by CPython in the
//! middle of Rust frames (an abort or a segfault at exit). So every entry from a runtime thread
//! goes through [`attach`], which counts threads inside Python and refuses new entries once
//! [`shutdown`] — registered with `atexit` by the package, so it runs while the interpreter is
//! still whole — has begun; `shutdown` then waits (without the GIL) for the threads inside to
//! leave, at most [`EXIT_GRACE`]. Python tools still running past that are abandoned; one that
//! later returns finds entry refused and its result is dropped.
//!
//! A guest worker thread, and the lane (`crate::lane`), keeps its Python thread state between
//! entries ([`keep_thread_state`]):
//! CPython creates a thread state, and maps and unmaps its frame stack, each time a thread without
//! one takes the GIL — about a third of an inline tool call's cost before. The state is given back
//! when the worker thread ends (or by the interpreter at exit).
//!
//! A caller of `exec` / `wait` that looked for a quick answer without the GIL re-takes it
//! ([`Reacquiring`]): meanwhile a runtime thread about to enter Python waits for it. Without that,
//! a cell making quick calls into Python (inline tools, or the lane's) re-takes the GIL a few µs
//! after each release, long before the woken caller runs, and CPython lets the caller wait its
//! whole switch interval (5 ms) before it forces the hand-over: 50 µs per call over a cell of 100.
//!
//! [`spawn`] runs a Rust future on the runtime and gives Python an `asyncio.Future` resolved
//! through [`attach`]; cancelling the Python future aborts the Rust one (dropping it: an `exec`
//! or `wait` dropped this way aborts its run).

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// Longest wait at exit for runtime threads inside Python (a Python tool finishing).
pub const EXIT_GRACE: Duration = Duration::from_secs(5);

/// Callers re-taking the GIL after a look without it (see [`Reacquiring`]).
static REACQUIRING: AtomicUsize = AtomicUsize::new(0);

/// Held by a caller of `exec` / `wait` from the end of its look for the answer (still without the
/// GIL) until it holds the GIL again: a guest worker or the lane entering Python meanwhile waits
/// for it to have re-taken the GIL (see the module docs). Dropped with the GIL held.
pub struct Reacquiring(());

impl Reacquiring {
    /// Marks this caller as about to re-take the GIL.
    pub fn begin() -> Self {
        REACQUIRING.fetch_add(1, Ordering::SeqCst);
        Reacquiring(())
    }
}

impl Drop for Reacquiring {
    fn drop(&mut self) {
        REACQUIRING.fetch_sub(1, Ordering::SeqCst);
    }
}

thread_local! {
    /// How deep this thread is in [`attach`]: a nested entry holds the GIL already and must not
    /// wait for anyone.
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Whether this is one of the runtime's long-lived threads that enter Python: a guest worker or
/// the lane.
fn runtime_thread() -> bool {
    std::thread::current()
        .name()
        .is_some_and(|n| n == codemode_embed::GUEST_THREAD_NAME || n == crate::lane::THREAD_NAME)
}

/// Runs `f` with the GIL from a runtime thread; `None` once the interpreter is exiting.
pub fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let depth = DEPTH.with(|d| d.replace(d.get() + 1));
    if depth == 0 && REACQUIRING.load(Ordering::SeqCst) > 0 && runtime_thread() {
        // A caller is re-taking the GIL: let it have it first. It holds no lock of ours and is
        // only waiting to be scheduled, so this wait is short; it spins briefly, then yields.
        let mut spins = 0u32;
        while REACQUIRING.load(Ordering::SeqCst) > 0 {
            if spins < 200 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
    let out = if SHUTTING_DOWN.load(Ordering::SeqCst) {
        None
    } else {
        keep_thread_state();
        Some(Python::attach(f))
    };
    DEPTH.with(|d| d.set(depth));
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    out
}

/// A Python thread state this thread keeps between entries (see the module docs).
struct KeptState {
    gilstate: pyo3::ffi::PyGILState_STATE,
    tstate: *mut pyo3::ffi::PyThreadState,
}

thread_local! {
    static KEPT: std::cell::RefCell<Option<KeptState>> = const { std::cell::RefCell::new(None) };
}

/// On a guest worker thread or the lane, the first entry creates a thread state this thread keeps (the GIL
/// released, the state registered as the thread's): later entries only take the GIL. Other
/// threads (tokio's blocking pool, which comes and goes) get a fresh state per entry as before.
/// Called with [`INSIDE`] counted and the interpreter not exiting.
#[allow(unsafe_code)]
fn keep_thread_state() {
    if !runtime_thread() {
        return;
    }
    let _ = KEPT.try_with(|kept| {
        let mut kept = kept.borrow_mut();
        if kept.is_some() {
            return;
        }
        // SAFETY: the interpreter is initialized (this module is loaded) and not finalizing (the
        // caller checked SHUTTING_DOWN with INSIDE counted, and `shutdown` waits for INSIDE to drop
        // to zero before finalization can start). This thread holds no GIL here: it is a guest
        // worker outside any `Python::attach`. `PyGILState_Ensure` creates and registers this
        // thread's state and takes the GIL; `PyEval_SaveThread` releases the GIL and returns that
        // state, which stays registered, so the `PyGILState_Ensure` inside later `Python::attach`
        // calls finds it and only takes the GIL. Both are in the stable ABI.
        let (gilstate, tstate) = unsafe {
            let gilstate = pyo3::ffi::PyGILState_Ensure();
            (gilstate, pyo3::ffi::PyEval_SaveThread())
        };
        *kept = Some(KeptState { gilstate, tstate });
    });
}

impl Drop for KeptState {
    /// The guest worker thread ends: its thread state is deleted — unless the interpreter is
    /// exiting, which deletes it itself.
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        INSIDE.fetch_add(1, Ordering::SeqCst);
        if !SHUTTING_DOWN.load(Ordering::SeqCst) {
            // SAFETY: `tstate` is this thread's state saved by `keep_thread_state` (the thread has
            // not entered Python since: every entry returned, leaving the GIL released with this
            // state current for `PyGILState`); the interpreter is not finalizing (same protocol as
            // `attach`). `PyEval_RestoreThread` takes the GIL with it, and `PyGILState_Release` with
            // the state `PyGILState_Ensure` returned drops the last reference: CPython clears and
            // deletes the thread state and releases the GIL.
            unsafe {
                pyo3::ffi::PyEval_RestoreThread(self.tstate);
                pyo3::ffi::PyGILState_Release(self.gilstate);
            }
        }
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Called at interpreter exit (`atexit`): no runtime thread enters Python from now on; waits for
/// those inside to leave (at most [`EXIT_GRACE`]).
#[pyfunction]
pub fn shutdown(py: Python<'_>) {
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    py.detach(|| {
        let start = Instant::now();
        while INSIDE.load(Ordering::SeqCst) > 0 && start.elapsed() < EXIT_GRACE {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// A new `asyncio.Future` of `event_loop`; `on_cancel` runs when it is cancelled.
pub fn future<'py>(
    py: Python<'py>,
    event_loop: &Bound<'py, PyAny>,
    on_cancel: impl Fn() + Send + Sync + 'static,
) -> PyResult<Bound<'py, PyAny>> {
    let py_fut = event_loop.call_method0("create_future")?;
    self::on_cancel(py, &py_fut, on_cancel)?;
    Ok(py_fut)
}

/// Runs `f` when `py_fut` (an `asyncio.Future`) is cancelled.
pub fn on_cancel(py: Python<'_>, py_fut: &Bound<'_, PyAny>, f: impl Fn() + Send + Sync + 'static) -> PyResult<()> {
    let on_done = PyCFunction::new_closure(
        py,
        None,
        None,
        move |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            if args.get_item(0)?.call_method0("cancelled")?.is_truthy()? {
                f();
            }
            Ok(())
        },
    )?;
    py_fut.call_method1("add_done_callback", (on_done,)).map(drop)
}

/// Resolves `target` (a future of `event_loop`) with `outcome`, from any thread but a tokio
/// worker: converts it under the GIL and schedules the resolution on the loop's thread (asyncio
/// futures are not thread-safe). A future already cancelled stays so; a closed loop is ignored.
pub fn resolve<T>(target: Py<PyAny>, event_loop: Py<PyAny>, outcome: PyResult<T>)
where
    T: for<'a> IntoPyObject<'a>,
{
    // The loop is needed: a thread looking for a call on it stops looking (`crate::awake`).
    crate::calls::want_loop();
    attach(|py| {
        let (value, failed) = match outcome.and_then(|v| v.into_py_any(py)) {
            Ok(v) => (v, false),
            Err(e) => (e.into_value(py).into_any(), true),
        };
        let scheduled = settler(py).and_then(|settle| {
            event_loop.bind(py).call_method1("call_soon_threadsafe", (settle, target.bind(py), value, failed))
        });
        drop(scheduled);
    });
}

/// Runs `fut` on the runtime; returns an `asyncio.Future` of `event_loop` that resolves to its
/// output (converted under the GIL) or raises its error. Cancelling that future drops `fut`.
pub fn spawn<'py, T>(
    py: Python<'py>,
    event_loop: &Bound<'py, PyAny>,
    fut: impl std::future::Future<Output = PyResult<T>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let task = pyo3_async_runtimes::tokio::get_runtime().spawn(fut);
    let abort = task.abort_handle();
    let py_fut = future(py, event_loop, move || abort.abort())?;
    let (target, event_loop) = (py_fut.clone().unbind(), event_loop.clone().unbind());
    pyo3_async_runtimes::tokio::get_runtime().spawn(async move {
        let outcome = match task.await {
            Ok(r) => r,
            // Aborted: the Python future was cancelled, nothing to resolve.
            Err(e) if e.is_cancelled() => return,
            Err(e) => Err(pyo3::exceptions::PyRuntimeError::new_err(format!("codemode task failed: {e}"))),
        };
        // The GIL is taken on the blocking pool, never on a tokio worker.
        let _ = tokio::task::spawn_blocking(move || resolve(target, event_loop, outcome)).await;
    });
    Ok(py_fut)
}

static SETTLE: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// `settle(future, value, failed)`: resolves `future` unless it is already done (cancelled).
fn settler(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    SETTLE
        .get_or_try_init(py, || {
            let f = PyCFunction::new_closure(
                py,
                Some(c"settle"),
                None,
                |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
                    let fut = args.get_item(0)?;
                    if fut.call_method0("done")?.is_truthy()? {
                        return Ok(());
                    }
                    let method = if args.get_item(2)?.is_truthy()? { "set_exception" } else { "set_result" };
                    fut.call_method1(method, (args.get_item(1)?,))?;
                    Ok(())
                },
            )?;
            Ok::<_, PyErr>(f.into_any().unbind())
        })
        .map(|f| f.bind(py))
}
