//! The warm pool of the native engine: pristine VMs kept per limits (booted, or reset byte for byte
//! to their booted image after a run), refilled in the background, and the VM a process builds
//! ahead of its first run (`GuestEngine::prepare_instance`).

use crate::vm::Vm;
use codemode_core::engine::{EngineError, GuestLimits};
use codemode_workers as workers;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// Pristine VMs — runtime, context and prelude ready, and no guest code ever ran in them, or every
/// byte of their heap put back to their booted image since — kept per limits, so a new run does not
/// wait for QuickJS to set up (~0.2 ms). Refilled in the background once runs overlap (or a run
/// took a pooled VM).
pub(crate) const WARM_TARGET: usize = 2;

/// Most VMs kept across all limit sets (a finished run's VM is dropped instead when it is full).
pub(crate) const WARM_MAX: usize = 4 * WARM_TARGET;

/// Heap capacity of a reusable VM: twice its limit plus room for the image. The limit applies to
/// live bytes; the rest absorbs fragmentation (blocks are never merged), and the capacity bounds
/// what a hostile run can make the region grow to.
pub(crate) fn arena_capacity(heap_limit: usize) -> usize {
    heap_limit.saturating_mul(2).saturating_add(16 << 20)
}

/// Most bytes a run may carve beyond the image for its VM to be reused: resetting costs the zeroing
/// of those bytes, and their pages stay resident while the VM waits in the pool.
pub(crate) const RECYCLE_MAX: usize = 4 << 20;

/// How many VMs runs had to wait for, because the pool had none for their limits.
pub(crate) static BUILT_ON_DEMAND: AtomicU64 = AtomicU64::new(0);

/// How many runs started on a VM reused from its image (for tests: proof that reuse happens).
pub(crate) static REUSED: AtomicU64 = AtomicU64::new(0);

/// How many runs so far started on a VM reused from its booted image, in this process. Tests use
/// it to check that the isolation they exercise is that of reused VMs.
pub fn reused_vms() -> u64 {
    REUSED.load(Ordering::Relaxed)
}

/// The pool of pristine VMs, each with the limits it was built for.
pub(crate) type WarmPool = Mutex<Vec<(GuestLimits, Box<Vm>)>>;

pub(crate) fn warm() -> &'static WarmPool {
    static WARM: OnceLock<WarmPool> = OnceLock::new();
    WARM.get_or_init(|| Mutex::new(Vec::new()))
}

pub(crate) fn take_warm(limits: &GuestLimits) -> Option<Box<Vm>> {
    let mut pool = warm().lock().unwrap_or_else(|p| p.into_inner());
    let at = pool.iter().position(|(l, _)| l == limits)?;
    let vm = pool.swap_remove(at).1;
    if vm.reused {
        REUSED.fetch_add(1, Ordering::Relaxed);
    }
    Some(vm)
}

/// A finished run's VM: put back to its image and pooled when it can be, else dropped.
pub(crate) fn release(mut vm: Box<Vm>) {
    if !vm.recycle() {
        return;
    }
    let mut pool = warm().lock().unwrap_or_else(|p| p.into_inner());
    if pool.len() < WARM_MAX {
        pool.push((vm.limits, vm));
    }
}

pub(crate) fn refill_warm(limits: GuestLimits) {
    let _ = workers::spawn(move || {
        let have = warm().lock().unwrap_or_else(|p| p.into_inner()).iter().filter(|(l, _)| *l == limits).count();
        if have >= WARM_TARGET {
            return;
        }
        if let Ok(vm) = Vm::new(limits) {
            let mut pool = warm().lock().unwrap_or_else(|p| p.into_inner());
            // Keep the pool small across all limit sets: drop the oldest entries first.
            if pool.len() >= WARM_MAX {
                pool.remove(0);
            }
            pool.push((limits, Box::new(vm)));
        }
    });
}

/// The VM built ahead of a first run ([`GuestEngine::prepare_instance`]).
pub(crate) static AHEAD: codemode_workers::ahead::Ahead<Box<Vm>> = codemode_workers::ahead::Ahead::new();

/// How many runs so far started on a VM built ahead of them ([`GuestEngine::prepare_instance`]), in
/// this process. Tests use it to check that the run took the VM built for it.
pub fn vms_taken_ahead() -> u64 {
    AHEAD.taken()
}

pub(crate) fn build_ahead(limits: GuestLimits) -> Result<(), EngineError> {
    if warm().lock().unwrap_or_else(|p| p.into_inner()).iter().any(|(l, _)| *l == limits) {
        return Ok(());
    }
    AHEAD.build(limits, move || Vm::new(limits).map(Box::new))
}
