//! How a nested call reaches a Python tool, by the tool's kind. Every path converts the input to
//! Python and the result back to JSON (refusing what is not JSON) under the GIL, and none takes
//! the GIL on a tokio worker.
//!
//! - **Sync** (a plain `def`, the default): called from a guest worker, on the lane (`crate::lane`:
//!   one thread kept awake between calls, so a cell's calls in sequence cost no thread wake-up)
//!   when it is idle, else on tokio's blocking pool. The tool may block as long as it likes; the
//!   run does not wait past its own deadline (it suspends as `waiting`).
//! - **Inline** (`@tool(inline=True)`, a plain `def`): on the guest worker thread that waits for
//!   it — no thread switch at all, the fastest path, for quick pure functions. The price: while
//!   the function runs, the run cannot suspend; one that overruns `timeoutMs` fails the run with
//!   `timeout` when it returns, and one that never returns holds its run (and `exec`). Called from any other thread (a resumed call on
//!   the runtime), it takes the sync path.
//! - **Async** (`async def`): runs as a task on the asyncio loop of the latest `exec` / `wait` (in a
//!   copy of that call's `contextvars` context), handed to the loop's thread directly while it
//!   looks for the next call, else scheduled with `call_soon_threadsafe` (`crate::awake`); its
//!   result is converted on the loop's thread and sent back. Dropping the call (run aborted)
//!   cancels the task.

use crate::convert::{from_py, to_py};
use crate::gil;
use codemode_embed::HostFailure;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use pyo3_async_runtimes::TaskLocals;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// The asyncio loop (and context) of the latest `exec` / `wait` call: where `async def` tools run.
pub type LoopSlot = Arc<Mutex<Option<LoopOf>>>;

/// An asyncio loop and the `contextvars` context of the call that gave it.
#[derive(Clone)]
pub struct LoopOf {
    pub locals: TaskLocals,
    /// The loop's identity (its object's address, kept alive by `locals`): known without the GIL.
    pub id: usize,
}

impl LoopOf {
    /// The running loop and context of the caller.
    pub fn current(py: Python<'_>) -> PyResult<LoopOf> {
        let locals = pyo3_async_runtimes::tokio::get_current_locals(py)?;
        let id = locals.event_loop(py).as_ptr() as usize;
        Ok(LoopOf { locals, id })
    }
}

/// How a callable is called (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// On the blocking pool; an awaitable result is awaited on the loop.
    Sync,
    /// On the guest worker thread when called there.
    Inline,
    /// A coroutine function: scheduled on the loop.
    Async,
}

/// What a Python exception says: its type's name and its message.
pub fn failure(py: Python<'_>, err: &PyErr) -> HostFailure {
    let kind = err.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "Exception".into());
    let message = err.value(py).str().map(|s| s.to_string()).unwrap_or_default();
    HostFailure::new(kind, message)
}

/// The failure of a call the exiting interpreter can no longer make.
fn exiting() -> HostFailure {
    HostFailure::new("RuntimeError", "the Python interpreter is exiting")
}

/// How many times something needed the event loop (an `async def` tool or an awaitable a sync
/// callable returned scheduled on it, a future resolved onto it): a caller looking for its answer
/// on the loop's thread (`Handoff` in lib.rs), or the loop's thread looking for the next call
/// (`crate::awake`), stops when this changes.
static LOOP_WANTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// See [`LOOP_WANTED`].
pub fn loop_wanted() -> usize {
    LOOP_WANTED.load(std::sync::atomic::Ordering::Acquire)
}

pub(crate) fn want_loop() {
    LOOP_WANTED.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
}

fn on_guest_thread() -> bool {
    std::thread::current().name() == Some(codemode_embed::GUEST_THREAD_NAME)
}

static IS_AWAITABLE: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// A Python call's outcome: its value, or an awaitable to run on the event loop.
enum Called {
    Ready(Result<Value, HostFailure>),
    Later(std::pin::Pin<Box<dyn std::future::Future<Output = PyResult<Py<PyAny>>> + Send>>),
}

/// A Python callable the runtime calls with JSON arguments.
#[derive(Clone)]
pub struct Callback {
    pub callable: Arc<Py<PyAny>>,
    pub what: Arc<str>,
    pub loop_slot: LoopSlot,
    pub mode: Mode,
}

impl Callback {
    /// Calls the callable with `args` by its [`Mode`]; the result as JSON.
    pub async fn call(&self, args: Vec<Value>) -> Result<Value, HostFailure> {
        match self.mode {
            Mode::Inline if on_guest_thread() => {
                gil::attach(|py| self.invoke(py, &args).and_then(|out| self.json(py, &out)))
                    .unwrap_or_else(|| Err(exiting()))
            }
            Mode::Async => self.call_async(args).await,
            Mode::Sync | Mode::Inline => self.call_blocking(args).await,
        }
    }

