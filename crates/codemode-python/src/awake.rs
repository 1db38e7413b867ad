//! The event loop's thread kept awake between a cell's quick `async def` calls.
//!
//! The book: "Python and Node", "Tool calls on the event loop" (docs/src/packages.md).
//!
//! An `async def` tool runs on the asyncio loop of the `exec` / `wait` that started its run. Handed
//! over with `call_soon_threadsafe`, each call wakes the loop's thread from its selector (a write
//! to the loop's self-pipe, and on a virtual machine an inter-processor interrupt through the
//! hypervisor), and the answer wakes the guest worker back: two thread wake-ups per call, more than
//! a quick tool's own work. So after the loop's thread answers a call, it looks for the next one
//! for a moment ([`Mailbox::take`], the GIL released): while it looks, a call of a tool on that
//! loop is handed to it directly ([`Mailbox::offer`]), with no wake-up of either thread (the guest
//! worker spins for a quick answer, see `codemode::CodeModeBuilder::inline_wait`).
//!
//! Each call still runs as its own asyncio task, in a copy of the `exec` / `wait` caller's
//! `contextvars` context. On Python 3.12 and later the task starts eagerly (`eager_start`): a tool
//! that returns without awaiting anything finishes inside the hand-over, and the loop's thread
//! answers it and looks for the next call without a turn of the loop. Before 3.12, and for a tool
//! that awaits, the task finishes on a later turn and its done-callback answers and looks again.
//!
//! What bounds it (the loop is the user's, and it must keep turning):
//! - [`Mailbox::take`] waits at most [`KEEP_AWAKE`], only while a core is idle, and stops as soon as
//!   anything else needs the loop (a run's answer resolved onto it, an awaitable scheduled on it:
//!   [`crate::calls::loop_wanted`]);
//! - one stretch of calls handed over this way lasts at most [`AWAKE_BUDGET`]; then the loop turns
//!   and the next call wakes it the usual way;
//! - while the loop's thread runs a call it is not looking: a call made meanwhile (a fan-out, or a
//!   slow tool's neighbour) goes the usual way, so no call waits behind another.

use crate::calls::Callback;
use codemode_embed::HostFailure;
use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyDict, PyTuple};
use pyo3_async_runtimes::TaskLocals;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long the loop's thread looks for the next call after answering one: longer than a guest's
/// turn between two quick calls (the next call's gates and bridge), short enough that an idle
/// cell costs the user's loop next to nothing.
pub const KEEP_AWAKE: Duration = Duration::from_micros(50);

/// The longest stretch of calls handed to the loop's thread directly before the loop turns again
/// (timers, I/O, other callbacks): what bounds how long a cell calling quick tools back to back
/// can hold the user's event loop.
pub const AWAKE_BUDGET: Duration = Duration::from_millis(1);

/// Where a call's answer goes.
pub type Reply = oneshot::Sender<Result<Value, HostFailure>>;

/// The asyncio task of a call, once started (with its loop): what cancelling the call cancels.
#[derive(Default)]
pub struct TaskCell(Mutex<Option<(Py<PyAny>, Py<PyAny>)>>);

impl TaskCell {
    fn slot(&self) -> MutexGuard<'_, Option<(Py<PyAny>, Py<PyAny>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The started task, if any (then taken: cancelled at most once).
    pub fn take(&self) -> Option<(Py<PyAny>, Py<PyAny>)> {
        self.slot().take()
    }
}

/// One call of an `async def` tool, to run on its loop.
pub struct Job {
    pub callback: Callback,
    pub args: Vec<Value>,
    pub locals: TaskLocals,
    /// The loop's identity (its object's address while `locals` holds it).
    pub loop_id: usize,
    pub reply: Reply,
    pub task: Arc<TaskCell>,
}

