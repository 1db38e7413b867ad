//! The guest heap of a reusable VM: one fixed region of host memory that holds everything QuickJS
//! allocates (the runtime, the context, the prelude, every object a cell makes) *and* the allocator's
//! own state, so copying the region's bytes back to what they were after boot puts the whole VM back
//! where it was, byte for byte.
//!
//! That is what lets the native engine reuse a booted VM instead of building one per run (a
//! runtime, a context and the prelude cost ~0.2 ms): after a run, [`Arena::reset`] copies the image
//! taken after boot over the region and zeroes whatever the run carved beyond it. Nothing a run did
//! can survive it — globals, prototypes, atoms, the `Symbol.for` registry, pending jobs, the
//! garbage collector's lists and the heap accounting all live in the region — and the region is
//! at the same address in every run, so the pointers inside the image stay valid. What lives
//! outside the region is the VM's Rust-side state ([`crate::ffi::ContextState`], the bridge, the
//! interrupt flags), which the engine resets itself for each run.
//!
//! The allocator is a segregated free list: a request is rounded up to a size class (multiples of
//! 16 bytes up to 256, then four classes per power of two, so at most a quarter is wasted), served
//! from that class's free list or carved from the untouched end of the region. Blocks are never
//! split or merged. QuickJS itself serves objects up to 512 bytes from 4 KiB pages it asks for
//! here, so most requests are of a few sizes. Each block starts with a 16-byte header holding its
//! class, so a block's usable size is known from its pointer alone.
//!
//! Requests of [`LARGE`] bytes or more (big strings, arrays, array buffers) go to the system
//! allocator instead, as before this arena existed: they are reallocated in place where the system
//! can, counted at their exact size, and never fragment the region. Each carries a 32-byte header
//! linking it into a list whose head is in the region's control block; [`Arena::reset`] frees
//! every block on that list before it copies the image back (the image never holds one: a VM
//! whose boot made one is not reused).
//!
//! Limits: the heap limit is enforced here on usable bytes ([`Arena::set_limit`], the guest's
//! memory limit: a memory bomb is refused at the limit, and the refusal is recorded); and the
//! region has a fixed capacity, so fragmentation can never grow it (an allocation past the end is
//! refused like one past the limit).
#![allow(unsafe_code)]

use rquickjs::allocator::Allocator;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Alignment of every block and the size of its header.
const GRANULE: usize = 16;
/// Requests of this many bytes or more are served by the system allocator (see the module doc).
pub(crate) const LARGE: usize = 16 << 10;
/// Header of a large block: previous and next block on the list, size, [`LARGE_MARK`].
const LARGE_HEADER: usize = 32;
/// The word before a large block's user data (where a region block has its class).
const LARGE_MARK: usize = usize::MAX;
/// Number of size classes (enough for any size below 2^40 bytes).
const CLASSES: usize = 16 + 4 * 37;
/// Where a free list ends.
const NIL: usize = 0;

/// The allocator's state, at offset 0 of the region (so [`Arena::reset`] restores it with the rest).
#[repr(C)]
struct Control {
    /// Offset of the first byte never carved into a block.
    bump: usize,
    /// Usable bytes of live blocks (what the limit applies to).
    used: usize,
    /// Most usable bytes allowed at once.
    limit: usize,
    /// The first large block (the address of its header), 0 when there is none.
    large: usize,
    /// Offset of the first free block of each class (the next one's offset is in its first word).
    free: [usize; CLASSES],
    /// Requests of QuickJS's small-block page size served (a test's count of pages made).
    #[cfg(test)]
    pages: usize,
}

/// Sizes of QuickJS's small-block pages (4 KiB less at most a few headers), for a test's count.
#[cfg(test)]
const PAGE_MIN: usize = 4000;
#[cfg(test)]
const PAGE_MAX: usize = 4096;

/// Where the first block starts: after the control block, on a granule boundary.
const FIRST_BLOCK: usize = std::mem::size_of::<Control>().div_ceil(GRANULE) * GRANULE;