    pub(crate) fn invoke<'py>(&self, py: Python<'py>, args: &[Value]) -> Result<Bound<'py, PyAny>, HostFailure> {
        let call = || -> PyResult<Bound<'py, PyAny>> {
            let positional: Vec<Bound<'py, PyAny>> = args.iter().map(|a| to_py(py, a)).collect::<PyResult<_>>()?;
            self.callable.bind(py).call1(PyTuple::new(py, positional)?)
        };
        call().map_err(|e| failure(py, &e))
    }

    pub(crate) fn json(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> Result<Value, HostFailure> {
        from_py(obj).map_err(|e| {
            let f = failure(py, &e);
            HostFailure::new(f.kind, format!("{} returned a value that is not JSON: {}", self.what, f.message))
        })
    }

    fn locals(&self) -> Result<LoopOf, HostFailure> {
        self.loop_slot.lock().unwrap_or_else(|p| p.into_inner()).clone().ok_or_else(|| {
            HostFailure::new(
                "RuntimeError",
                format!("{} is async but no asyncio event loop called exec/wait", self.what),
            )
        })
    }

    /// Calls the callable now, on this thread (with the GIL): its value, or the awaitable it
    /// returned (a hook or approver may be `async`) as a future on the loop.
    fn call_now(&self, args: &[Value]) -> Called {
        gil::attach(|py| -> Called {
            let out = match self.invoke(py, args) {
                Ok(out) => out,
                Err(f) => return Called::Ready(Err(f)),
            };
            let awaitable = IS_AWAITABLE
                .import(py, "inspect", "isawaitable")
                .and_then(|f| f.call1((&out,)))
                .and_then(|r| r.is_truthy())
                .unwrap_or(false);
            if !awaitable {
                return Called::Ready(self.json(py, &out));
            }
            want_loop();
            match self.locals() {
                Ok(of) => match pyo3_async_runtimes::into_future_with_locals(&of.locals, out) {
                    Ok(fut) => Called::Later(Box::pin(fut)),
                    Err(e) => Called::Ready(Err(failure(py, &e))),
                },
                Err(f) => Called::Ready(Err(f)),
            }
        })
        .unwrap_or_else(|| Called::Ready(Err(exiting())))
    }

    /// The sync path: on the lane when called from an idle lane's guest worker, else on the
    /// blocking pool; an awaitable result is awaited on the loop, its value converted back on the
    /// blocking pool.
    async fn call_blocking(&self, args: Vec<Value>) -> Result<Value, HostFailure> {
        let this = self.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: crate::lane::Job = Box::new(move || {
            let called = this.call_now(&args);
            Box::new(move || {
                let _ = tx.send(called);
            })
        });
        let job = if on_guest_thread() { crate::lane::try_run(job).err() } else { Some(job) };
        if let Some(job) = job {
            // The pool's handle is not needed: the job answers through `tx` (dropped unsent if
            // it panics, which `rx` reports).
            drop(tokio::task::spawn_blocking(move || job()()));
        }
        let called = rx.await.map_err(|_| HostFailure::new("RuntimeError", format!("{} did not run", self.what)))?;
        match called {
            Called::Ready(r) => r,
            Called::Later(fut) => {
                let outcome = fut.await;
                let this = self.clone();
                tokio::task::spawn_blocking(move || {
                    gil::attach(|py| match outcome {
                        Ok(obj) => this.json(py, obj.bind(py)),
                        Err(e) => Err(failure(py, &e)),
                    })
                    .unwrap_or_else(|| Err(exiting()))
                })
                .await
                .map_err(|e| HostFailure::new("RuntimeError", e.to_string()))?
            }
        }
    }

    /// The async path (see the module docs): handed to the loop's thread if it is looking for a
    /// call (`crate::awake`), otherwise scheduled on the loop.
    async fn call_async(&self, args: Vec<Value>) -> Result<Value, HostFailure> {
        let LoopOf { locals, id: loop_id } = self.locals()?;
        let (reply, rx) = tokio::sync::oneshot::channel::<Result<Value, HostFailure>>();
        let task = Arc::new(crate::awake::TaskCell::default());
        let job = crate::awake::Job { callback: self.clone(), args, locals, loop_id, reply, task: task.clone() };
        if let Err(job) = crate::awake::mailbox().offer(job) {
            want_loop();
            let schedule = move || gil::attach(|py| crate::awake::schedule(py, job)).unwrap_or_else(|| Err(exiting()));
            if on_guest_thread() {
                schedule()?;
            } else {
                tokio::task::spawn_blocking(schedule)
                    .await
                    .map_err(|e| HostFailure::new("RuntimeError", format!("{} did not run: {e}", self.what)))??;
            }
        }
        let mut guard = CancelTask(Some(task));
        let outcome = rx.await.unwrap_or_else(|_| {
            Err(HostFailure::new("CancelledError", format!("{} was cancelled (its event loop closed)", self.what)))
        });
        guard.0 = None;
        outcome
    }
}

/// Cancels the task of a call that was dropped (its run aborted or expired): on its loop, as
/// asyncio tasks are not thread-safe. A call not started yet is not started (`crate::awake`).
struct CancelTask(Option<Arc<crate::awake::TaskCell>>);

impl Drop for CancelTask {
    fn drop(&mut self) {
        if let Some((task, event_loop)) = self.0.take().and_then(|cell| cell.take()) {
            // Off the runtime's workers: cancelling needs the GIL.
            let cancel = move || {
                gil::attach(|py| {
                    if let Ok(cancel) = task.bind(py).getattr("cancel") {
                        // A closed loop has nothing left to cancel.
                        let _ = event_loop.bind(py).call_method1("call_soon_threadsafe", (cancel,));
                    }
                });
            };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn_blocking(cancel)),
                Err(_) => cancel(),
            }
        }
    }
}
