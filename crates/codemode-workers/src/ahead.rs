//! One instance built ahead of a process's first run (`GuestEngine::prepare_instance`), for the
//! engines that offer it: the slot that holds it, the thread that builds it, and the run that takes
//! it. An engine keeps one [`Ahead`] in a `static` and calls [`Ahead::build`] from
//! `prepare_instance` and [`Ahead::take`] from `start`.

use codemode_core::engine::{EngineError, GuestLimits};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

enum Slot<T> {
    /// None built or being built.
    Idle,
    /// Being built, on a thread of its own, for these limits.
    Building(GuestLimits),
    /// Built for these limits (no guest code ran in it), waiting for the run that takes it.
    Ready(GuestLimits, T),
}

/// At most one instance of type `T` built ahead of the run that will take it.
pub struct Ahead<T> {
    slot: Mutex<Slot<T>>,
    /// Signalled when a build ends (built or failed).
    done: Condvar,
    /// How many runs took an instance built ahead.
    taken: AtomicU64,
}

impl<T: Send + 'static> Ahead<T> {
    /// An empty slot.
    pub const fn new() -> Self {
        Ahead { slot: Mutex::new(Slot::Idle), done: Condvar::new(), taken: AtomicU64::new(0) }
    }

    fn lock(&self) -> MutexGuard<'_, Slot<T>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts `build` for `limits` on a thread of its own (`codemode-load`), unless an instance is
    /// already built or being built, then starts a guest worker if none runs (on this thread,
    /// while the instance is built), so the run's job finds one waiting. Returns at once. A build
    /// that fails or panics empties the slot and wakes any run waiting for it, which then builds
    /// its own.
    pub fn build(
        &'static self,
        limits: GuestLimits,
        build: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
    ) -> Result<(), EngineError> {
        {
            let mut slot = self.lock();
            if !matches!(*slot, Slot::Idle) {
                return Ok(());
            }
            *slot = Slot::Building(limits);
        }
        // Ends the build whatever happens in it (a panic included), so no run waits forever.
        struct Finish<T: Send + 'static>(&'static Ahead<T>, GuestLimits, Option<T>);
        impl<T: Send + 'static> Drop for Finish<T> {
            fn drop(&mut self) {
                let mut slot = self.0.lock();
                if matches!(*slot, Slot::Building(_)) {
                    *slot = match self.2.take() {
                        Some(instance) => Slot::Ready(self.1, instance),
                        None => Slot::Idle,
                    };
                }
                self.0.done.notify_all();
            }
        }
        let spawned = std::thread::Builder::new().name("codemode-load".into()).spawn(move || {
            let mut finish = Finish(self, limits, None);
            match build() {
                Ok(instance) => finish.2 = Some(instance),
                Err(e) => tracing::debug!(error = %e, "building an instance ahead of the first run failed"),
            }
        });
        if let Err(e) = spawned {
            drop(Finish(self, limits, None));
            return Err(EngineError::Unavailable(format!("cannot start the engine-loading thread: {e}")));
        }
        if let Err(e) = crate::start_one() {
            tracing::debug!(error = %e, "cannot start a guest worker ahead of the first run");
        }
        Ok(())
    }

    /// The instance built ahead for `limits`, waiting for it while it is being built (on a guest
    /// worker, with its place handed to queued jobs meanwhile). One built or being built for other
    /// limits is left for the run it was built for.
    pub fn take(&self, limits: &GuestLimits) -> Option<T> {
        let mut slot = self.lock();
        if matches!(&*slot, Slot::Building(l) if l == limits) {
            slot = crate::blocking(move || {
                self.done
                    .wait_while(slot, |s| matches!(s, Slot::Building(l) if l == limits))
                    .unwrap_or_else(|p| p.into_inner())
            });
        }
        match std::mem::replace(&mut *slot, Slot::Idle) {
            Slot::Ready(l, instance) if l == *limits => {
                self.taken.fetch_add(1, Ordering::Relaxed);
                Some(instance)
            }
            other => {
                *slot = other;
                None
            }
        }
    }

    /// How many runs so far took an instance built ahead of them, in this process (for tests).
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }
}

impl<T: Send + 'static> Default for Ahead<T> {
    fn default() -> Self {
        Self::new()
    }
}
