//! Worker threads with large stacks for running guest code.
//!
//! Wasm frames run on the calling thread's native stack; the guest may use up to
//! [`MAX_WASM_STACK`] of it before wasmtime traps, which must stay well below the thread's stack.
//! Host runtimes (tokio's blocking pool: 2 MiB) do not guarantee that, so every call into the guest
//! hops to one of these threads. Idle threads are kept for reuse; a busy pool grows, so one slow guest
//! never delays another run.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Native stack of a worker thread (reserved virtual memory; pages are committed on use).
pub(crate) const WORKER_STACK: usize = 16 << 20;
/// Native stack wasm code may use (wasmtime's `max_wasm_stack`); deep recursion hits QuickJS's own
/// limit long before this.
pub(crate) const MAX_WASM_STACK: usize = 8 << 20;
/// Idle workers kept for reuse.
const MAX_IDLE: usize = 8;
/// An idle worker exits after this long without work.
const IDLE_EXIT: Duration = Duration::from_secs(60);

type Job = Box<dyn FnOnce() -> Box<dyn FnOnce() + Send> + Send>;

fn idle() -> &'static Mutex<Vec<mpsc::Sender<Job>>> {
    static IDLE: OnceLock<Mutex<Vec<mpsc::Sender<Job>>>> = OnceLock::new();
    IDLE.get_or_init(|| Mutex::new(Vec::new()))
}

fn worker(me: mpsc::Sender<Job>, jobs: mpsc::Receiver<Job>) {
    while let Ok(job) = jobs.recv_timeout(IDLE_EXIT) {
        let deliver = job();
        // Become available before handing back the result, so the caller's next job finds us.
        let parked = {
            let mut idle = idle().lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() < MAX_IDLE {
                idle.push(me.clone());
                true
            } else {
                false
            }
        };
        deliver();
        if !parked {
            return;
        }
    }
}

fn spawn(job: Job) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<Job>();
    let me = tx.clone();
    std::thread::Builder::new().name("codemode-wasi".into()).stack_size(WORKER_STACK).spawn(move || worker(me, rx))?;
    tx.send(job).map_err(|_| std::io::Error::other("worker thread gone"))
}

/// Runs `f` on a worker thread and waits for its result. `Err` carries a panic message or a failure to
/// start a thread.
pub(crate) fn run<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Result<R, String> {
    let (tx, rx) = mpsc::channel();
    let mut job: Job = Box::new(move || {
        let out = catch_unwind(AssertUnwindSafe(f));
        Box::new(move || {
            let _ = tx.send(out);
        })
    });
    loop {
        let candidate = idle().lock().unwrap_or_else(|p| p.into_inner()).pop();
        match candidate {
            Some(worker) => match worker.send(job) {
                Ok(()) => break,
                // That worker exited while idle; try another.
                Err(mpsc::SendError(back)) => job = back,
            },
            None => {
                spawn(job).map_err(|e| format!("cannot start a guest worker thread: {e}"))?;
                break;
            }
        }
    }
    match rx.recv() {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(panic)) => Err(panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "guest worker panicked".into())),
        Err(_) => Err("guest worker thread stopped".into()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_jobs_and_survives_panics() {
        assert_eq!(super::run(|| 6 * 7), Ok(42));
        let e = super::run(|| -> u8 { panic!("boom") }).unwrap_err();
        assert!(e.contains("boom"));
        let handles: Vec<_> = (0..8).map(|i| std::thread::spawn(move || super::run(move || i * 2))).collect();
        let sum: i32 = handles.into_iter().map(|h| h.join().unwrap().unwrap()).sum();
        assert_eq!(sum, 56);
    }
}
