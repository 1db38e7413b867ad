//! Node's main thread kept awake between a cell's quick calls.
//!
//! The book: "Python and Node", "Tool calls on the main thread" (docs/src/packages.md).
//!
//! A JavaScript tool runs on Node's main thread. Reached through a threadsafe function, each call
//! wakes that thread from its event loop's `epoll_wait`: a kernel round trip and, on a virtual
//! machine, an inter-processor interrupt through the hypervisor — more than the tool's own work
//! when it is quick. So after the main thread answers a call that way, the package's JavaScript
//! (`keepAwake` in `awake.js`) asks [`Mailbox::take`] for the next one, in a loop: while it does,
//! [`Mailbox::offer`] hands calls to it directly, and it answers each with [`Mailbox::answer`].
//!
//! What bounds it (the main thread is the user's, and its event loop must keep turning):
//! - `take` waits for a call at most [`KEEP_AWAKE`], and only while a core is idle
//!   ([`codemode_embed::core_idle`]): a cell that calls its tools back to back keeps the thread,
//!   one that computes between calls, or a busy machine, does not;
//! - the JavaScript loop stops asking to stay awake after `AWAKE_BUDGET_MS` (awake.js) and lets
//!   the event loop turn (timers, I/O, other callbacks) before the next call wakes it again;
//! - a call offered while the thread is not in the loop goes the usual way (the threadsafe
//!   function); [`Mailbox::rest`] fails whatever is left when the loop ends, so no call is lost
//!   waiting for a thread that stopped looking.

use napi::bindgen_prelude::{Either, Promise};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How long the main thread waits in [`Mailbox::take`] for the next call before it goes back to
/// its event loop: longer than a guest's turn between two quick calls (the next call's gates and
/// bridge), short enough that an idle cell costs the user's thread next to nothing.
pub const KEEP_AWAKE: Duration = Duration::from_micros(50);

/// A wrapper's answer: the envelope, or a promise of it.
pub type Answer = Either<String, Promise<String>>;

/// A call handed over: the tool's index (the order the package passed the tools in) and its
/// arguments as JSON text.
pub struct Job {
    pub tool: u32,
    pub args: String,
    reply: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct State {
    /// Whether the main thread is in its loop (between `take`s), so an offered call is taken.
    awake: bool,
    jobs: VecDeque<Job>,
    /// The reply of the call the main thread took last and has not answered yet.
    current: Option<oneshot::Sender<Answer>>,
}

/// The hand-over point between a runtime's tools and Node's main thread (one per runtime).
#[derive(Default)]
pub struct Mailbox {
    state: Mutex<State>,
    /// Whether `state.jobs` may hold a call: what the waiting main thread polls, so that it does
    /// not take the lock the guest worker needs to hand a call over.
    queued: AtomicBool,
}

impl Mailbox {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands a call to the main thread if it is in its loop; otherwise gives the arguments back
    /// (the caller goes through the threadsafe function).
    pub fn offer(&self, tool: u32, args: String) -> Result<oneshot::Receiver<Answer>, String> {
        let mut state = self.state();
        if !state.awake {
            return Err(args);
        }
        let (reply, rx) = oneshot::channel();
        state.jobs.push_back(Job { tool, args, reply });
        self.queued.store(true, Ordering::Release);
        Ok(rx)
    }

    /// The next call for the main thread, waiting for one up to [`KEEP_AWAKE`] while `stay` holds
    /// and a core is idle; `None` (and the thread counts as gone) when none came. A call taken
    /// earlier and not answered is dropped (its caller sees the tool fail).
    pub fn take(&self, stay: bool) -> Option<(u32, String)> {
        let until = Instant::now() + KEEP_AWAKE;
        let mut state = self.state();
        state.current = None;
        loop {
            if let Some(job) = state.jobs.pop_front() {
                state.awake = stay;
                state.current = Some(job.reply);
                self.queued.store(!state.jobs.is_empty(), Ordering::Release);
                return Some((job.tool, job.args));
            }
            if !stay || Instant::now() >= until || !codemode_embed::core_idle() {
                state.awake = false;
                return None;
            }
            state.awake = true;
            drop(state);
            // Wait without the lock; look at the clock and the cores now and then only.
            let mut spins = 0u32;
            while !self.queued.load(Ordering::Acquire) && spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            }
            state = self.state();
        }
    }

    /// Answers the call taken last.
    pub fn answer(&self, answer: Answer) {
        if let Some(reply) = self.state().current.take() {
            // Its caller may be gone (the run aborted); nothing waits for the answer then.
            let _ = reply.send(answer);
        }
    }

    /// Ends the loop: the thread counts as gone, and calls still queued or taken and not answered
    /// fail (their callers see the tool fail) — only if the loop ended abnormally are there any.
    pub fn rest(&self) {
        let mut state = self.state();
        state.awake = false;
        state.current = None;
        state.jobs.clear();
        self.queued.store(false, Ordering::Release);
    }
}
