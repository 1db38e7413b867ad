//! The lane: one thread that runs plain `def` tools called from guest workers, awake for a moment
//! after each call so that the next one finds it running.
//!
//! A nested call into a plain `def` used to go to tokio's blocking pool: a parked thread woken for
//! each call, and the guest worker woken again for its result. On a virtual machine each wake-up
//! of a sleeping thread is an inter-processor interrupt through the hypervisor, ~25 µs here — most
//! of a call's cost. The lane spins for [`LANE_SPIN`] after each job before it parks, and the guest
//! worker spins for the result before it parks (`codemode::CodeModeBuilder::inline_wait`), so a
//! cell's calls in sequence cross threads with no wake-up at all.
//!
//! The lane takes one job at a time, and only while it is idle: a call made while it runs another
//! (a slow tool, or a second run's call) goes to the blocking pool as before, so no call ever waits
//! behind another. The tool still runs off the guest worker: a slow one does not stop its run from
//! suspending (the guest stops waiting after its inline wait and the run suspends at its
//! deadline), and no guest code runs on a thread that holds the GIL.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The lane thread's name (it keeps its Python thread state between calls, as guest workers do).
pub const THREAD_NAME: &str = "codemode-python-lane";

/// How long the lane looks for the next job after one before it parks. Burns at most this much
/// of a core after a cell's last call; a cell's next call within it costs no wake-up.
pub const LANE_SPIN: Duration = Duration::from_micros(100);

/// A job: one call of a Python function. It returns the delivery of its outcome, which the lane
/// runs after it has marked itself idle: the caller's next call, made as soon as it has the
/// answer, must find the lane free.
pub type Job = Box<dyn FnOnce() -> Delivery + Send>;

/// Sends a job's outcome to its caller.
pub type Delivery = Box<dyn FnOnce() + Send>;

/// The lane looks for jobs without sleeping.
const SPINNING: u8 = 0;
/// The lane sleeps on the condition variable until a job is placed.
const PARKED: u8 = 1;
/// A job is placed or running: the lane takes no other.
const CLAIMED: u8 = 2;

struct Lane {
    state: AtomicU8,
    /// Whether `job` holds a job, read by the spinning lane without the lock.
    placed: AtomicBool,
    job: Mutex<Option<Job>>,
    wake: Condvar,
}

fn lane() -> Option<&'static Lane> {
    static LANE: OnceLock<Option<&'static Lane>> = OnceLock::new();
    *LANE.get_or_init(|| {
        let lane: &'static Lane = Box::leak(Box::new(Lane {
            state: AtomicU8::new(SPINNING),
            placed: AtomicBool::new(false),
            job: Mutex::new(None),
            wake: Condvar::new(),
        }));
        match std::thread::Builder::new().name(THREAD_NAME.into()).spawn(move || run(lane)) {
            Ok(_) => Some(lane),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the Python lane thread: plain tools use the blocking pool");
                None
            }
        }
    })
}

/// Hands `job` to the lane if it is idle; gives it back if the lane is busy (or could not start).
pub fn try_run(job: Job) -> Result<(), Job> {
    let Some(lane) = lane() else { return Err(job) };
    let was = match lane.state.compare_exchange(SPINNING, CLAIMED, Ordering::AcqRel, Ordering::Acquire) {
        Ok(was) => was,
        Err(PARKED) => match lane.state.compare_exchange(PARKED, CLAIMED, Ordering::AcqRel, Ordering::Acquire) {
            Ok(was) => was,
            Err(_) => return Err(job),
        },
        Err(_) => return Err(job),
    };
    let mut slot = lane.job.lock().unwrap_or_else(|p| p.into_inner());
    *slot = Some(job);
    lane.placed.store(true, Ordering::Release);
    drop(slot);
    if was == PARKED {
        lane.wake.notify_one();
    }
    Ok(())
}

fn take(lane: &Lane) -> Option<Job> {
    let job = lane.job.lock().unwrap_or_else(|p| p.into_inner()).take();
    if job.is_some() {
        lane.placed.store(false, Ordering::Release);
    }
    job
}

/// The lane thread: runs each placed job, spins for the next, parks when none comes.
fn run(lane: &'static Lane) {
    let mut until = Instant::now() + LANE_SPIN;
    loop {
        if lane.placed.load(Ordering::Acquire)
            && let Some(job) = take(lane)
        {
            // A panicking job drops its sender: its call fails as "did not run"; the lane goes on.
            let delivery = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            lane.state.store(SPINNING, Ordering::Release);
            if let Ok(deliver) = delivery {
                deliver();
            }
            until = Instant::now() + LANE_SPIN;
            continue;
        }
        if Instant::now() < until {
            std::hint::spin_loop();
            continue;
        }
        // Park, unless a job was claimed meanwhile.
        if lane.state.compare_exchange(SPINNING, PARKED, Ordering::AcqRel, Ordering::Acquire).is_err() {
            continue;
        }
        let mut slot = lane.job.lock().unwrap_or_else(|p| p.into_inner());
        while slot.is_none() {
            slot = lane.wake.wait(slot).unwrap_or_else(|p| p.into_inner());
        }
        drop(slot);
    }
}