/// The class of a request of `size` bytes, `None` if no class is that large.
fn class_of(size: usize) -> Option<usize> {
    let n = size.max(1).div_ceil(GRANULE);
    if n <= 16 {
        return Some(n - 1);
    }
    // n > 16: four classes per power of two, (4 + q) << (e - 2) granules for q in 0..4.
    let e = (usize::BITS - 1 - n.leading_zeros()) as usize;
    let step = 1usize << (e - 2);
    let q = n.div_ceil(step) - 4;
    let (e, q) = if q == 4 { (e + 1, 0) } else { (e, q) };
    let class = 16 + (e - 4) * 4 + q;
    (class < CLASSES).then_some(class)
}

/// The usable size of a block of class `class` (< [`CLASSES`]).
fn class_size(class: usize) -> usize {
    if class < 16 {
        return (class + 1) * GRANULE;
    }
    let e = 4 + (class - 16) / 4;
    let q = (class - 16) % 4;
    ((4 + q) << (e - 2)) * GRANULE
}

/// The region: owned here, used by QuickJS through [`ArenaAllocator`] handles.
pub(crate) struct Arena {
    base: NonNull<u8>,
    /// The region's size in bytes (a multiple of the page size).
    capacity: usize,
    /// The region's first bytes as they were when the image was taken (its length is the bump
    /// offset then): what [`Arena::reset`] copies back.
    image: Vec<u8>,
}

// SAFETY: the region is plain memory owned by this value; it is only touched through this value or
// through the allocator handle of the one QuickJS runtime living in it, and that runtime moves
// between threads together with its arena (inside one `Vm`), never used from two at once.
unsafe impl Send for Arena {}

impl Arena {
    /// A region of `capacity` bytes (rounded up to a page), or `None` if the host will not lend
    /// it. The memory comes zeroed from the system and is only backed by pages as it is used (see
    /// [`region`]).
    pub(crate) fn new(capacity: usize) -> Option<Self> {
        let capacity = capacity.max(FIRST_BLOCK + GRANULE).checked_next_multiple_of(4096)?;
        let base = region::map(capacity)?;
        let arena = Arena { base, capacity, image: Vec::new() };
        // SAFETY: the region is at least FIRST_BLOCK bytes, aligned for `Control`, and zeroed.
        unsafe {
            let c = arena.control();
            (*c).bump = FIRST_BLOCK;
            (*c).used = 0;
            (*c).limit = 0;
            (*c).large = 0;
        }
        Some(arena)
    }

    fn control(&self) -> *mut Control {
        self.base.as_ptr().cast::<Control>()
    }

    /// A handle QuickJS allocates through. `refused` is set whenever it says no.
    pub(crate) fn allocator(&self, refused: Arc<AtomicBool>) -> ArenaAllocator {
        ArenaAllocator { base: self.base, capacity: self.capacity, refused }
    }

    /// Sets the heap limit (usable bytes of live blocks, the image's included).
    pub(crate) fn set_limit(&mut self, limit: usize) {
        // SAFETY: the control block is live for the arena's life; nothing allocates concurrently
        // (`&mut self`, and the runtime is not running).
        unsafe { (*self.control()).limit = limit };
    }

    /// Usable bytes of live blocks now.
    pub(crate) fn used(&self) -> usize {
        // SAFETY: as in `set_limit`.
        unsafe { (*self.control()).used }
    }

    /// Bytes of the region carved into blocks so far (the image's included).
    pub(crate) fn carved(&self) -> usize {
        // SAFETY: as in `set_limit`.
        unsafe { (*self.control()).bump }
    }

    /// Takes the image [`Arena::reset`] returns to: the region as it is now, up to what has been
    /// carved. Must be called while QuickJS is not running. Refused (`false`, no image) while a
    /// large block is live: a reset frees them all, and the image would point at freed memory.
    pub(crate) fn take_image(&mut self) -> bool {
        // SAFETY: as in `set_limit`.
        if unsafe { (*self.control()).large } != 0 {
            return false;
        }
        let carved = self.carved();
        // SAFETY: the first `carved` bytes of the region are initialized (zeroed at creation, then
        // written by the allocator and QuickJS) and nothing writes them while we read (`&mut self`).
        let bytes = unsafe { std::slice::from_raw_parts(self.base.as_ptr(), carved) };
        self.image = bytes.to_vec();
        true
    }

