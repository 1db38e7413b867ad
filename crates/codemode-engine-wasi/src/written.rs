//! Which 4 KiB pages of an instance's linear memory may hold something other than the image it
//! started from, read from the kernel's page tables, so a snapshot compares only those pages with
//! the image instead of every page.
//!
//! An instance's memory is a private copy-on-write mapping of the pre-initialized image (zeros past
//! its end). A page nobody wrote is either not mapped at all, or maps the image's own file page (or
//! the shared zero page) read-only; the first write to it gives the process a private anonymous
//! copy. So, per page of `/proc/self/pagemap` (Linux's `Documentation/admin-guide/mm/pagemap.rst`):
//! present and anonymous, or swapped out, means it *may* differ; anything else holds the image's
//! bytes. "May": the pooling allocator resets a reused slot's written pages by copying the image
//! back, so they stay anonymous with the image's content; the comparison then finds them equal, as
//! it did when every page was compared. A page only read maps the image's file page or, where the
//! mapping is anonymous, the shared zero page: the zero page counts as "may differ" (it is not a
//! file page), a comparison more; a huge zero page (transparent huge pages on for all memory) may
//! read as a file page and be skipped, which is as right, since it maps zeros only where a fresh
//! instance has zeros too. All of this holds because wasmtime maps linear memories privately: a
//! shared mapping's written pages would read as file pages. The oracle test
//! `snapshots_through_the_page_tables_equal_comparing_every_page` fails if a wasmtime upgrade ever
//! changes that.
//!
//! A page wrongly ruled out would be a change missing from the snapshot, so the page tables are
//! read only after they have been seen to tell the truth in this process (checked once): a page
//! just written must read as present and anonymous. Where that does not hold (another OS or
//! architecture, no `/proc`, a sandbox that emulates it), or the memory is not page-aligned,
//! [`may_differ`] answers `None` and every page is compared, as before. wasmtime's pooling
//! allocator trusts the same page tables to decide which pages of a slot to reset between
//! instances.
//!
//! Nothing here is unsafe: the memory's address is only used as a number (the pagemap file's
//! offset), and the file is read like any other. It stays open (one descriptor, close-on-exec) for
//! the process's life; a child forked without `exec` opens its own (see `imp::pagemap`).

/// The page size this module reads the page tables in: the snapshot format's page.
const PAGE: usize = crate::snapshot::PAGE;

/// For each page of `memory` from page `from` on: whether it may differ from the image the
/// instance started from (`false`: it certainly holds the image's bytes, or zeros past the image).
/// `None` when the page tables cannot be read, or cannot be trusted, here.
pub(crate) fn may_differ(memory: &[u8], from: usize) -> Option<Vec<bool>> {
    imp::may_differ(memory, from)
}

