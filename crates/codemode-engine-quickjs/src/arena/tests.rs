//! Unit tests of `arena` (kept beside it so the module itself reads as one concern).

#![allow(clippy::unwrap_used)]
use super::*;

/// Pages of `len` bytes at `base` the kernel has backed (`mincore`).
#[cfg(target_os = "linux")]
fn resident_pages(base: *mut u8, len: usize) -> usize {
    let mut vec = vec![0u8; len.div_ceil(4096)];
    // SAFETY (test): `base..base + len` is one live mapping of the caller's; `vec` has a byte
    // per page.
    let rc = unsafe { libc::mincore(base.cast(), len, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|b| **b & 1 == 1).count()
}

/// The region is a mapping of its own, backed only where QuickJS has written, whatever the
/// process's global allocator does with large blocks: a VM's 144 MiB region (default limits)
/// must not become resident when a region is made again after another one was used and dropped.
#[cfg(target_os = "linux")]
#[test]
fn a_region_is_its_own_mapping_backed_only_where_it_was_written() {
    const LEN: usize = 32 << 20;
    for _ in 0..2 {
        let mut arena = Arena::new(LEN).unwrap();
        arena.set_limit(LEN);
        let base = arena.base.as_ptr();
        assert_eq!(base as usize % 4096, 0, "a mapping of its own starts on a page");
        assert_eq!(arena.capacity, LEN);
        // Only the control block's page was written.
        assert_eq!(resident_pages(base, LEN), 1);
        let refused = Arc::new(AtomicBool::new(false));
        let mut a = arena.allocator(refused);
        for _ in 0..64 {
            assert!(!a.alloc(4096).is_null());
        }
        let resident = resident_pages(base, LEN);
        assert!((2..=80).contains(&resident), "{resident} pages backed for ~64 written");
        // Dirty the whole region past the control block (which the drop reads) before
        // dropping it: the next one must still start untouched.
        // SAFETY (test): the region's bytes, not in use by any runtime; the allocator handle
        // is not used again.
        unsafe { std::ptr::write_bytes(base.add(FIRST_BLOCK), 0xA5, LEN - FIRST_BLOCK) };
    }
}

#[test]
fn classes_cover_every_size_with_at_most_a_quarter_wasted() {
    let mut prev = 0;
    for class in 0..CLASSES {
        let s = class_size(class);
        assert!(s >= prev, "class sizes grow");
        assert_eq!(s % GRANULE, 0);
        prev = s;
    }
    for size in (1..5000).chain([1 << 20, (1 << 20) + 1, 3 << 27, (1 << 39) - 1]) {
        let class = class_of(size).unwrap();
        let s = class_size(class);
        assert!(s >= size, "{size} fits class {class} ({s})");
        if size > 256 {
            assert!(s - size <= size / 4 + GRANULE, "{size} in {s} wastes too much");
            assert!(class == 0 || class_size(class - 1) < size || class == 16, "{size}: smallest class");
        }
    }
    assert_eq!(class_of(usize::MAX / 2), None);
}

#[test]
fn blocks_are_recycled_by_class_and_the_limit_is_enforced() {
    let arena = Arena::new(1 << 20).unwrap();
    let refused = Arc::new(AtomicBool::new(false));
    let mut a = arena.allocator(refused.clone());
    // SAFETY (test): the limit is set while nothing else uses the arena.
    unsafe { (*arena.control()).limit = 64 << 10 };
    let p = a.alloc(100);
    let q = a.alloc(100);
    assert!(!p.is_null() && !q.is_null() && p != q);
    assert_eq!(p as usize % 16, 0);
    // SAFETY (test): live blocks of this allocator.
    unsafe {
        assert_eq!(ArenaAllocator::usable_size(p), 112);
        a.dealloc(p);
    }
    assert_eq!(a.alloc(97), p, "a freed block of the class is reused");
    // Growing in place within the class, moving beyond it with the contents.
    // SAFETY (test): `q` is live; 100 bytes written, then read back from the moved block.
    unsafe {
        std::ptr::write_bytes(q, 7, 100);
        assert_eq!(a.realloc(q, 110), q);
        let r = a.realloc(q, 1000);
        assert!(!r.is_null() && r != q);
        assert!(std::slice::from_raw_parts(r, 100).iter().all(|b| *b == 7));
    }
    assert!(!refused.load(Ordering::Relaxed));
    assert!(a.alloc(80 << 10).is_null(), "over the limit");
    assert!(refused.load(Ordering::Relaxed));
    // A pointer the arena never handed out is ignored, not written through.
    let mut outside = [0usize; 4];
    // SAFETY (test): exercising the defensive check; the pointer is never written.
    unsafe { a.dealloc(outside.as_mut_ptr().cast::<u8>().add(16)) };
    assert_eq!(outside, [0; 4]);
}

#[test]
fn the_region_has_a_fixed_capacity() {
    let arena = Arena::new(64 << 10).unwrap();
    let mut a = arena.allocator(Arc::new(AtomicBool::new(false)));
    // SAFETY (test): the limit is set while nothing else uses the arena.
    unsafe { (*arena.control()).limit = usize::MAX };
    let mut n = 0;
    while !a.alloc(1000).is_null() {
        n += 1;
        assert!(n < 100, "the region ends");
    }
    assert!(n > 40);
}

#[test]
fn reset_returns_the_region_to_its_image_byte_for_byte() {
    let mut arena = Arena::new(1 << 20).unwrap();
    arena.set_limit(1 << 20);
    let mut a = arena.allocator(Arc::new(AtomicBool::new(false)));
    let kept = a.alloc(300);
    // SAFETY (test): writing the block just allocated.
    unsafe { std::ptr::write_bytes(kept, 1, 300) };
    assert!(arena.take_image());
    let used = arena.used();
    let carved = arena.carved();
    // A "run": writes the image's block, frees it, allocates and fills more.
    // SAFETY (test): live blocks of this allocator.
    unsafe {
        std::ptr::write_bytes(kept, 9, 300);
        a.dealloc(kept);
    }
    for _ in 0..50 {
        let p = a.alloc(2000);
        // SAFETY (test): writing the block just allocated.
        unsafe { std::ptr::write_bytes(p, 0xAB, 2000) };
    }
    let beyond = arena.carved() - carved;
    assert!(beyond > 0);
    assert_eq!(arena.reset(), beyond);
    assert!(arena.is_pristine(1 << 20));
    assert_eq!((arena.used(), arena.carved()), (used, carved));
    // The image's block is allocated again, not on a free list: the next allocation is new.
    assert_ne!(a.alloc(300), kept);
}

#[test]
fn large_blocks_come_from_the_system_and_a_reset_frees_them() {
    let mut arena = Arena::new(1 << 20).unwrap();
    arena.set_limit(8 << 20);
    let refused = Arc::new(AtomicBool::new(false));
    let mut a = arena.allocator(refused.clone());
    assert!(arena.take_image());
    let used = arena.used();
    let carved = arena.carved();
    // Three large blocks (one zeroed), one grown through realloc with its contents, one freed,
    // one shrunk back into the region.
    let p = a.alloc(LARGE);
    let q = a.calloc(3, LARGE);
    let r = a.alloc(LARGE + 1);
    assert!(![p, q, r].iter().any(|x| x.is_null() || a.in_region(*x) || !(*x as usize).is_multiple_of(16)));
    // SAFETY (test): live blocks of this allocator, written within their sizes.
    unsafe {
        assert_eq!(ArenaAllocator::usable_size(p), LARGE);
        assert!(std::slice::from_raw_parts(q, 3 * LARGE).iter().all(|b| *b == 0));
        std::ptr::write_bytes(p, 5, LARGE);
        let p = a.realloc(p, 4 * LARGE);
        assert!(!p.is_null() && std::slice::from_raw_parts(p, LARGE).iter().all(|b| *b == 5));
        assert_eq!(ArenaAllocator::usable_size(p), 4 * LARGE);
        a.dealloc(q);
        std::ptr::write_bytes(r, 6, 100);
        let small = a.realloc(r, 100);
        assert!(a.in_region(small) && std::slice::from_raw_parts(small, 100).iter().all(|b| *b == 6));
    }
    assert_eq!(arena.used(), used + 4 * LARGE + 112, "exact sizes for large blocks, classes for small");
    // Over the limit: refused and recorded, nothing allocated.
    assert!(a.alloc(8 << 20).is_null() && refused.load(Ordering::Relaxed));
    // SAFETY (test): reading the control block while nothing allocates.
    assert_ne!(unsafe { (*arena.control()).large }, 0);
    arena.reset();
    // SAFETY (test): as above.
    assert_eq!(unsafe { (*arena.control()).large }, 0, "the run's large blocks were freed");
    assert_eq!((arena.used(), arena.carved()), (used, carved));
    assert!(arena.is_pristine(1 << 20));
    // An image is refused while a large block lives (a reset would free what it points at).
    let _kept = a.alloc(LARGE);
    assert!(!arena.take_image());
}

/// A live block of the model: pointer, size asked, fill byte.
type Block = (*mut u8, usize, u8);

/// One step of a random allocation history (sizes straddle the region's classes and `LARGE`).
#[derive(Debug, Clone)]
enum Op {
    Alloc(usize),
    Calloc(usize),
    Free(usize),
    Realloc(usize, usize),
    /// Take the image (once) or reset to it.
    Reset,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    let size = prop_oneof![1usize..600, 600usize..20_000, (LARGE - 64)..(LARGE + 64), LARGE..(3 * LARGE)];
    prop_oneof![
        4 => size.clone().prop_map(Op::Alloc),
        1 => size.clone().prop_map(Op::Calloc),
        3 => any::<usize>().prop_map(Op::Free),
        2 => (any::<usize>(), size).prop_map(|(i, n)| Op::Realloc(i, n)),
        1 => Just(Op::Reset),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Against a model of what each live block must hold: blocks never overlap, keep their
    /// contents through reallocation, are as large as asked, aligned, and accounted for; a
    /// reset brings back exactly the blocks (and bytes) of the image and the image's accounting.
    #[test]
    fn the_allocator_matches_a_model_of_live_blocks(ops in proptest::collection::vec(op(), 1..120)) {
        let mut arena = Arena::new(8 << 20).unwrap();
        arena.set_limit(6 << 20);
        let mut a = arena.allocator(Arc::new(AtomicBool::new(false)));
        // Live blocks: pointer, size asked, fill byte.
        let mut live: Vec<Block> = Vec::new();
        let mut image: Option<(Vec<Block>, usize)> = None;
        let mut fill = 0u8;
        for op in ops {
            match op {
                Op::Alloc(n) | Op::Calloc(n) => {
                    let zeroed = matches!(op, Op::Calloc(_));
                    let p = if zeroed { a.calloc(1, n) } else { a.alloc(n) };
                    if p.is_null() {
                        continue;
                    }
                    fill = fill.wrapping_add(1);
                    // SAFETY (test): a fresh block of at least `n` bytes.
                    unsafe {
                        if zeroed {
                            proptest::prop_assert!(std::slice::from_raw_parts(p, n).iter().all(|b| *b == 0));
                        }
                        proptest::prop_assert!(ArenaAllocator::usable_size(p) >= n);
                        std::ptr::write_bytes(p, fill, n);
                    }
                    proptest::prop_assert!((p as usize).is_multiple_of(16));
                    live.push((p, n, fill));
                }
                Op::Free(i) if !live.is_empty() => {
                    let (p, _, _) = live.swap_remove(i % live.len());
                    // SAFETY (test): a live block, freed once.
                    unsafe { a.dealloc(p) };
                }
                Op::Realloc(i, n) if !live.is_empty() => {
                    let k = i % live.len();
                    let (p, old, f) = live[k];
                    // SAFETY (test): a live block; on success the old pointer is gone.
                    let q = unsafe { a.realloc(p, n) };
                    if q.is_null() {
                        continue;
                    }
                    // SAFETY (test): the block holds the smaller of both sizes of its old bytes.
                    unsafe {
                        proptest::prop_assert!(std::slice::from_raw_parts(q, old.min(n)).iter().all(|b| *b == f));
                        std::ptr::write_bytes(q, f, n);
                    }
                    live[k] = (q, n, f);
                }
                Op::Reset => match &image {
                    None => {
                        if arena.take_image() {
                            image = Some((live.clone(), arena.used()));
                        }
                    }
                    Some((blocks, used)) => {
                        arena.reset();
                        live = blocks.clone();
                        proptest::prop_assert_eq!(arena.used(), *used);
                    }
                },
                _ => {}
            }
            // Every live block still holds its own fill: nothing overlapped it.
            for (p, n, f) in &live {
                // SAFETY (test): a live block of `n` bytes.
                let ok = unsafe { std::slice::from_raw_parts(*p, *n).iter().all(|b| b == f) };
                proptest::prop_assert!(ok, "a block of {} bytes was overwritten", n);
            }
        }
        // The accounting: live bytes as the allocator counts them.
        // SAFETY (test): live blocks.
        let counted: usize = live.iter().map(|(p, _, _)| unsafe { ArenaAllocator::usable_size(*p) }).sum();
        proptest::prop_assert_eq!(arena.used(), counted);
        for (p, _, _) in live {
            // SAFETY (test): each live block freed once.
            unsafe { a.dealloc(p) };
        }
        proptest::prop_assert_eq!(arena.used(), 0);
    }
}
