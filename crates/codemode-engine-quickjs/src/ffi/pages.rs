//! Keeping QuickJS's small-block pages alive between runs of a reused VM, so a nested call does not
//! make and free a 4 KiB page every time.
#![allow(unsafe_code)]

use super::*;

/// Sizes QuickJS serves from its own 4 KiB pages (its "arenas"): blocks of 16 to 512 bytes, each
/// with an 8-byte header, in size classes of 8, 16 and 32 bytes' steps. One request per class
/// (the class's block size less the header). The pinned QuickJS's table; a different table would
/// only make some keepers share a class.
pub(super) const PAGE_CLASSES: [usize; 31] = [
    16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320,
    352, 384, 416, 448, 480, 512,
];

/// One block held in each of QuickJS's small size classes for the VM's life, placed so that every
/// class has a free block in a page that stays: a short-lived value never makes a page.
///
/// QuickJS frees a small-block page the moment its last block is freed. After boot every page of
/// a class may be full (an ordinary object's class is, with this prelude), and then each nested
/// call's short-lived objects made a new page (~440 instructions: the page and the free list
/// through its 4 KiB) and freed it again when they died — every call. [`PageKeepers::hold`] takes
/// two blocks of each class, frees the first and keeps the second: with no free block in the
/// class, both come from a new page, which keeps all but one free; with one, the second makes a
/// page and the first's place is free again; with more, both come from older pages and at least
/// one of their places stays free. Costs a page only for classes with fewer than two free blocks
/// at boot (three, 12 KiB, with this prelude), taken before the booted image, so every run starts
/// with them; nothing per call. Guaranteed for one short-lived block per class: a run that keeps
/// many more alive at once can still fill the kept page.
pub(crate) struct PageKeepers {
    blocks: Vec<NonNull<c_void>>,
}

impl PageKeepers {
    /// Takes the keepers from `ctx`'s runtime (called once the prelude has booted).
    pub(crate) fn hold(ctx: &Ctx<'_>) -> Self {
        let mut blocks = Vec::with_capacity(PAGE_CLASSES.len());
        // SAFETY: a live context under its runtime's lock (we hold a `Ctx`); `js_malloc_rt` and
        // `js_free_rt` are QuickJS's own allocator; a null answer (refused) is skipped, and the
        // first block of each pair is freed once, right after the second was taken.
        unsafe {
            let rt = qjs::JS_GetRuntime(ctx.as_raw().as_ptr());
            for block in PAGE_CLASSES {
                let size = (block - 8) as qjs::size_t;
                let Some(first) = NonNull::new(qjs::js_malloc_rt(rt, size)) else { continue };
                if let Some(kept) = NonNull::new(qjs::js_malloc_rt(rt, size)) {
                    blocks.push(kept);
                }
                qjs::js_free_rt(rt, first.as_ptr());
            }
        }
        PageKeepers { blocks }
    }

    /// Allocates one block of each class and frees it again (a test's short-lived value).
    #[cfg(test)]
    pub(crate) fn churn(ctx: &Ctx<'_>) {
        // SAFETY: as in `hold`; each block is freed right after it was allocated.
        unsafe {
            let rt = qjs::JS_GetRuntime(ctx.as_raw().as_ptr());
            for block in PAGE_CLASSES {
                let p = qjs::js_malloc_rt(rt, (block - 8) as qjs::size_t);
                qjs::js_free_rt(rt, p);
            }
        }
    }

    /// Frees the keepers (before the runtime goes).
    pub(crate) fn release(&mut self, ctx: &Ctx<'_>) {
        // SAFETY: as in `hold`; each block was allocated by this runtime and is freed once (the
        // list is emptied).
        unsafe {
            let rt = qjs::JS_GetRuntime(ctx.as_raw().as_ptr());
            for p in self.blocks.drain(..) {
                qjs::js_free_rt(rt, p.as_ptr());
            }
        }
    }
}