    /// Frees every large block (a run's: the image holds none).
    fn free_large_blocks(&mut self) {
        // SAFETY: the list holds exactly the live large blocks, each allocated by
        // `ArenaAllocator::alloc_large` with the layout its header records; nothing else uses them
        // (QuickJS is not running, `&mut self`). Each is freed once, then the list is emptied.
        unsafe {
            let c = self.control();
            let mut at = (*c).large;
            while at != 0 {
                let header = at as *mut usize;
                let next = header.add(1).read();
                let size = header.add(2).read();
                std::alloc::dealloc(header.cast::<u8>(), large_layout(size));
                at = next;
            }
            (*c).large = 0;
        }
    }

    /// How many of QuickJS's small-block pages the region has served (a reset restores the image's
    /// count).
    #[cfg(test)]
    pub(crate) fn pages_made(&self) -> usize {
        // SAFETY: as in `set_limit`.
        unsafe { (*self.control()).pages }
    }

    /// Whether an image was taken.
    pub(crate) fn has_image(&self) -> bool {
        !self.image.is_empty()
    }

    /// Bytes of the image (the region carved when it was taken).
    pub(crate) fn image_len(&self) -> usize {
        self.image.len()
    }

    /// Puts the region back to the image, byte for byte: the image copied over its range, and
    /// everything carved since zeroed. Must be called while QuickJS is not running and no value of
    /// the runtime is held outside the region (all of it becomes what it was when the image was
    /// taken). Returns how many bytes beyond the image the run had carved.
    pub(crate) fn reset(&mut self) -> usize {
        self.free_large_blocks();
        let carved = self.carved();
        let image_len = self.image.len();
        // SAFETY: the image is no longer than the region and the carved range lies inside the
        // region (the allocator never carves past its capacity); nothing else touches the region
        // while we write (`&mut self`, QuickJS not running).
        unsafe {
            std::ptr::copy_nonoverlapping(self.image.as_ptr(), self.base.as_ptr(), image_len);
            if carved > image_len {
                std::ptr::write_bytes(self.base.as_ptr().add(image_len), 0, carved - image_len);
            }
        }
        carved.saturating_sub(image_len)
    }

    /// Whether the region is exactly the image followed by zeroes up to `upto` bytes (a test's
    /// check of [`Arena::reset`]).
    #[cfg(test)]
    pub(crate) fn is_pristine(&self, upto: usize) -> bool {
        let upto = upto.min(self.capacity);
        // SAFETY: the region's bytes are initialized (zeroed at creation) and not being written.
        let bytes = unsafe { std::slice::from_raw_parts(self.base.as_ptr(), upto) };
        let n = self.image.len().min(upto);
        bytes[..n] == self.image[..n] && bytes[n..].iter().all(|b| *b == 0)
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // Normally none are left (freeing the runtime frees them through the allocator).
        self.free_large_blocks();
        // SAFETY: mapped in `new` with this size, unmapped once. The runtime that used the region
        // is gone: the VM drops its runtime before its arena.
        unsafe { region::unmap(self.base, self.capacity) };
    }
}

/// The region's memory, taken from the operating system directly rather than through the global
/// allocator: a region is large (twice the heap limit plus 16 MiB) and mostly never touched, so
/// it must be backed by pages only as QuickJS uses them. glibc's `calloc` happened to give that
/// (it maps blocks this large afresh), but another allocator may hand back reused memory and zero
/// all of it, making every VM resident at its full size — with mimalloc as the process's
/// allocator, each suspended native run held ~20 MiB more (`codemode bench`'s footprint row).
#[cfg(unix)]
mod region {
    use std::ptr::NonNull;

