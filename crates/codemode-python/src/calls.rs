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
//! - **Async** (`async def`): the coroutine is created on the calling thread and scheduled on the
//!   asyncio loop of the latest `exec` / `wait` (in that call's `contextvars` context); its result
//!   is converted on the loop's thread and sent back. Dropping the call (run aborted) cancels the
//!   task.

use crate::convert::{from_py, to_py};
use crate::gil;
use codemode_embed::HostFailure;
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};
use pyo3_async_runtimes::TaskLocals;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// The asyncio loop (and context) of the latest `exec` / `wait` call: where `async def` tools run.
pub type LoopSlot = Arc<Mutex<Option<TaskLocals>>>;

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

/// How many times a call needed the event loop (an `async def` tool, or an awaitable a sync
/// callable returned, scheduled on it): a caller looking for its answer on the loop's thread stops
/// when this changes (see `Handoff` in lib.rs).
static LOOP_WANTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// See [`LOOP_WANTED`].
pub fn loop_wanted() -> usize {
    LOOP_WANTED.load(std::sync::atomic::Ordering::Acquire)
}

fn want_loop() {
    LOOP_WANTED.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
}

fn on_guest_thread() -> bool {
    std::thread::current().name() == Some(codemode_embed::GUEST_THREAD_NAME)
}

static IS_AWAITABLE: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
static RUN_THREADSAFE: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

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

    fn invoke<'py>(&self, py: Python<'py>, args: &[Value]) -> Result<Bound<'py, PyAny>, HostFailure> {
        let call = || -> PyResult<Bound<'py, PyAny>> {
            let positional: Vec<Bound<'py, PyAny>> = args.iter().map(|a| to_py(py, a)).collect::<PyResult<_>>()?;
            self.callable.bind(py).call1(PyTuple::new(py, positional)?)
        };
        call().map_err(|e| failure(py, &e))
    }

    fn json(&self, py: Python<'_>, obj: &Bound<'_, PyAny>) -> Result<Value, HostFailure> {
        from_py(obj).map_err(|e| {
            let f = failure(py, &e);
            HostFailure::new(f.kind, format!("{} returned a value that is not JSON: {}", self.what, f.message))
        })
    }

    fn locals(&self) -> Result<TaskLocals, HostFailure> {
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
                Ok(locals) => match pyo3_async_runtimes::into_future_with_locals(&locals, out) {
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

    /// The async path (see the module docs).
    async fn call_async(&self, args: Vec<Value>) -> Result<Value, HostFailure> {
        let (tx, rx) = tokio::sync::oneshot::channel::<Result<Value, HostFailure>>();
        let this = self.clone();
        let schedule = move || gil::attach(|py| this.schedule(py, &args, tx)).unwrap_or_else(|| Err(exiting()));
        let task = if on_guest_thread() {
            schedule()?
        } else {
            tokio::task::spawn_blocking(schedule)
                .await
                .map_err(|e| HostFailure::new("RuntimeError", format!("{} did not run: {e}", self.what)))??
        };
        let mut guard = CancelTask(Some(task));
        let outcome = rx.await.unwrap_or_else(|_| {
            Err(HostFailure::new("CancelledError", format!("{} was cancelled (its event loop closed)", self.what)))
        });
        guard.0 = None;
        outcome
    }

    /// Creates the coroutine and runs it on the loop (`run_coroutine_threadsafe`, entered in the
    /// captured context); its done-callback converts the result on the loop's thread and sends it.
    fn schedule(
        &self,
        py: Python<'_>,
        args: &[Value],
        tx: tokio::sync::oneshot::Sender<Result<Value, HostFailure>>,
    ) -> Result<Py<PyAny>, HostFailure> {
        let locals = self.locals()?;
        want_loop();
        let coro = self.invoke(py, args)?;
        let start = || -> PyResult<Bound<'_, PyAny>> {
            let run = RUN_THREADSAFE.import(py, "asyncio", "run_coroutine_threadsafe")?;
            let ctx = locals.context(py);
            if ctx.is_none() {
                run.call1((&coro, locals.event_loop(py)))
            } else {
                ctx.call_method0("copy")?.call_method1("run", (run, &coro, locals.event_loop(py)))
            }
        };
        let task = start().map_err(|e| failure(py, &e))?;
        let (tx, what) = (Mutex::new(Some(tx)), self.what.clone());
        let on_done = PyCFunction::new_closure(
            py,
            None,
            None,
            move |a: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
                let py = a.py();
                let done = a.get_item(0)?;
                let outcome = if done.call_method0("cancelled")?.is_truthy()? {
                    Err(HostFailure::new("CancelledError", format!("{what} was cancelled")))
                } else {
                    match done.call_method0("result") {
                        Ok(v) => from_py(&v).map_err(|e| {
                            let f = failure(py, &e);
                            HostFailure::new(f.kind, format!("{what} returned a value that is not JSON: {}", f.message))
                        }),
                        Err(e) => Err(failure(py, &e)),
                    }
                };
                if let Some(tx) = tx.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = tx.send(outcome);
                }
                Ok(())
            },
        )
        .map_err(|e| failure(py, &e))?;
        task.call_method1("add_done_callback", (on_done,)).map_err(|e| failure(py, &e))?;
        Ok(task.unbind())
    }
}

/// Cancels a scheduled coroutine whose call was dropped (its run aborted or expired).
struct CancelTask(Option<Py<PyAny>>);

impl Drop for CancelTask {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            // Off the runtime's workers: cancelling needs the GIL.
            let cancel = move || {
                gil::attach(|py| {
                    let _ = task.bind(py).call_method0("cancel");
                });
            };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn_blocking(cancel)),
                Err(_) => cancel(),
            }
        }
    }
}
