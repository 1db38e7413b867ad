//! Unit tests of `workers` (kept beside it so the module itself reads as one concern).

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

/// A caller may poll for its answer only while a core is idle and no other caller polls: with
/// every running worker held, no permit is given, and a permit given earlier ends.
#[test]
fn one_caller_polls_for_its_answer_and_only_while_a_core_is_idle() {
    let _serial = serial();
    let p = pool();
    // Taken within a few tries (other tests' jobs may hold the cores for a moment).
    let deadline = Instant::now() + Duration::from_secs(10);
    let first = loop {
        if let Some(permit) = answer_spin() {
            break permit;
        }
        assert!(Instant::now() < deadline, "no permit while the pool was idle");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(answer_spin().is_none(), "a second caller polls at the same time");
    assert!(p.caller_spinning.load(Ordering::Acquire));
    // Hold every running worker: the cores are full.
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Arc::new(Mutex::new(release_rx));
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    for _ in 0..target() {
        let (rx, held) = (release_rx.clone(), held_tx.clone());
        spawn(move || {
            let _ = held.send(());
            let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(60));
        })
        .unwrap();
    }
    for _ in 0..target() {
        held_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    drop(first);
    assert!(!p.caller_spinning.load(Ordering::Acquire), "dropping the permit releases it");
    assert!(answer_spin().is_none(), "a permit while every core is busy");
    // A permit held when the cores fill up ends once they have stayed full for the grace
    // period (its time limit set far off, so only the cores can end it).
    let mut held = AnswerSpin { until: Instant::now() + Duration::from_secs(60), full_since: None };
    assert!(held.keep_going(), "a moment of full cores ended the poll");
    std::thread::sleep(FULL_GRACE * 2);
    assert!(!held.keep_going(), "the poll went on with every core busy");
    drop(release_tx);
}

/// A job queued while a worker does the clean-up its last job left ([`after_job`]) waits for that
/// worker instead of waking a parked one (no wake-up, no extra thread on a core); a second queued
/// job still gets a worker of its own. Decided by `dispatch` on a state of its own, so other
/// tests' jobs cannot change the outcome.
#[test]
fn a_finishing_worker_counts_as_a_taker_of_the_queue() {
    let queued = |n: usize| -> VecDeque<Queued> {
        (0..n).map(|_| Queued { job: Box::new(|| {}), at: Instant::now() }).collect()
    };
    // One worker busy finishing, one parked, one job queued: nobody is woken or started.
    let mut s = State { queue: queued(1), threads: 2, busy: 1, parked: 1, finishing: 1, ..State::default() };
    dispatch(&mut s).unwrap();
    assert_eq!((s.waking, s.threads), (0, 2), "a worker was woken or started for the job");
    // Two jobs queued: the second wakes the parked worker.
    let mut s = State { queue: queued(2), threads: 2, busy: 1, parked: 1, finishing: 1, ..State::default() };
    dispatch(&mut s).unwrap();
    assert_eq!(s.waking, 1, "the second job got no worker");
}

/// End to end: a job queued while a worker is in its clean-up runs (here the monitor is paused,
/// so no rescue makes it run).
#[test]
fn a_job_queued_during_a_clean_up_runs() {
    let _serial = serial();
    let _paused = MonitorPaused::new();
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    spawn(move || {
        after_job(move || {
            let _ = started_tx.send(());
            let _ = go_rx.recv_timeout(Duration::from_secs(30));
        })
        .unwrap();
    })
    .unwrap();
    started_rx.recv_timeout(Duration::from_secs(10)).expect("the clean-up runs");
    let (ran_tx, ran_rx) = mpsc::channel::<()>();
    spawn(move || {
        let _ = ran_tx.send(());
    })
    .unwrap();
    go_tx.send(()).unwrap();
    ran_rx.recv_timeout(Duration::from_secs(10)).expect("the queued job runs");
}

/// The monitor's rescues switched off until dropped.
struct MonitorPaused;

impl MonitorPaused {
    fn new() -> Self {
        MONITOR_PAUSED.store(true, Ordering::Release);
        MonitorPaused
    }
}

impl Drop for MonitorPaused {
    fn drop(&mut self) {
        MONITOR_PAUSED.store(false, Ordering::Release);
    }
}

/// The pool is one per process: tests that depend on its monitor being on or off run one at a
/// time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// contract B1 with a bounded pool: jobs that hog every running worker (a guest in a tight loop,
/// a tool callback that blocks without saying so) do not keep a new job from running: the
/// monitor starts another worker once it has waited [`STALL`].
#[test]
fn a_job_runs_while_every_running_worker_is_held_by_a_stuck_one() {
    let _serial = serial();
    let stuck = target() + 2;
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = std::sync::Arc::new(Mutex::new(release_rx));
    let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
    for _ in 0..stuck {
        let (rx, held) = (release_rx.clone(), held_tx.clone());
        spawn(move || {
            let _ = held.send(());
            // Held until the test lets go: not inside `blocking`, so the pool cannot know.
            let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(60));
        })
        .unwrap();
    }
    for _ in 0..stuck {
        held_rx.recv_timeout(Duration::from_secs(30)).expect("every stuck job starts (the monitor adds workers)");
    }
    let answer = std::thread::spawn(|| run(|| 6 * 7)).join().unwrap().unwrap();
    assert_eq!(answer, 42);
    for _ in 0..stuck {
        let _ = release_tx.send(());
    }
}

/// A worker waiting inside [`blocking`] is not counted as running: queued jobs get its place,
/// and more jobs than [`target`] can wait at once without any of them being stuck. The monitor
/// is paused, so only `blocking`'s hand-over can get all of them running (without it, the
/// barrier is never reached and the test fails).
#[test]
fn jobs_waiting_in_blocking_give_their_place_to_queued_ones() {
    let _serial = serial();
    let _paused = MonitorPaused::new();
    let n = target() * 4;
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let (tx, rx) = std::sync::mpsc::channel::<bool>();
    for _ in 0..n {
        let (barrier, tx) = (barrier.clone(), tx.clone());
        spawn(move || {
            // All n wait for each other: only possible if all n run at once.
            blocking(|| barrier.wait());
            let _ = tx.send(on_worker());
        })
        .unwrap();
    }
    for _ in 0..n {
        assert!(rx.recv_timeout(Duration::from_secs(30)).expect("every job passes the barrier"));
    }
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
