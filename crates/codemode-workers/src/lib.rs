//! # codemode-workers
//!
//! The threads guest code runs on: the worker pool every engine and the runtime hand their guest
//! work to (this crate's root), and the build-ahead slot ([`ahead`]) where an engine builds its first
//! instance before a process's first run.
//!
//! Layering (docs/src/layout.md): depends on `codemode-core` only; the engines and the runtime
//! depend on it. It knows nothing of the guest protocol (`codemode-bridge`), tools or stores.
//!
//! # Why a pool of its own
//!
//! Guest code must never run on an async executor's threads (contract B1: a busy guest must not stall
//! the gateway), and it needs a known, large native stack: QuickJS's stack limit and wasmtime's
//! `max_wasm_stack` both assume one, and host runtimes do not guarantee it (tokio's blocking threads
//! have 2 MiB). Every `exec` / `wait` call therefore runs its whole drive loop on one of these
//! threads, and engines run guest code inline when they are already on one ([`on_worker`]), so a
//! nested call that completes at once costs no thread switch at all.
//!
//! # Scheduling
//!
//! Jobs wait in one FIFO queue served by as many *running* workers as the machine has cores
//! ([`target`]): more runnable guest threads than cores only adds context switches and cache misses
//! (at 64 concurrent sessions on two cores, one thread per session halved the throughput). A worker
//! that finds the queue empty spins briefly before it parks (only one at a time), so back-to-back
//! jobs from one caller are handed over without waking a sleeping thread — on virtual machines a
//! wake-up is an inter-processor interrupt through the hypervisor, the largest single cost of a
//! trivial cell. The same wake-up on the way back (the worker waking the caller with its answer) is
//! avoided the same way: while a core is idle, one async caller at a time polls for its answer
//! between yields to its executor ([`answer_spin`]) instead of sleeping until woken.
//!
//! A bounded pool must not let slow runs hold up quick ones (contract B1). Two mechanisms keep it live:
//! - a worker that waits for something outside the guest (a nested call's result, the deadline)
//!   does so inside [`blocking`], which hands its place to a queued job at once;
//! - a monitor thread, running only while jobs are queued, starts one more worker whenever the
//!   oldest queued job has waited [`STALL`] (a guest in a tight loop, a slow store round trip, a
//!   tool callback that blocks). Workers beyond [`target`] exit after a short idle time.
//!
//! So a queued job waits at most about [`STALL`] for a worker, however many runs are busy.
#![forbid(unsafe_code)]

pub mod ahead;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// Native stack of a worker thread (reserved address space; pages are committed on use).
pub const WORKER_STACK: usize = 16 << 20;
/// How long a queued job may wait for a worker before the monitor starts another one: the most a
/// busy or slow run delays a new one.
pub const STALL: Duration = Duration::from_millis(2);
/// How often the monitor looks at the queue while jobs wait.
const MONITOR_TICK: Duration = Duration::from_millis(1);
/// The monitor thread exits after this long without queued jobs.
const MONITOR_EXIT: Duration = Duration::from_secs(1);
/// How long a worker that ran out of work spins for the next job before it parks.
const SPIN: Duration = Duration::from_micros(50);
/// A worker's clean-up after a job ([`after_job`]) shorter than this (about a wake-up) makes it a
/// taker of the next job while it finishes (see `State::finishing`).
const QUICK_CLEANUP: Duration = Duration::from_micros(50);
/// A worker within [`target`] exits after this long without work.
const IDLE_EXIT: Duration = Duration::from_secs(60);
/// A worker beyond [`target`] (started because the others were busy) exits after this long idle.
const EXTRA_IDLE_EXIT: Duration = Duration::from_secs(1);

type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    static ON_WORKER: Cell<bool> = const { Cell::new(false) };
    /// Work a job left for after it ends (see [`after_job`]).
    static AFTER_JOB: RefCell<Vec<Job>> = const { RefCell::new(Vec::new()) };
    /// How long this worker's last clean-up took (see `State::finishing`).
    static LAST_CLEANUP: Cell<Duration> = const { Cell::new(Duration::ZERO) };
}

