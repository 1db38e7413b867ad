//! Worker threads on which guest code runs.
//!
//! Guest code must never run on an async executor's threads (SPEC B1: a busy guest must not stall
//! the gateway), and it needs a known, large native stack: QuickJS's stack limit and wasmtime's
//! `max_wasm_stack` both assume one, and host runtimes do not guarantee it (tokio's blocking threads
//! have 2 MiB). Every `exec` / `wait` call therefore runs its whole drive loop on one of these
//! threads, and engines run guest code inline when they are already on one ([`on_worker`]), so a
//! nested call that completes at once costs no thread switch at all.
//!
//! Idle threads are kept for reuse; a busy pool grows, so one slow guest never delays another run.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Native stack of a worker thread (reserved address space; pages are committed on use).
pub const WORKER_STACK: usize = 16 << 20;
/// Idle workers kept for reuse.
const MAX_IDLE: usize = 16;
/// An idle worker exits after this long without work.
const IDLE_EXIT: Duration = Duration::from_secs(60);

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static ON_WORKER: Cell<bool> = const { Cell::new(false) };
    /// Work a job left for after it ends (see [`after_job`]).
    static AFTER_JOB: std::cell::RefCell<Vec<Job>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether the current thread is a worker thread (with a [`WORKER_STACK`] stack).
pub fn on_worker() -> bool {
    ON_WORKER.with(Cell::get)
}

fn idle() -> &'static Mutex<Vec<mpsc::Sender<Job>>> {
    static IDLE: OnceLock<Mutex<Vec<mpsc::Sender<Job>>>> = OnceLock::new();
    IDLE.get_or_init(|| Mutex::new(Vec::new()))
}

fn worker(me: mpsc::Sender<Job>, jobs: mpsc::Receiver<Job>) {
    ON_WORKER.with(|w| w.set(true));
    while let Ok(job) = jobs.recv_timeout(IDLE_EXIT) {
        job();
        run_after_job();
        let mut idle = idle().lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() >= MAX_IDLE {
            return;
        }
        idle.push(me.clone());
    }
}

/// Runs the work queued by [`after_job`] (each piece guarded: a panic in one does not skip the rest
/// or end the worker).
fn run_after_job() {
    loop {
        let next = AFTER_JOB.with(|q| q.borrow_mut().pop());
        let Some(work) = next else { return };
        if let Err(p) = catch_unwind(AssertUnwindSafe(work)) {
            tracing::warn!(panic = %panic_message(p), "deferred work on a guest worker panicked");
        }
    }
}

/// Runs `work` after the current job, on this same worker thread, once the job has returned (and so
/// has sent its answer): for clean-up nobody waits for, such as tearing down a finished VM. Off a
/// worker, `work` goes to a worker of its own. Doing it here rather than on another worker saves a
/// thread wake-up per call and keeps the clean-up on the core whose caches hold that VM.
pub fn after_job(work: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    if on_worker() {
        AFTER_JOB.with(|q| q.borrow_mut().push(Box::new(work)));
        Ok(())
    } else {
        spawn(work)
    }
}

/// The name of every guest worker thread (hosts may check it: a callback running there runs
/// while its guest waits for it, off the async runtime's threads).
pub const THREAD_NAME: &str = "codemode-guest";

/// Runs `job` on a worker thread and returns at once.
pub fn spawn(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let mut job: Job = Box::new(job);
    loop {
        let candidate = idle().lock().unwrap_or_else(|p| p.into_inner()).pop();
        match candidate {
            Some(w) => match w.send(job) {
                Ok(()) => return Ok(()),
                // That worker exited while idle; try another.
                Err(mpsc::SendError(back)) => job = back,
            },
            None => {
                let (tx, rx) = mpsc::channel::<Job>();
                let me = tx.clone();
                std::thread::Builder::new()
                    .name(THREAD_NAME.into())
                    .stack_size(WORKER_STACK)
                    .spawn(move || worker(me, rx))?;
                return tx.send(job).map_err(|_| std::io::Error::other("worker thread gone"));
            }
        }
    }
}

/// Why [`run`] produced no result.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// No worker thread could be started.
    #[error("cannot start a guest worker thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The job panicked (the panic was caught; the worker survives).
    #[error("guest worker panicked: {0}")]
    Panicked(String),
    /// The worker went away without an answer.
    #[error("guest worker thread stopped")]
    Stopped,
}

impl From<WorkerError> for codemode_core::engine::EngineError {
    fn from(e: WorkerError) -> Self {
        codemode_core::engine::EngineError::Internal(e.to_string())
    }
}

/// Runs `f` on a worker thread and waits for its result: inline when already on one.
pub fn run<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Result<R, WorkerError> {
    if on_worker() {
        return catch_unwind(AssertUnwindSafe(f)).map_err(|p| WorkerError::Panicked(panic_message(p)));
    }
    let (tx, rx) = mpsc::sync_channel(1);
    spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    })
    .map_err(WorkerError::Spawn)?;
    match rx.recv() {
        Ok(r) => r.map_err(|p| WorkerError::Panicked(panic_message(p))),
        Err(_) => Err(WorkerError::Stopped),
    }
}

/// The message of a caught panic.
pub fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "guest worker panicked".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_jobs_inline_on_workers_and_survives_panics() {
        assert!(!on_worker());
        assert!(matches!(run(on_worker), Ok(true)));
        assert!(matches!(run(|| run(on_worker)), Ok(Ok(true))), "nested runs stay on the worker");
        let e = run(|| -> u8 { panic!("boom") }).unwrap_err();
        assert!(matches!(&e, WorkerError::Panicked(m) if m.contains("boom")), "{e}");
        let handles: Vec<_> = (0..8).map(|i| std::thread::spawn(move || run(move || i * 2))).collect();
        let sum: i32 = handles.into_iter().map(|h| h.join().unwrap().unwrap()).sum();
        assert_eq!(sum, 56);
    }

    #[test]
    fn work_after_a_job_runs_once_it_has_answered_on_the_same_thread() {
        use std::sync::mpsc::channel;
        let (tx, rx) = channel::<(&'static str, std::thread::ThreadId)>();
        let (tx2, tx3) = (tx.clone(), tx.clone());
        let answer = run(move || {
            after_job(move || {
                let _ = tx2.send(("after", std::thread::current().id()));
            })
            .unwrap();
            // Deferred work that panics neither ends the worker nor skips the rest.
            after_job(|| panic!("deferred boom")).unwrap();
            let _ = tx.send(("job", std::thread::current().id()));
            7
        })
        .unwrap();
        assert_eq!(answer, 7);
        let (first, job_thread) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let (second, after_thread) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!((first, second), ("job", "after"), "deferred work runs after the job");
        assert_eq!(job_thread, after_thread, "on the worker that ran the job");
        // Off a worker, the work gets a worker of its own.
        after_job(move || {
            let _ = tx3.send(("off", std::thread::current().id()));
        })
        .unwrap();
        let (tag, thread) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(tag, "off");
        assert_ne!(thread, std::thread::current().id());
    }
}
