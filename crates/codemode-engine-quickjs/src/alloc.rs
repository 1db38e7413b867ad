//! The guest heap allocator: Rust's global allocator (through rquickjs's [`RustAllocator`]) with the
//! guest's memory limit enforced here, so the engine knows when an allocation was refused.
//!
//! QuickJS reports most out-of-memory conditions as a catchable `InternalError: out of memory`, but
//! when even that error object cannot be allocated it throws `null`. Counting refusals here lets the
//! engine report such a failure as `memory_limit_exceeded` instead of an anonymous `null`.
#![allow(unsafe_code)]

use rquickjs::allocator::{Allocator, RustAllocator};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// An allocator that refuses to grow the guest heap beyond `limit` bytes and records refusals.
pub(crate) struct GuardedAllocator {
    inner: RustAllocator,
    used: usize,
    limit: usize,
    refused: Arc<AtomicBool>,
}

impl GuardedAllocator {
    /// An allocator for a heap of at most `limit` bytes; `refused` is set whenever it says no.
    pub(crate) fn new(limit: usize, refused: Arc<AtomicBool>) -> Self {
        GuardedAllocator { inner: RustAllocator, used: 0, limit, refused }
    }

    fn fits(&self, extra: usize) -> bool {
        let ok = self.used.checked_add(extra).is_some_and(|total| total <= self.limit);
        if !ok {
            self.refused.store(true, Ordering::Relaxed);
        }
        ok
    }
}

// SAFETY: every method either returns a null pointer (which the `Allocator` contract allows for
// `alloc`, `calloc` and `realloc`) or delegates to `RustAllocator`, which upholds the contract. The
// byte counter only reads sizes of live allocations made by `RustAllocator` itself.
unsafe impl Allocator for GuardedAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if !self.fits(size) {
            return std::ptr::null_mut();
        }
        let ptr = self.inner.alloc(size);
        if !ptr.is_null() {
            // SAFETY: `ptr` was just returned, non-null, by `RustAllocator::alloc`.
            self.used += unsafe { RustAllocator::usable_size(ptr) };
        }
        ptr
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        // `RustAllocator::calloc` panics on overflow; refuse instead.
        let Some(total) = count.checked_mul(size) else {
            self.refused.store(true, Ordering::Relaxed);
            return std::ptr::null_mut();
        };
        if !self.fits(total) {
            return std::ptr::null_mut();
        }
        let ptr = self.inner.calloc(count, size);
        if !ptr.is_null() {
            // SAFETY: `ptr` was just returned, non-null, by `RustAllocator::calloc`.
            self.used += unsafe { RustAllocator::usable_size(ptr) };
        }
        ptr
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        // SAFETY: the caller guarantees `ptr` came from this allocator, i.e. from `RustAllocator`.
        unsafe {
            self.used = self.used.saturating_sub(RustAllocator::usable_size(ptr));
            self.inner.dealloc(ptr);
        }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        // SAFETY: the caller guarantees `ptr` is a live allocation of this allocator.
        let old = unsafe { RustAllocator::usable_size(ptr) };
        if new_size > old && !self.fits(new_size - old) {
            return std::ptr::null_mut();
        }
        // SAFETY: as above; `RustAllocator::realloc` keeps `ptr` valid when it returns null.
        let new = unsafe { self.inner.realloc(ptr, new_size) };
        if !new.is_null() {
            // SAFETY: `new` was just returned, non-null, by `RustAllocator::realloc`.
            self.used = self.used.saturating_sub(old) + unsafe { RustAllocator::usable_size(new) };
        }
        new
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: the caller guarantees `ptr` is a live allocation of this allocator.
        unsafe { RustAllocator::usable_size(ptr) }
    }
}