#[derive(Default)]
struct State {
    /// The loops whose thread looks for calls ([`Mailbox::expect`], [`Mailbox::take`]), each with
    /// [`crate::calls::loop_wanted`] as it was when the thread began looking: anything needing the
    /// loop since then ends the look.
    looking: Vec<(usize, usize)>,
    jobs: VecDeque<Job>,
}

/// The hand-over point between guest workers and the loops' threads (one per process).
#[derive(Default)]
pub struct Mailbox {
    state: Mutex<State>,
    /// Whether `state.jobs` may hold a call: what a looking thread polls, so that it does not take
    /// the lock a guest worker needs to hand a call over.
    queued: AtomicBool,
}

/// The process's mailbox.
pub fn mailbox() -> &'static Mailbox {
    static MAILBOX: std::sync::OnceLock<Mailbox> = std::sync::OnceLock::new();
    MAILBOX.get_or_init(Mailbox::default)
}

impl Mailbox {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `job` to its loop's thread if that thread is looking; otherwise gives it back (the
    /// caller schedules it with `call_soon_threadsafe`).
    pub fn offer(&self, job: Job) -> Result<(), Job> {
        let mut state = self.state();
        if !state.looking.iter().any(|(l, _)| *l == job.loop_id) {
            return Err(job);
        }
        state.jobs.push_back(job);
        self.queued.store(true, Ordering::Release);
        Ok(())
    }

    /// Marks the loop `loop_id`'s thread as looking from now on (before it answers a call, so that
    /// the next call, which may come the moment the answer is sent, is queued for it).
    pub fn expect(&self, loop_id: usize) {
        let mut state = self.state();
        if !state.looking.iter().any(|(l, _)| *l == loop_id) {
            state.looking.push((loop_id, crate::calls::loop_wanted()));
        }
    }

    /// Stops looking for the loop `loop_id`; the calls queued for it meanwhile, to run otherwise.
    pub fn leave(&self, loop_id: usize) -> Vec<Job> {
        let mut state = self.state();
        state.looking.retain(|(l, _)| *l != loop_id);
        self.drain(&mut state, loop_id)
    }

    fn drain(&self, state: &mut State, loop_id: usize) -> Vec<Job> {
        let (mine, others): (VecDeque<Job>, VecDeque<Job>) =
            std::mem::take(&mut state.jobs).into_iter().partition(|j| j.loop_id == loop_id);
        state.jobs = others;
        self.queued.store(!state.jobs.is_empty(), Ordering::Release);
        mine.into()
    }

    /// The calls for the loop `loop_id` (all those queued: a fan-out's calls start together),
    /// looked for up to [`KEEP_AWAKE`] while a core is idle and nothing else needs the loop. Empty
    /// when none came. Either way the thread stops looking, and no call for this loop is left
    /// queued (a later offer is refused under the same lock).
    pub fn take(&self, loop_id: usize) -> Vec<Job> {
        let until = Instant::now() + KEEP_AWAKE;
        let mut state = self.state();
        let wanted = match state.looking.iter().find(|(l, _)| *l == loop_id) {
            Some((_, wanted)) => *wanted,
            None => {
                let wanted = crate::calls::loop_wanted();
                state.looking.push((loop_id, wanted));
                wanted
            }
        };
        loop {
            let stop = Instant::now() >= until || !codemode_embed::core_idle() || crate::calls::loop_wanted() != wanted;
            if stop || state.jobs.iter().any(|j| j.loop_id == loop_id) {
                state.looking.retain(|(l, _)| *l != loop_id);
                return self.drain(&mut state, loop_id);
            }
            drop(state);
            // Look without the lock; at the clock, the cores and the loop's callers now and then.
            let mut spins = 0u32;
            while !self.queued.load(Ordering::Acquire) && spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            }
            state = self.state();
        }
    }
}

/// How tasks are started on this interpreter.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// 3.12 and later: `asyncio.Task(coro, loop=, context=, eager_start=True)` when the loop has no
    /// task factory of its own.
    Eager,
    /// 3.11: `loop.create_task(coro, context=)`.
    WithContext,
    /// 3.10: `context.run(loop.create_task, coro)`.
    InContext,
}