/// Whether the current thread is a worker thread (with a [`WORKER_STACK`] stack).
pub fn on_worker() -> bool {
    ON_WORKER.with(Cell::get)
}

/// How many workers run jobs at once before further jobs queue: the machine's cores (at least 2).
pub fn target() -> usize {
    static TARGET: OnceLock<usize> = OnceLock::new();
    *TARGET.get_or_init(|| std::thread::available_parallelism().map_or(2, usize::from).max(2))
}

struct Queued {
    job: Job,
    at: Instant,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Queued>,
    /// Live worker threads.
    threads: usize,
    /// Workers running a job (outside [`blocking`]), or started and about to take one.
    busy: usize,
    /// Workers parked on [`Pool::work`].
    parked: usize,
    /// Parked workers notified and not yet awake.
    waking: usize,
    /// Workers spinning for the next job (at most one).
    spinning: usize,
    /// Workers that ended a job and are doing its clean-up ([`after_job`]), where their last
    /// clean-up took less than [`QUICK_CLEANUP`]: each looks at the queue next, so it counts as a
    /// taker. Waking a parked worker for a job queued meanwhile cost a wake-up, and the woken worker,
    /// finding the job taken, spun on a core the caller and the running job needed (at one
    /// sequential caller on two cores: three threads on two cores). A slow clean-up (tearing down a
    /// native QuickJS runtime takes ~150 µs) is not counted: the job is better off on another core.
    finishing: usize,
    /// Whether the monitor thread runs, and whether it sleeps until jobs queue.
    monitor: bool,
    monitor_idle: bool,
}

impl State {
    /// Workers that will look at the queue without being asked: spinning, or notified.
    fn lookers(&self) -> usize {
        self.spinning + self.waking
    }

    /// Workers a queued job can count on: [`State::lookers`] plus those finishing a quick clean-up
    /// (see [`State::finishing`]).
    fn takers(&self) -> usize {
        self.lookers() + self.finishing
    }

    /// Publishes how many cores workers occupy (busy or spinning) for callers deciding whether to
    /// poll for an answer ([`answer_spin`]), who read it without the lock.
    fn publish(&self) {
        pool().occupied.store(self.busy + self.spinning, Ordering::Relaxed);
    }

    /// One more busy worker.
    fn more_busy(&mut self) {
        self.busy += 1;
        self.publish();
    }

    /// One busy worker fewer.
    fn less_busy(&mut self) {
        self.busy = self.busy.saturating_sub(1);
        self.publish();
    }
}

struct Pool {
    state: Mutex<State>,
    work: Condvar,
    monitor: Condvar,
    /// The queue's length, read by a spinning worker without the lock.
    queued: AtomicUsize,
    /// [`State::busy`] plus [`State::spinning`]: the cores workers occupy, read by callers deciding
    /// whether to poll for an answer ([`answer_spin`]).
    occupied: AtomicUsize,
    /// Whether a caller holds the [`AnswerSpin`] permit.
    caller_spinning: AtomicBool,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        state: Mutex::new(State::default()),
        work: Condvar::new(),
        monitor: Condvar::new(),
        queued: AtomicUsize::new(0),
        occupied: AtomicUsize::new(0),
        caller_spinning: AtomicBool::new(false),
    })
}

fn lock() -> MutexGuard<'static, State> {
    pool().state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts a worker thread, counted busy (it takes a job at once).
fn start_worker(s: &mut State) -> std::io::Result<()> {
    std::thread::Builder::new().name(THREAD_NAME.into()).stack_size(WORKER_STACK).spawn(worker)?;
    s.threads += 1;
    s.more_busy();
    Ok(())
}

/// Notifies a parked worker that is not already being woken; false when there is none.
fn wake_parked(s: &mut State) -> bool {
    if s.parked <= s.waking {
        return false;
    }
    s.waking += 1;
    pool().work.notify_one();
    true
}