    /// `len` bytes of fresh, zeroed, private memory, or `None`. The same mapping glibc's `calloc`
    /// made for a region (no `MAP_NORESERVE`: under strict overcommit accounting a region is
    /// refused at creation, as it was, rather than failing a write later).
    pub(super) fn map(len: usize) -> Option<NonNull<u8>> {
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
        // existing memory; the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(p.cast::<u8>())
    }

    /// Returns a region made by [`map`].
    ///
    /// # Safety
    /// `base` and `len` are those of one live mapping made by [`map`], unused from here on.
    pub(super) unsafe fn unmap(base: NonNull<u8>, len: usize) {
        // SAFETY: as the contract says. A failure (only for arguments `map` never gives) would
        // leave the mapping in place: a leak, not a fault.
        let _ = unsafe { libc::munmap(base.as_ptr().cast(), len) };
    }
}

/// The region's memory elsewhere: the global allocator's zeroed memory.
#[cfg(not(unix))]
mod region {
    use std::alloc::Layout;
    use std::ptr::NonNull;

    fn layout(len: usize) -> Option<Layout> {
        Layout::from_size_align(len, super::GRANULE).ok()
    }

    pub(super) fn map(len: usize) -> Option<NonNull<u8>> {
        // SAFETY: the layout has a non-zero size (the arena asks for at least one page).
        NonNull::new(unsafe { std::alloc::alloc_zeroed(layout(len)?) })
    }

    /// # Safety
    /// `base` and `len` are those of one live allocation made by [`map`], unused from here on.
    pub(super) unsafe fn unmap(base: NonNull<u8>, len: usize) {
        if let Some(layout) = layout(len) {
            // SAFETY: as the contract says.
            unsafe { std::alloc::dealloc(base.as_ptr(), layout) };
        }
    }
}

/// The system layout of a large block of `size` user bytes (validated when it was allocated).
fn large_layout(size: usize) -> Layout {
    // `size + LARGE_HEADER` was a valid layout size when the block was made (see `alloc_large`).
    Layout::from_size_align(size + LARGE_HEADER, GRANULE).unwrap_or(Layout::new::<[usize; 4]>())
}

/// QuickJS's allocator over an [`Arena`]: all state is in the region, this handle only points at it.
pub(crate) struct ArenaAllocator {
    base: NonNull<u8>,
    capacity: usize,
    refused: Arc<AtomicBool>,
}

// SAFETY: see `Arena`: the handle is used only by the runtime living in the region, under its lock,
// and moves with it.
unsafe impl Send for ArenaAllocator {}

impl ArenaAllocator {
    fn control(&self) -> *mut Control {
        self.base.as_ptr().cast::<Control>()
    }

    fn refuse(&self) -> *mut u8 {
        self.refused.store(true, Ordering::Relaxed);
        std::ptr::null_mut()
    }

    /// The block offset of user pointer `ptr`, if it is one this region handed out (defensive:
    /// QuickJS only frees what it allocated, but a wrong pointer must not make us write elsewhere).
    fn block_of(&self, ptr: *mut u8) -> Option<usize> {
        let at = (ptr as usize).checked_sub(self.base.as_ptr() as usize)?.checked_sub(GRANULE)?;
        // SAFETY: reading the bump offset of the live control block.
        let bump = unsafe { (*self.control()).bump };
        (at >= FIRST_BLOCK && at + GRANULE <= bump && at % GRANULE == 0).then_some(at)
    }

    /// The class stored in the header of the block at `at` (a valid block offset).
    fn class_at(&self, at: usize) -> Option<usize> {
        // SAFETY: `at` is a block offset inside the carved range (see `block_of`); the class is the
        // header's second word (the word right before the user data).
        let class = unsafe { self.base.as_ptr().add(at + 8).cast::<usize>().read() };
        (class < CLASSES).then_some(class)
    }

    /// Whether `ptr` lies inside the region (else it is a large block, or not ours).
    fn in_region(&self, ptr: *mut u8) -> bool {
        let base = self.base.as_ptr() as usize;
        (ptr as usize) >= base && (ptr as usize) < base + self.capacity
    }