/// This interpreter's [`Start`], worked out once (pyo3 parses the version string at each ask).
fn start_kind(py: Python<'_>) -> Start {
    static KIND: std::sync::OnceLock<Start> = std::sync::OnceLock::new();
    *KIND.get_or_init(|| {
        let v = py.version_info();
        if v >= (3, 12) {
            Start::Eager
        } else if v >= (3, 11) {
            Start::WithContext
        } else {
            Start::InContext
        }
    })
}

static TASK_CLASS: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();
static COPY_CONTEXT: pyo3::sync::PyOnceLock<Py<PyAny>> = pyo3::sync::PyOnceLock::new();

/// Creates the call's coroutine and starts its task on the loop (this thread), in a copy of the
/// caller's context.
fn start_task<'py>(py: Python<'py>, job: &Job) -> Result<Bound<'py, PyAny>, HostFailure> {
    let coro = job.callback.invoke(py, &job.args)?;
    let start = || -> PyResult<Bound<'py, PyAny>> {
        let event_loop = job.locals.event_loop(py);
        let ctx = job.locals.context(py);
        let ctx = if ctx.is_none() {
            COPY_CONTEXT.import(py, "contextvars", "copy_context")?.call0()?
        } else {
            ctx.call_method0("copy")?
        };
        match start_kind(py) {
            Start::Eager if event_loop.call_method0("get_task_factory")?.is_none() => {
                let kwargs = PyDict::new(py);
                kwargs.set_item("loop", &event_loop)?;
                kwargs.set_item("context", &ctx)?;
                kwargs.set_item("eager_start", true)?;
                TASK_CLASS.import(py, "asyncio", "Task")?.call((&coro,), Some(&kwargs))
            }
            Start::Eager | Start::WithContext => {
                let kwargs = PyDict::new(py);
                kwargs.set_item("context", &ctx)?;
                event_loop.call_method("create_task", (&coro,), Some(&kwargs))
            }
            Start::InContext => ctx.call_method1("run", (event_loop.getattr("create_task")?, &coro)),
        }
    };
    start().map_err(|e| {
        // A coroutine never started would warn "never awaited" when collected.
        let _ = coro.call_method0("close");
        crate::calls::failure(py, &e)
    })
}

/// A finished task's outcome as JSON (converted on this thread, the loop's).
fn outcome(py: Python<'_>, callback: &Callback, task: &Bound<'_, PyAny>) -> Result<Value, HostFailure> {
    let what = &callback.what;
    let cancelled = task.call_method0("cancelled").and_then(|c| c.is_truthy()).unwrap_or(false);
    if cancelled {
        return Err(HostFailure::new("CancelledError", format!("{what} was cancelled")));
    }
    match task.call_method0("result") {
        Ok(v) => callback.json(py, &v),
        Err(e) => Err(crate::calls::failure(py, &e)),
    }
}

/// Runs `jobs` and then, while the budget from `started` lasts, the calls handed over next, on
/// this thread (their loop's, with the GIL). Returns when no call came, the budget is spent, or a
/// call's task did not finish at once (its done-callback answers it and looks on).
pub fn pump(py: Python<'_>, mut jobs: Vec<Job>, started: Instant) {
    while let Some(loop_id) = jobs.first().map(|j| j.loop_id) {
        let mut all_done = true;
        for job in jobs {
            all_done &= run(py, job, started);
        }
        if !all_done {
            // The thread goes back to the loop (a task is to finish on a later turn).
            stop_looking(py, loop_id);
            return;
        }
        jobs = look(py, loop_id, started);
    }
}

/// Sends a call's answer, looking for the next call from this moment (see [`Mailbox::expect`]).
fn answer(reply: Reply, outcome: Result<Value, HostFailure>, loop_id: usize) {
    mailbox().expect(loop_id);
    let _ = reply.send(outcome);
}