/// Makes sure the queued jobs get a worker: a spinning or notified one, else a parked one, else a
/// new one while fewer than [`target`] are busy, else (all busy) the monitor's attention.
fn dispatch(s: &mut State) -> std::io::Result<()> {
    if s.queue.len() <= s.takers() {
        return Ok(());
    }
    if wake_parked(s) {
        return Ok(());
    }
    if s.busy < target() || s.threads == 0 {
        return start_worker(s);
    }
    if !s.monitor {
        std::thread::Builder::new().name("codemode-guest-monitor".into()).spawn(monitor)?;
        s.monitor = true;
    } else if s.monitor_idle {
        s.monitor_idle = false;
        pool().monitor.notify_one();
    }
    Ok(())
}

fn worker() {
    ON_WORKER.with(|w| w.set(true));
    let p = pool();
    let mut s = lock();
    loop {
        if let Some(next) = s.queue.pop_front() {
            p.queued.store(s.queue.len(), Ordering::Release);
            drop(s);
            if let Err(panic) = catch_unwind(AssertUnwindSafe(next.job)) {
                tracing::warn!(panic = %panic_message(panic), "a guest worker job panicked");
            }
            if AFTER_JOB.with(|q| q.borrow().is_empty()) {
                s = lock();
            } else {
                let quick = LAST_CLEANUP.with(Cell::get) < QUICK_CLEANUP;
                if quick {
                    lock().finishing += 1;
                }
                let began = Instant::now();
                run_after_job();
                LAST_CLEANUP.with(|c| c.set(began.elapsed()));
                s = lock();
                if quick {
                    s.finishing -= 1;
                }
            }
            continue;
        }
        s.less_busy();
        if s.spinning == 0 {
            s.spinning += 1;
            s.publish();
            drop(s);
            let until = Instant::now() + SPIN;
            let mut spins = 0u32;
            while p.queued.load(Ordering::Acquire) == 0 {
                std::hint::spin_loop();
                spins = spins.wrapping_add(1);
                // The clock is read every 64 rounds only: it is a system call on some VMs.
                if spins.is_multiple_of(64) && Instant::now() >= until {
                    break;
                }
            }
            s = lock();
            s.spinning -= 1;
            s.publish();
            if !s.queue.is_empty() {
                s.more_busy();
                continue;
            }
        }
        let idle_exit = if s.threads > target() { EXTRA_IDLE_EXIT } else { IDLE_EXIT };
        s.parked += 1;
        let (guard, wait) = p.work.wait_timeout(s, idle_exit).unwrap_or_else(|e| e.into_inner());
        s = guard;
        s.parked -= 1;
        s.waking = s.waking.saturating_sub(1);
        if s.queue.is_empty() && wait.timed_out() {
            s.threads -= 1;
            return;
        }
        s.more_busy();
    }
}

/// Starts a worker whenever the oldest queued job has waited [`STALL`]; runs while jobs queue.
fn monitor() {
    let p = pool();
    let mut s = lock();
    loop {
        match s.queue.front().map(|q| q.at) {
            None => {
                s.monitor_idle = true;
                let (guard, wait) = p.monitor.wait_timeout(s, MONITOR_EXIT).unwrap_or_else(|e| e.into_inner());
                s = guard;
                if s.queue.is_empty() && wait.timed_out() {
                    s.monitor = false;
                    s.monitor_idle = false;
                    return;
                }
                s.monitor_idle = false;
            }
            Some(at) => {
                // Finishing workers are not counted here (`lookers`, not `takers`): should a
                // clean-up be slow, the queued job still gets a worker after STALL.
                if at.elapsed() >= STALL && s.queue.len() > s.lookers() && !monitor_paused() {
                    // Wake a parked worker if there is one, else start one more (beyond `target`).
                    if !wake_parked(&mut s)
                        && let Err(e) = start_worker(&mut s)
                    {
                        tracing::warn!(error = %e, "cannot start another guest worker");
                    }
                }
                let (guard, _) = p.monitor.wait_timeout(s, MONITOR_TICK).unwrap_or_else(|e| e.into_inner());
                s = guard;
            }
        }
    }
}

#[cfg(test)]
static MONITOR_PAUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the monitor's rescues are switched off (tests of [`blocking`] alone).
fn monitor_paused() -> bool {
    #[cfg(test)]
    return MONITOR_PAUSED.load(Ordering::Acquire);
    #[cfg(not(test))]
    false
}