    /// A large block of `size` bytes from the system, linked into the list (null if refused).
    fn alloc_large(&mut self, size: usize, zeroed: bool) -> *mut u8 {
        let c = self.control();
        let Some(total) = size.checked_add(LARGE_HEADER) else { return self.refuse() };
        let Ok(layout) = Layout::from_size_align(total, GRANULE) else { return self.refuse() };
        // SAFETY: the control block is live and used from one thread at a time; the header is
        // written inside the fresh allocation (32 bytes, 16-aligned), linked at the list's head.
        unsafe {
            let used = (*c).used.saturating_add(size);
            if used > (*c).limit {
                return self.refuse();
            }
            let header = if zeroed { std::alloc::alloc_zeroed(layout) } else { std::alloc::alloc(layout) };
            if header.is_null() {
                return self.refuse();
            }
            let words = header.cast::<usize>();
            let head = (*c).large;
            words.write(0);
            words.add(1).write(head);
            words.add(2).write(size);
            words.add(3).write(LARGE_MARK);
            if head != 0 {
                (head as *mut usize).write(header as usize);
            }
            (*c).large = header as usize;
            (*c).used = used;
            header.add(LARGE_HEADER)
        }
    }

    /// The header of large block `ptr`, if its mark says it is one.
    ///
    /// # Safety
    /// `ptr` is a live block of this allocator outside the region.
    unsafe fn large_header(ptr: *mut u8) -> Option<*mut usize> {
        // SAFETY: as the contract says: the 32 bytes before `ptr` are its header.
        unsafe {
            let header = ptr.sub(LARGE_HEADER).cast::<usize>();
            (header.add(3).read() == LARGE_MARK).then_some(header)
        }
    }

    /// Points the list's links at a large block's header (after it was made or moved).
    ///
    /// # Safety
    /// `header` is a live large block whose prev/next words name live blocks of the list.
    unsafe fn relink(&mut self, header: *mut usize) {
        // SAFETY: as the contract says.
        unsafe {
            let prev = header.read();
            let next = header.add(1).read();
            if prev == 0 {
                (*self.control()).large = header as usize;
            } else {
                (prev as *mut usize).add(1).write(header as usize);
            }
            if next != 0 {
                (next as *mut usize).write(header as usize);
            }
        }
    }

    /// Grows or shrinks a large block through the system's `realloc` (in place where it can).
    fn realloc_large(&mut self, header: *mut usize, old: usize, new_size: usize) -> *mut u8 {
        let c = self.control();
        let Some(total) = new_size.checked_add(LARGE_HEADER) else { return self.refuse() };
        if Layout::from_size_align(total, GRANULE).is_err() {
            return self.refuse();
        }
        // SAFETY: `header` is a live large block made with `large_layout(old)`; on success the
        // block (header included) may have moved, and its neighbours are pointed at it again.
        unsafe {
            let used = (*c).used.saturating_sub(old).saturating_add(new_size);
            if new_size > old && used > (*c).limit {
                return self.refuse();
            }
            let moved = std::alloc::realloc(header.cast::<u8>(), large_layout(old), total);
            if moved.is_null() {
                return self.refuse();
            }
            let header = moved.cast::<usize>();
            header.add(2).write(new_size);
            self.relink(header);
            (*c).used = used;
            moved.add(LARGE_HEADER)
        }
    }

    /// Unlinks and frees a large block.
    ///
    /// # Safety
    /// `header` is a live large block on the list.
    unsafe fn free_large(&mut self, header: *mut usize) {
        // SAFETY: as the contract says; its neighbours are live blocks of the list.
        unsafe {
            let prev = header.read();
            let next = header.add(1).read();
            let size = header.add(2).read();
            if prev == 0 {
                (*self.control()).large = next;
            } else {
                (prev as *mut usize).add(1).write(next);
            }
            if next != 0 {
                (next as *mut usize).write(prev);
            }
            let c = self.control();
            (*c).used = (*c).used.saturating_sub(size);
            std::alloc::dealloc(header.cast::<u8>(), large_layout(size));
        }
    }
}