/// Whether [`may_differ`] reads the page tables in this process (checked once).
#[cfg(test)]
pub(crate) fn usable() -> bool {
    imp::usable()
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod imp {
    //! x86-64 Linux: 4 KiB pages, always; each page's entry in `/proc/self/pagemap` is 64 bits.
    use super::PAGE;
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::sync::{Arc, Mutex, PoisonError};

    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    /// A file page or shared anonymous memory: for a private mapping, a page never written.
    const FILE: u64 = 1 << 61;
    const ENTRY: usize = 8;
    /// Entries read per `pread` (32 KiB of entries: 16 MiB of memory).
    const CHUNK: usize = 4096;

    /// This process's page map, opened (and checked) once per process: a child forked from a
    /// process that opened it would otherwise read its parent's page tables through the inherited
    /// descriptor (the file belongs to the process that opened it), so the process id is compared
    /// at every use and a forked child opens its own.
    fn pagemap() -> Option<Arc<File>> {
        static PAGEMAP: Mutex<Option<(u32, Option<Arc<File>>)>> = Mutex::new(None);
        let pid = std::process::id();
        let mut slot = PAGEMAP.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.as_ref() {
            Some((opened_by, file)) if *opened_by == pid => file.clone(),
            _ => {
                let file = File::open("/proc/self/pagemap").ok().filter(trustworthy).map(Arc::new);
                *slot = Some((pid, file.clone()));
                file
            }
        }
    }

    #[cfg(test)]
    pub(super) fn usable() -> bool {
        pagemap().is_some()
    }

    /// The page-map entries of pages `first..first + count` of the address space.
    fn read_entries(file: &File, first: usize, count: usize) -> Option<Vec<u64>> {
        let mut bytes = vec![0u8; count.checked_mul(ENTRY)?];
        file.read_exact_at(&mut bytes, u64::try_from(first.checked_mul(ENTRY)?).ok()?).ok()?;
        Some(bytes.chunks_exact(ENTRY).map(|raw| <[u8; ENTRY]>::try_from(raw).map_or(0, u64::from_ne_bytes)).collect())
    }

    /// The self-check: a page of a buffer written just now must read as present and not a file
    /// page. A page map that hid a written page would make snapshots miss changes; one that reports
    /// too many pages as written only costs comparisons, so nothing else is asked of it (whether an
    /// untouched allocation reads as absent depends on the allocator's history, not the kernel).
    fn trustworthy(file: &File) -> bool {
        let written = vec![0x5au8; 3 * PAGE];
        let at = (written.as_ptr() as usize).div_ceil(PAGE);
        let present =
            read_entries(file, at, 1).is_some_and(|e| e.first().is_some_and(|e| e & (PRESENT | FILE) == PRESENT));
        std::hint::black_box(&written);
        present
    }

    pub(super) fn may_differ(memory: &[u8], from: usize) -> Option<Vec<bool>> {
        let file = pagemap()?;
        let file = file.as_ref();
        let start = memory.as_ptr() as usize;
        if !start.is_multiple_of(PAGE) || !memory.len().is_multiple_of(PAGE) {
            return None;
        }
        let pages = memory.len() / PAGE;
        let mut out = Vec::with_capacity(pages.saturating_sub(from));
        let mut page = from;
        while page < pages {
            let n = CHUNK.min(pages - page);
            let entries = read_entries(file, start / PAGE + page, n)?;
            out.extend(entries.iter().map(|e| e & SWAPPED != 0 || e & (PRESENT | FILE) == PRESENT));
            page += n;
        }
        Some(out)
    }
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
mod imp {
    pub(super) fn may_differ(_memory: &[u8], _from: usize) -> Option<Vec<bool>> {
        None
    }

    #[cfg(test)]
    pub(super) fn usable() -> bool {
        false
    }
}

#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Against the real kernel: written pages may differ, and pages never touched do not. Where
    /// transparent huge pages are on for all memory, a write may bring in its whole 2 MiB
    /// neighbourhood (those pages count as written: compared, and found equal), so only blocks
    /// 2 MiB away from every write are asserted untouched. (A page only read is left unasserted:
    /// it maps the zero page, reported as written, or under such huge pages the huge zero page,
    /// which may read as a file page; zeros either way, where a fresh instance has zeros.)
    #[test]
    fn written_pages_are_reported_and_untouched_ones_are_not() {
        if !usable() {
            eprintln!("skipped: /proc/self/pagemap cannot be read here");
            return;
        }
        const HUGE: usize = 2 << 20;
        // Past glibc's largest mmap threshold (32 MiB), so the buffer is a fresh mapping of its own.
        let mut buf = vec![0u8; 32 * HUGE];
        let start = (buf.as_ptr() as usize).div_ceil(HUGE) * HUGE - buf.as_ptr() as usize;
        let region = &mut buf[start..start + 8 * HUGE];
        let pages = region.len() / PAGE;
        let per_huge = HUGE / PAGE;
        // Written: a page in the first 2 MiB, two in the third.
        region[3 * PAGE + 17] = 1;
        region[2 * HUGE + 4 * PAGE] = 2;
        region[2 * HUGE + 30 * PAGE + PAGE - 1] = 3;
        std::hint::black_box(&region);
        let flags = may_differ(region, 0).unwrap();
        assert_eq!(flags.len(), pages);
        for written in [3, 2 * per_huge + 4, 2 * per_huge + 30] {
            assert!(flags[written], "written page {written} not reported");
        }
        for huge in [1, 3, 4, 5, 6, 7] {
            let untouched = &flags[huge * per_huge..(huge + 1) * per_huge];
            assert!(untouched.iter().all(|f| !f), "untouched 2 MiB block {huge} reported written");
        }
        // From a later page on: the same answer, shifted.
        assert_eq!(may_differ(region, 2 * per_huge).unwrap(), flags[2 * per_huge..].to_vec());
        // An unaligned slice is not read.
        assert!(may_differ(&region[1..PAGE + 1], 0).is_none());
    }
}