/// The next calls handed over (none once the budget is spent: the calls queued meanwhile are
/// scheduled to run after the loop turns).
fn look(py: Python<'_>, loop_id: usize, started: Instant) -> Vec<Job> {
    if started.elapsed() >= AWAKE_BUDGET {
        stop_looking(py, loop_id);
        return Vec::new();
    }
    py.detach(|| mailbox().take(loop_id))
}

/// Stops looking for calls on this loop; those handed over meanwhile run after the loop turns.
fn stop_looking(py: Python<'_>, loop_id: usize) {
    for job in mailbox().leave(loop_id) {
        // Only a closed loop refuses (the job is dropped: its caller sees the call cancelled).
        if let Err(f) = schedule(py, job) {
            tracing::debug!(error = %f.message, "cannot reschedule an async tool's call");
        }
    }
}

/// Starts `job`'s task: answers it and returns `true` if it finished at once; otherwise its
/// done-callback answers it (and goes on pumping) and this returns `false`.
fn run(py: Python<'_>, job: Job, started: Instant) -> bool {
    let loop_id = job.loop_id;
    // A call dropped before it started (its run aborted) is not started.
    if job.reply.is_closed() {
        return true;
    }
    let task = match start_task(py, &job) {
        Ok(task) => task,
        Err(f) => {
            answer(job.reply, Err(f), loop_id);
            return true;
        }
    };
    if task.call_method0("done").and_then(|d| d.is_truthy()).unwrap_or(false) {
        let outcome = outcome(py, &job.callback, &task);
        answer(job.reply, outcome, loop_id);
        return true;
    }
    // Cancellable by the caller from now on; a caller that already dropped the call found no task
    // to cancel, so it is cancelled here (see `TaskCell`).
    *job.task.slot() = Some((task.clone().unbind(), job.locals.event_loop(py).unbind()));
    if job.reply.is_closed() {
        let _ = task.call_method0("cancel");
    }
    let Job { callback, reply, .. } = job;
    let reply = Mutex::new(Some(reply));
    let on_done = PyCFunction::new_closure(
        py,
        None,
        None,
        move |a: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            let py = a.py();
            let outcome = outcome(py, &callback, &a.get_item(0)?);
            if let Some(reply) = reply.lock().unwrap_or_else(|p| p.into_inner()).take() {
                answer(reply, outcome, loop_id);
                pump(py, look(py, loop_id, started), started);
            }
            Ok(())
        },
    );
    let added = on_done.and_then(|f| task.call_method1("add_done_callback", (f,)));
    if let Err(e) = added {
        // Not expected of an asyncio task; the call fails (its reply is dropped) rather than wait.
        let failure = crate::calls::failure(py, &e);
        let _ = task.call_method0("cancel");
        tracing::warn!(error = %failure.message, "cannot watch an async tool's task");
    }
    false
}

/// Schedules `job` on its loop (`call_soon_threadsafe`), from any thread holding the GIL.
pub fn schedule(py: Python<'_>, job: Job) -> Result<(), HostFailure> {
    let event_loop = job.locals.event_loop(py);
    let what = job.callback.what.clone();
    let job = Mutex::new(Some(job));
    let first = PyCFunction::new_closure(
        py,
        None,
        None,
        move |a: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| -> PyResult<()> {
            if let Some(job) = job.lock().unwrap_or_else(|p| p.into_inner()).take() {
                pump(a.py(), vec![job], Instant::now());
            }
            Ok(())
        },
    )
    .map_err(|e| crate::calls::failure(py, &e))?;
    event_loop.call_method1("call_soon_threadsafe", (first,)).map(drop).map_err(|e| {
        let f = crate::calls::failure(py, &e);
        HostFailure::new(f.kind, format!("{what} cannot run on its event loop: {}", f.message))
    })
}