// SAFETY: every pointer returned is either null or the user area of a block of at least the
// requested size inside the region, 16-aligned, not handed out again until freed; `usable_size`
// reads the header written when the block was carved.
unsafe impl Allocator for ArenaAllocator {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if size >= LARGE {
            return self.alloc_large(size, false);
        }
        let Some(class) = class_of(size) else { return self.refuse() };
        let usable = class_size(class);
        let c = self.control();
        #[cfg(test)]
        // SAFETY: as below.
        unsafe {
            if (PAGE_MIN..=PAGE_MAX).contains(&size) {
                (*c).pages += 1;
            }
        }
        // SAFETY: the control block is live; QuickJS calls the allocator from one thread at a time
        // (under the runtime's lock). Free-list offsets and the bump offset only ever point inside
        // the carved range of the region.
        unsafe {
            let used = (*c).used.saturating_add(usable);
            if used > (*c).limit {
                return self.refuse();
            }
            let head = (*c).free[class];
            let at = if head != NIL {
                (*c).free[class] = self.base.as_ptr().add(head + GRANULE).cast::<usize>().read();
                head
            } else {
                let at = (*c).bump;
                let end = match at.checked_add(GRANULE + usable) {
                    Some(end) if end <= self.capacity => end,
                    _ => return self.refuse(),
                };
                (*c).bump = end;
                self.base.as_ptr().add(at + 8).cast::<usize>().write(class);
                at
            };
            (*c).used = used;
            self.base.as_ptr().add(at + GRANULE)
        }
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else { return self.refuse() };
        if total >= LARGE {
            return self.alloc_large(total, true);
        }
        let ptr = self.alloc(total);
        if !ptr.is_null() {
            // SAFETY: `ptr` has at least `total` writable bytes (a recycled block holds old data).
            unsafe { std::ptr::write_bytes(ptr, 0, total) };
        }
        ptr
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        if ptr.is_null() {
            return;
        }
        if !self.in_region(ptr) {
            // SAFETY: the caller guarantees `ptr` is a live block of this allocator; outside the
            // region, that is a large block.
            if let Some(header) = unsafe { Self::large_header(ptr) } {
                // SAFETY: a live large block, on the list.
                unsafe { self.free_large(header) };
            }
            return;
        }
        let Some(at) = self.block_of(ptr) else { return };
        let Some(class) = self.class_at(at) else { return };
        let c = self.control();
        // SAFETY: `at` is a carved block (checked above) whose user area is at least a word; the
        // control block is live and used from one thread at a time.
        unsafe {
            self.base.as_ptr().add(at + GRANULE).cast::<usize>().write((*c).free[class]);
            (*c).free[class] = at;
            (*c).used = (*c).used.saturating_sub(class_size(class));
        }
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        let old = if self.in_region(ptr) {
            let Some(class) = self.block_of(ptr).and_then(|at| self.class_at(at)) else { return std::ptr::null_mut() };
            let old = class_size(class);
            if new_size <= old {
                return ptr;
            }
            old
        } else {
            // SAFETY: the caller guarantees `ptr` is a live block; outside the region, a large one.
            let Some(header) = (unsafe { Self::large_header(ptr) }) else { return std::ptr::null_mut() };
            // SAFETY: a live large block's header.
            let old = unsafe { header.add(2).read() };
            if new_size >= LARGE {
                return self.realloc_large(header, old, new_size);
            }
            old
        };
        let new = self.alloc(new_size);
        if !new.is_null() {
            // SAFETY: both are distinct live blocks; the old one holds `old` bytes and the new one
            // `new_size` (a large block shrinking below `LARGE` moves into a smaller one). The old
            // block is freed once, after the copy.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, old.min(new_size));
                self.dealloc(ptr);
            }
        }
        new
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        // SAFETY: the caller guarantees `ptr` is a live block of this allocator: the word before it
        // holds its class, or the large mark with the size in the word before that.
        unsafe {
            let class = ptr.sub(8).cast::<usize>().read();
            if class == LARGE_MARK {
                ptr.sub(16).cast::<usize>().read()
            } else if class < CLASSES {
                class_size(class)
            } else {
                0
            }
        }
    }
}

#[cfg(test)]
mod tests;
