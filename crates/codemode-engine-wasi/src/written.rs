//! Which pages of a linear memory a run may have changed, asked of the kernel's page table
//! (Linux's `PAGEMAP_SCAN`, 6.7 and later), so a snapshot compares only those with the image.
//!
//! Why the answer is sound: wasmtime maps a memory privately, from the module's pre-initialized
//! image (or zeros past it). The only way a page of a private mapping comes to hold anything but
//! what the mapping was made from is a write, and a write gives the page a private, anonymous
//! copy. So a page that is not resident, or resident as the file's or the zero page, holds the
//! image's bytes, and only resident-or-swapped private pages need comparing. The converse does
//! not hold and need not: pages wasmtime's pool reset in place (copied back from the image) stay
//! private, and are compared and found equal. This is the criterion wasmtime's own pool reset
//! trusts to give each new instance the pristine image (`pagemap_scan`); here a page it wrongly
//! left out would be a change the snapshot lost, which the oracle test in `instance.rs`
//! (`scanned_snapshots_equal_full_comparisons`) checks against comparing every page.
//!
//! Elsewhere (another OS, an older kernel, a sandbox that refuses the `ioctl`) the answer is
//! "unknown" and the snapshot compares every page, as before.

use std::ops::Range;

/// A page's categories, as `PAGEMAP_SCAN` reports them (`linux/fs.h`).
#[cfg(target_os = "linux")]
mod category {
    /// Mapped from a file (here: the module's image) and not privately copied.
    pub(super) const FILE: u64 = 1 << 2;
    /// Resident.
    pub(super) const PRESENT: u64 = 1 << 3;
    /// Swapped out (a private page: file pages are dropped, not swapped).
    pub(super) const SWAPPED: u64 = 1 << 4;
    /// The shared zero page (read, never written).
    pub(super) const PFNZERO: u64 = 1 << 5;
}

/// `struct pm_scan_arg` of `linux/fs.h`.
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Default)]
struct ScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` of `linux/fs.h`.
#[cfg(target_os = "linux")]
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `PAGEMAP_SCAN`: `_IOWR('f', 16, struct pm_scan_arg)`.
#[cfg(target_os = "linux")]
const PAGEMAP_SCAN: u64 = (3 << 30) | ((std::mem::size_of::<ScanArg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;

/// Regions asked for per `ioctl`; a scan that fills them goes on from where it stopped.
#[cfg(target_os = "linux")]
const REGIONS: usize = 64;

/// `/proc/self/pagemap`, opened once per process (`None` when it cannot be: no `/proc`).
#[cfg(target_os = "linux")]
fn pagemap() -> Option<&'static std::fs::File> {
    static FILE: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    FILE.get_or_init(|| std::fs::File::open("/proc/self/pagemap").ok()).as_ref()
}

/// The byte ranges of `memory` (offsets from its start, whole host pages) that may differ from
/// what its mapping was made from, in ascending order, into `out` (cleared first). False when the
/// kernel cannot tell: then every page must be compared, and `out` means nothing.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn changed_ranges(memory: &[u8], out: &mut Vec<Range<usize>>) -> bool {
    use std::os::fd::AsRawFd;
    out.clear();
    let Some(file) = pagemap() else { return false };
    let base = memory.as_ptr() as u64;
    let end = base.saturating_add(memory.len() as u64);
    let mut regions = [PageRegion::default(); REGIONS];
    let mut from = base;
    while from < end {
        let mut arg = ScanArg {
            size: std::mem::size_of::<ScanArg>() as u64,
            start: from,
            end,
            vec: regions.as_mut_ptr() as u64,
            vec_len: REGIONS as u64,
            // Private (neither the file's page nor the zero page) and resident or swapped out.
            category_inverted: category::FILE | category::PFNZERO,
            category_mask: category::FILE | category::PFNZERO,
            category_anyof_mask: category::PRESENT | category::SWAPPED,
            ..ScanArg::default()
        };
        // SAFETY: `PAGEMAP_SCAN` on this process's own pagemap only reads page-table entries of the
        // range `from..end` (no flag asks it to write-protect or otherwise change them; a range
        // that is not mapped is an error, not undefined behaviour). The kernel writes into `arg`
        // (its `walk_end`), which is a live `#[repr(C)]` value of the size `arg.size` states, and
        // at most `vec_len` entries into `regions`, a live array of that many `#[repr(C)]`
        // `page_region`s. Neither is otherwise borrowed during the call.
        let found = unsafe { libc::ioctl(file.as_raw_fd(), PAGEMAP_SCAN as libc::Ioctl, std::ptr::from_mut(&mut arg)) };
        let Ok(found) = usize::try_from(found) else { return false };
        for r in regions.iter().take(found.min(REGIONS)) {
            if r.start < from || r.end > end || r.start >= r.end {
                return false;
            }
            let range = (r.start - base) as usize..(r.end - base) as usize;
            match out.last_mut() {
                Some(last) if last.end == range.start => last.end = range.end,
                _ => out.push(range),
            }
        }
        if arg.walk_end <= from || arg.walk_end > end {
            // No progress, or a position outside the range: the answer is not to be trusted.
            return false;
        }
        from = arg.walk_end;
    }
    true
}

/// Elsewhere the kernel cannot be asked: every page is compared.
#[cfg(not(target_os = "linux"))]
pub(crate) fn changed_ranges(_memory: &[u8], out: &mut Vec<Range<usize>>) -> bool {
    out.clear();
    false
}