/// Runs `f`, which waits for something outside the guest (a nested call's result, a timer), with
/// this worker's place handed to queued jobs meanwhile. Off a worker it just runs `f`.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    if !on_worker() {
        return f();
    }
    {
        let mut s = lock();
        s.less_busy();
        if let Err(e) = dispatch(&mut s) {
            tracing::warn!(error = %e, "cannot start another guest worker");
        }
    }
    struct Back;
    impl Drop for Back {
        fn drop(&mut self) {
            let mut s = lock();
            s.more_busy();
        }
    }
    let _back = Back;
    f()
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

/// Queues `job` for a worker thread and returns at once.
pub fn spawn(job: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let mut s = lock();
    s.queue.push_back(Queued { job: Box::new(job), at: Instant::now() });
    pool().queued.store(s.queue.len(), Ordering::Release);
    if let Err(e) = dispatch(&mut s) {
        if s.threads == 0 {
            // Nobody will ever run it.
            s.queue.pop_back();
            pool().queued.store(s.queue.len(), Ordering::Release);
            return Err(e);
        }
        tracing::warn!(error = %e, "cannot start another guest worker; the job waits for a busy one");
    }
    Ok(())
}

/// How long a caller may poll for its job's answer ([`answer_spin`]) before it sleeps until woken.
/// A trivial cell's job takes ~35 µs; longer jobs are not worth the burnt cycles.
pub const ANSWER_SPIN: Duration = Duration::from_micros(250);

/// A permit for one caller to poll for its job's answer instead of sleeping until the worker wakes
/// it: on virtual machines that wake-up (an inter-processor interrupt through the hypervisor) is
/// the largest single cost of a trivial cell. Polling burns the cycles of a core nobody else
/// wants, so the permit is given only while one is idle — fewer workers busy or spinning than
/// [`target`] — and to one caller at a time; [`AnswerSpin::keep_going`] ends it when the cores fill
/// up or after [`ANSWER_SPIN`]. The caller must poll cooperatively (an async task yields to its
/// executor between looks), never block a thread.
#[derive(Debug)]
pub struct AnswerSpin {
    until: Instant,
    /// Since when every core has looked busy (see [`AnswerSpin::keep_going`]).
    full_since: Option<Instant>,
}

/// How long every core must look busy before a polling caller gives up. A parked worker woken for a
/// job that another worker took counts as busy for the moment it takes to find the queue empty:
/// that must not end the poll.
const FULL_GRACE: Duration = Duration::from_micros(20);

/// Whether a core is idle by the pool's count: fewer workers busy or spinning than [`target`] (the
/// asking worker counts as busy). A guest worker waiting a moment for a host call's answer spins
/// only while this holds (`codemode`'s inline wait), so it never takes a core another worker wants.
pub fn core_idle() -> bool {
    pool().occupied.load(Ordering::Relaxed) < target()
}

/// The [`AnswerSpin`] permit, if a core is idle and no other caller holds it.
pub fn answer_spin() -> Option<AnswerSpin> {
    if !core_idle() {
        return None;
    }
    pool()
        .caller_spinning
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .ok()
        .map(|_| AnswerSpin { until: Instant::now() + ANSWER_SPIN, full_since: None })
}

impl AnswerSpin {
    /// Whether to look once more: within [`ANSWER_SPIN`], and a core idle (or every core busy for
    /// less than `FULL_GRACE`).
    pub fn keep_going(&mut self) -> bool {
        let now = Instant::now();
        if now >= self.until {
            return false;
        }
        if core_idle() {
            self.full_since = None;
            return true;
        }
        let since = *self.full_since.get_or_insert(now);
        now.duration_since(since) < FULL_GRACE
    }
}

impl Drop for AnswerSpin {
    fn drop(&mut self) {
        pool().caller_spinning.store(false, Ordering::Release);
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

/// Starts a worker thread now if none runs yet, so that the first job (a process's first cell)
/// finds one waiting instead of paying for a thread's start: for a process that will run a cell
/// soon. The worker waits for work like any idle one, and exits after a minute without it.
pub fn start_one() -> std::io::Result<()> {
    if lock().threads > 0 {
        return Ok(());
    }
    spawn(|| {})
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
mod tests;
