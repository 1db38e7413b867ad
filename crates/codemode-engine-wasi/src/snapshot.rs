//! The serialized snapshot format of the `quickjs-wasi` engine (version 2).
//!
//! ```text
//! magic        8 bytes   "CMWSNAP\x01"
//! header_len   u32 LE
//! header       JSON      {format, engine, build, memoryBytes, pageSize, globals, bridge}
//! body_len     u32 LE
//! body         zstd      page*, page indexes strictly ascending:
//!                          index u32 LE, run count u16 LE (at least 1), run*
//!                        run, whole 8-byte words, in ascending order with at least one word
//!                        between two runs:
//!                          offset u16 LE, length u16 LE (at least 8), `length` bytes
//! digest       32 bytes  SHA-256 of everything before it
//! ```
//!
//! Only pages that differ from the pre-initialized image are kept, and of those only the runs of
//! 8-byte words that differ, XOR-ed with the image (past the image's end, as they are: fresh memory
//! there is zero). A cell suspended on one call changes ~40 pages but only ~5 KB of them: version 1
//! kept whole XOR-ed pages (~160 KB before compression), and compressing and decompressing those
//! was the largest piece of a suspend + resume.
//!
//! The stack below the stack pointer is not kept: snapshots are taken between drive steps, when no
//! guest function is running, so that part of the stack is dead (the guest is linked with its stack
//! first, below all data; a test of the module checks it). Restoring leaves the image's bytes there.
//!
//! A snapshot of another engine build (`build` differs) or format is refused, and so is any byte
//! flipped or cut off (the digest). Restoring hostile bytes can at worst give the guest a strange
//! memory: it still runs inside the wasm sandbox with every limit in force.

use codemode_bridge::BridgeState;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"CMWSNAP\x01";
/// The format version in the header.
pub(crate) const FORMAT: u32 = 2;
/// Granularity of the diff against the base image.
pub(crate) const PAGE: usize = 4096;
const DIGEST_LEN: usize = 32;
/// zstd level: the fastest positive level; on these runs it compresses as well as level 3 (a cell
/// suspended on one call: 8.7 KB of runs, 5.5 KB compressed at either level).
const ZSTD_LEVEL: i32 = 1;
/// Granularity of the runs within a page.
const WORD: usize = 8;

thread_local! {
    /// Each thread's zstd contexts, made once: creating one per snapshot (a few hundred KiB of
    /// tables, allocated and initialized) cost two thirds of what compressing a small snapshot did.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` on this thread's context in `cell`, made by `make` on first use.
fn with_context<T, R>(
    cell: &'static std::thread::LocalKey<std::cell::RefCell<Option<T>>>,
    make: impl FnOnce() -> std::io::Result<T>,
    f: impl FnOnce(&mut T) -> std::io::Result<R>,
) -> std::io::Result<R> {
    cell.with(|cell| {
        let mut slot = cell.try_borrow_mut().map_err(std::io::Error::other)?;
        let context = match slot.as_mut() {
            Some(c) => c,
            None => slot.insert(make()?),
        };
        f(context)
    })
}

fn compress(body: &[u8]) -> std::io::Result<Vec<u8>> {
    with_context(&COMPRESSOR, || zstd::bulk::Compressor::new(ZSTD_LEVEL), |c| c.compress(body))
}

/// Decompresses `body`, refusing more than `limit` bytes. The buffer is sized by the frame's own
/// content size when it states one within `limit` (the encoder always does), not by `limit`.
fn decompress(body: &[u8], limit: usize) -> std::io::Result<Vec<u8>> {
    let capacity = match zstd::zstd_safe::get_frame_content_size(body) {
        Ok(Some(n)) if n <= limit as u64 => n as usize,
        Ok(Some(_)) => return Err(std::io::Error::other("the body states a size larger than its memory")),
        _ => limit,
    };
    with_context(&DECOMPRESSOR, zstd::bulk::Decompressor::new, |d| d.decompress(body, capacity))
}

/// Largest linear memory a snapshot may describe: the largest an instance can have (a forged header
/// claiming more is refused before anything is decompressed).
const MAX_MEMORY: u64 = crate::module::MAX_MEMORY as u64;

/// A mutable global's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum GlobalValue {
    /// An `i32`.
    I32(i32),
    /// An `i64`.
    I64(i64),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Header {
    pub(crate) format: u32,
    pub(crate) engine: String,
    pub(crate) build: String,
    pub(crate) memory_bytes: u64,
    pub(crate) page_size: u32,
    pub(crate) globals: Vec<(String, GlobalValue)>,
    pub(crate) bridge: BridgeState,
}

/// A decoded snapshot: the header and the bytes that differ from the base image, as
/// `(address, content)` runs (the content is the memory's, already XOR-ed back with the image).
#[derive(Debug)]
pub(crate) struct Decoded {
    pub(crate) header: Header,
    /// The decompressed body, its runs' bytes XOR-ed back with the base image in place (one buffer,
    /// not one allocation per run).
    raw: Vec<u8>,
    /// Each run's address in memory and where its bytes lie in `raw` (checked while decoding).
    spans: Vec<(usize, std::ops::Range<usize>)>,
}

impl Decoded {
    /// Each run: its address in memory and the memory's content there.
    pub(crate) fn runs(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        self.spans.iter().map(|(at, span)| (*at, self.raw.get(span.clone()).unwrap_or_default()))
    }
}

static ZERO_PAGE: [u8; PAGE] = [0; PAGE];

/// The base image's page `index` (zeros past the image's end; the image is whole pages).
fn base_page(base: &[u8], index: usize) -> &[u8] {
    base.get(index * PAGE..(index + 1) * PAGE).unwrap_or(&ZERO_PAGE)
}

/// XORs `bytes` with the base image at `start` (past the image, with zeros: they stay as they are).
/// Applying it twice gives the bytes back.
fn xor_base(base: &[u8], start: usize, bytes: &mut [u8]) {
    if let Some(b) = base.get(start..(start + bytes.len()).min(base.len())) {
        for (p, b) in bytes.iter_mut().zip(b) {
            *p ^= *b;
        }
    }
}

/// Words per block of [`encode_page`]'s first, coarse comparison.
const BLOCK_WORDS: usize = 32;

/// Whether the first [`BLOCK_WORDS`] words of `a` and `b` are equal (false when either is
/// shorter): one `memcmp`, which uses the widest vector instructions the machine has.
fn block_equal(a: &[u8], b: &[u8]) -> bool {
    const BLOCK: usize = BLOCK_WORDS * WORD;
    match (a.get(..BLOCK), b.get(..BLOCK)) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// An 8-byte word of memory (little-endian, as wasm stores it; any fixed order would do).
fn word(bytes: &[u8]) -> u64 {
    let mut w = [0u8; WORD];
    w.copy_from_slice(&bytes[..WORD]);
    u64::from_le_bytes(w)
}

/// Appends page `index`'s record to `body` if the page differs from the image: the runs of 8-byte
/// words that differ, XOR-ed with the image.
fn encode_page(body: &mut Vec<u8>, index: usize, page: &[u8], image: &[u8]) -> Result<(), SnapshotError> {
    // Equal pages are the common case: one memcmp each.
    if page == image {
        return Ok(());
    }
    // Words compared as integers (a slice comparison per word would be a `memcmp` call each), runs
    // found and XOR-ed in one pass, with no per-page buffer.
    let words = PAGE / WORD;
    let differs = |w: usize| word(&page[w * WORD..]) != word(&image[w * WORD..]);
    body.extend_from_slice(&u32::try_from(index).map_err(SnapshotError::TooLarge)?.to_le_bytes());
    let count_at = body.len();
    body.extend_from_slice(&[0, 0]);
    let mut runs = 0u16;
    let mut w = 0;
    while w < words {
        // A written page usually differs in a few words (a reference count, a free-list link): equal
        // blocks of words are passed over with one comparison each.
        if w % BLOCK_WORDS == 0 && block_equal(&page[w * WORD..], &image[w * WORD..]) {
            w += BLOCK_WORDS;
            continue;
        }
        if !differs(w) {
            w += 1;
            continue;
        }
        let first = w;
        while w < words && differs(w) {
            w += 1;
        }
        // Offsets and lengths fit u16: a page is 4096 bytes.
        body.extend_from_slice(&((first * WORD) as u16).to_le_bytes());
        body.extend_from_slice(&(((w - first) * WORD) as u16).to_le_bytes());
        for i in first..w {
            body.extend_from_slice(&(word(&page[i * WORD..]) ^ word(&image[i * WORD..])).to_le_bytes());
        }
        runs += 1;
    }
    body[count_at..count_at + 2].copy_from_slice(&runs.to_le_bytes());
    Ok(())
}

/// Why a snapshot could not be encoded or decoded. Decoding errors describe untrusted bytes: a
/// damaged, truncated, forged or foreign snapshot is refused before any of it reaches a VM.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Compression failed.
    #[error("compression failed: {0}")]
    Compress(#[source] std::io::Error),
    /// A part is larger than the format can describe.
    #[error("snapshot part too large: {0}")]
    TooLarge(#[source] std::num::TryFromIntError),
    /// The header could not be written or read.
    #[error("bad snapshot header: {0}")]
    Header(#[source] serde_json::Error),
    /// Not a snapshot of this engine at all.
    #[error("not a quickjs-wasi snapshot (bad magic)")]
    BadMagic,
    /// The SHA-256 digest does not match the content.
    #[error("the snapshot is corrupt or truncated (digest mismatch)")]
    Digest,
    /// The content ends early.
    #[error("the snapshot is truncated")]
    Truncated,
    /// Another format version.
    #[error("snapshot format {found} is not supported (expected {expected})")]
    Format {
        /// The snapshot's format.
        found: u32,
        /// This build's format.
        expected: u32,
    },
    /// Taken by another engine.
    #[error("snapshot was taken by engine `{found}`, not `{expected}`")]
    Engine {
        /// The snapshot's engine.
        found: String,
        /// This engine.
        expected: String,
    },
    /// Taken by another build of this engine (another guest module).
    #[error("snapshot was taken by another build of the engine ({found}; this build is {expected})")]
    Build {
        /// The snapshot's build id.
        found: String,
        /// This build's id.
        expected: String,
    },
    /// The header describes a memory this engine could not have.
    #[error("snapshot header has an impossible memory layout")]
    Layout,
    /// Bytes after the body.
    #[error("trailing bytes after the snapshot body")]
    Trailing,
    /// The body does not decompress (within the memory's size).
    #[error("cannot decompress the snapshot: {0}")]
    Decompress(#[source] std::io::Error),
    /// The body ends inside a page's record.
    #[error("snapshot body has a partial page")]
    PartialPage,
    /// A page's runs are missing, empty, not whole words, out of order, touching or overlapping,
    /// or past the page's end.
    #[error("snapshot page {0} has a malformed run")]
    BadRun(u32),
    /// A page index beyond the memory.
    #[error("snapshot page {0} lies outside its memory")]
    PageOutOfRange(u32),
}

/// Encodes `memory` (diffed against `base`) with its header. Memory below `dead_below` (the stack
/// under the stack pointer, between drive steps) is left out, in whole pages. `written`, when
/// known, says for each page from `dead_below`'s on whether it may differ from `base` at all (see
/// [`crate::written`]): the pages it rules out are not compared.
pub(crate) fn encode(
    header: &Header,
    base: &[u8],
    memory: &[u8],
    dead_below: usize,
    written: Option<&[bool]>,
) -> Result<Vec<u8>, SnapshotError> {
    if !memory.len().is_multiple_of(PAGE) || !base.len().is_multiple_of(PAGE) {
        return Err(SnapshotError::Layout);
    }
    let first = dead_below / PAGE;
    let mut body = Vec::with_capacity(16 << 10);
    for (i, page) in memory.chunks_exact(PAGE).enumerate().skip(first) {
        // Pages past the hint's end are compared.
        if written.is_some_and(|w| w.get(i - first) == Some(&false)) {
            continue;
        }
        encode_page(&mut body, i, page, base_page(base, i))?;
    }
    seal(header, &body)
}

/// Frames an uncompressed `body` with `header`: compresses it and appends the digest.
fn seal(header: &Header, body: &[u8]) -> Result<Vec<u8>, SnapshotError> {
    let body = compress(body).map_err(SnapshotError::Compress)?;
    let header = serde_json::to_vec(header).map_err(SnapshotError::Header)?;
    let mut out = Vec::with_capacity(8 + 8 + header.len() + body.len() + DIGEST_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&u32::try_from(header.len()).map_err(SnapshotError::TooLarge)?.to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&u32::try_from(body.len()).map_err(SnapshotError::TooLarge)?.to_le_bytes());
    out.extend_from_slice(&body);
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    Ok(out)
}

/// The next `n` bytes at `at`, which moves past them; `None` when fewer are left. (Options, not
/// results: a `Result` with the error type here cost a call to its drop glue per field read.)
fn take<'a>(bytes: &'a [u8], at: &mut usize, n: usize) -> Option<&'a [u8]> {
    let end = at.checked_add(n)?;
    let s = bytes.get(*at..end)?;
    *at = end;
    Some(s)
}

fn u32_at(bytes: &[u8], at: &mut usize) -> Option<u32> {
    take(bytes, at, 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Decodes and checks a snapshot: magic, digest, format, engine, build, bounds and order of every
/// page and run. Runs come back as the memory's content (already XOR-ed back with `base`).
pub(crate) fn decode(bytes: &[u8], engine: &str, build: &str, base: &[u8]) -> Result<Decoded, SnapshotError> {
    let (header, body) = check(bytes, engine, build)?;
    let pages_in_memory = header.memory_bytes as usize / PAGE;
    // The most a valid body can hold: every page as one run (whole words, a word between runs:
    // 256 one-word runs take less).
    let max_raw = pages_in_memory.saturating_mul(4 + 2 + 4 + PAGE);
    let mut raw = decompress(body, max_raw).map_err(SnapshotError::Decompress)?;
    let mut spans = Vec::new();
    let mut at = 0;
    let mut next_page = 0usize;
    while at < raw.len() {
        let index = u32_at(&raw, &mut at).ok_or(SnapshotError::PartialPage)? as usize;
        if index >= pages_in_memory || index < next_page {
            return Err(SnapshotError::PageOutOfRange(index as u32));
        }
        next_page = index + 1;
        let count = u16_at(&raw, &mut at).ok_or(SnapshotError::PartialPage)?;
        if count == 0 {
            return Err(SnapshotError::BadRun(index as u32));
        }
        let mut next_offset = 0usize;
        for _ in 0..count {
            let offset = usize::from(u16_at(&raw, &mut at).ok_or(SnapshotError::PartialPage)?);
            let len = usize::from(u16_at(&raw, &mut at).ok_or(SnapshotError::PartialPage)?);
            if len == 0 || offset % WORD != 0 || len % WORD != 0 || offset < next_offset || offset + len > PAGE {
                return Err(SnapshotError::BadRun(index as u32));
            }
            // The encoder's runs are maximal: the next one starts a word or more further on.
            next_offset = offset + len + WORD;
            let start = at;
            take(&raw, &mut at, len).ok_or(SnapshotError::PartialPage)?;
            spans.push((index * PAGE + offset, start..at));
        }
    }
    for (address, span) in &spans {
        if let Some(content) = raw.get_mut(span.clone()) {
            xor_base(base, *address, content);
        }
    }
    Ok(Decoded { header, raw, spans })
}

fn u16_at(bytes: &[u8], at: &mut usize) -> Option<u16> {
    take(bytes, at, 2).map(|s| u16::from_le_bytes([s[0], s[1]]))
}

/// Checks a snapshot without decompressing it: magic, digest, format, engine, build and layout.
/// Returns the header and the compressed body. What [`decode`] checks first, and what the engine's
/// `verify` checks before a resumed run's calls start (a run file that is corrupt, cut off, or of
/// another engine build is refused before anything of the run happens).
pub(crate) fn check<'a>(bytes: &'a [u8], engine: &str, build: &str) -> Result<(Header, &'a [u8]), SnapshotError> {
    if bytes.len() < MAGIC.len() + DIGEST_LEN || &bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::BadMagic);
    }
    let (content, digest) = bytes.split_at(bytes.len() - DIGEST_LEN);
    if Sha256::digest(content).as_slice() != digest {
        return Err(SnapshotError::Digest);
    }
    let mut at = MAGIC.len();
    let header_len = u32_at(content, &mut at).ok_or(SnapshotError::Truncated)? as usize;
    let header: Header = serde_json::from_slice(take(content, &mut at, header_len).ok_or(SnapshotError::Truncated)?)
        .map_err(SnapshotError::Header)?;
    if header.format != FORMAT {
        return Err(SnapshotError::Format { found: header.format, expected: FORMAT });
    }
    if header.engine != engine {
        return Err(SnapshotError::Engine { found: header.engine, expected: engine.to_string() });
    }
    if header.build != build {
        return Err(SnapshotError::Build { found: header.build, expected: build.to_string() });
    }
    if header.page_size as usize != PAGE
        || header.memory_bytes > MAX_MEMORY
        || !header.memory_bytes.is_multiple_of(65536)
    {
        return Err(SnapshotError::Layout);
    }
    let body_len = u32_at(content, &mut at).ok_or(SnapshotError::Truncated)? as usize;
    let body = take(content, &mut at, body_len).ok_or(SnapshotError::Truncated)?;
    if at != content.len() {
        return Err(SnapshotError::Trailing);
    }
    Ok((header, body))
}

/// The decoder's entry points for fuzzers (`codemode-fuzzing`): untrusted bytes go through the
/// same [`check`] and [`decode`] a restore uses. [`seal_raw`](fuzzing::seal_raw) frames any header
/// and page-table bytes with a correct digest, so a fuzzer reaches the header and page-table
/// checks behind the digest instead of stopping at it.
pub mod fuzzing {
    use super::{Header, MAGIC, PAGE, SnapshotError, compress, decode, encode};
    use sha2::{Digest, Sha256};

    /// The engine name the fuzzing entry points decode for.
    pub const ENGINE: &str = "quickjs-wasi";
    /// The build id the fuzzing entry points decode for.
    pub const BUILD: &str = "fuzz";
    /// The format's page size.
    pub const PAGE_SIZE: usize = PAGE;

    /// A valid header (as JSON) for a memory of `memory_bytes`.
    pub fn header_json(memory_bytes: u64) -> Vec<u8> {
        let header = Header {
            format: super::FORMAT,
            engine: ENGINE.into(),
            build: BUILD.into(),
            memory_bytes,
            page_size: PAGE as u32,
            globals: Vec::new(),
            bridge: Default::default(),
        };
        serde_json::to_vec(&header).unwrap_or_default()
    }

    /// Frames `header` (any bytes, meant as the JSON header) and `body` (any bytes, meant as the
    /// uncompressed page table) as a snapshot with a correct digest.
    pub fn seal_raw(header: &[u8], body: &[u8]) -> Vec<u8> {
        let body = compress(body).unwrap_or_default();
        let mut out = Vec::with_capacity(16 + header.len() + body.len() + 32);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(header);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        let digest = Sha256::digest(&out);
        out.extend_from_slice(&digest);
        out
    }

    /// Runs of a decoded snapshot: `(address, memory content)`.
    pub type Runs = Vec<(usize, Vec<u8>)>;

    /// Decodes `bytes` (for [`ENGINE`] / [`BUILD`]) against the base image `base`: the memory size
    /// its header states and every run.
    pub fn decode_runs(bytes: &[u8], base: &[u8]) -> Result<(u64, Runs), SnapshotError> {
        let d = decode(bytes, ENGINE, BUILD, base)?;
        Ok((d.header.memory_bytes, d.runs().map(|(at, c)| (at, c.to_vec())).collect()))
    }

    /// Encodes `memory` (whole pages) against `base` (whole pages) with a valid header.
    pub fn encode_memory(base: &[u8], memory: &[u8]) -> Result<Vec<u8>, SnapshotError> {
        let header: Header =
            serde_json::from_slice(&header_json(memory.len() as u64)).map_err(SnapshotError::Header)?;
        encode(&header, base, memory, 0, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(memory_bytes: u64) -> Header {
        Header {
            format: FORMAT,
            engine: "quickjs-wasi".into(),
            build: "b1".into(),
            memory_bytes,
            page_size: PAGE as u32,
            globals: vec![("__stack_pointer".into(), GlobalValue::I32(1 << 20))],
            bridge: BridgeState::default(),
        }
    }

    /// Rebuilds the memory a decoded snapshot describes, on top of `base` grown to `len`.
    fn rebuild(base: &[u8], len: usize, d: &Decoded) -> Vec<u8> {
        let mut m = base.to_vec();
        m.resize(len, 0);
        for (at, content) in d.runs() {
            m[at..at + content.len()].copy_from_slice(content);
        }
        m
    }

    #[test]
    fn round_trip_stores_only_changed_words() {
        let base = vec![7u8; 65536 * 2];
        let mut mem = base.clone();
        mem.resize(65536 * 3, 0);
        mem[5] = 1; // page 0
        mem[65536 * 2 + 9003] = 3; // past the base image (in the word at 9000)
        mem[65536 + 100..65536 + 140].fill(9); // one run of six words (100 is not word-aligned)
        let bytes = encode(&header(mem.len() as u64), &base, &mem, 0, None).unwrap();
        let d = decode(&bytes, "quickjs-wasi", "b1", &base).unwrap();
        let runs: Vec<(usize, usize)> = d.runs().map(|(at, c)| (at, c.len())).collect();
        assert_eq!(runs, vec![(0, 8), (65536 + 96, 48), (65536 * 2 + 9000, 8)]);
        assert_eq!(d.header, header(mem.len() as u64));
        assert_eq!(rebuild(&base, mem.len(), &d), mem);
    }

    /// The page-table hint only ever skips pages: pages it marks as possibly written are compared
    /// as before, pages it rules out are not looked at (here one that does differ, to show it is
    /// skipped), a hint shorter than the memory leaves the rest compared, and a page marked
    /// written that equals the image leaves no record.
    #[test]
    fn the_written_hint_skips_only_the_pages_it_rules_out() {
        let base = vec![7u8; PAGE * 16];
        let mut mem = base.clone();
        for page in [1, 3, 6, 7] {
            mem[page * PAGE + 8] = 1;
        }
        let pages = |bytes: &[u8]| -> Vec<usize> {
            let d = decode(bytes, "quickjs-wasi", "b1", &base).unwrap();
            d.runs().map(|(at, _)| at / PAGE).collect()
        };
        let h = header(mem.len() as u64);
        let all = encode(&h, &base, &mem, 0, None).unwrap();
        assert_eq!(pages(&all), vec![1, 3, 6, 7]);
        // Pages 2 and 5 "written" but equal to the image; page 3 ruled out although it differs.
        let hint = [false, true, true, false, false, true, true];
        assert_eq!(pages(&encode(&h, &base, &mem, 0, Some(&hint)).unwrap()), vec![1, 6, 7], "page 7 is past the hint");
        // The hint starts at the first live page (here page 2, under a dead stack).
        let hint = [false, true, false, false, true, false];
        assert_eq!(pages(&encode(&h, &base, &mem, 2 * PAGE, Some(&hint)).unwrap()), vec![3, 6]);
        // Every page marked: the same bytes as no hint at all.
        assert_eq!(encode(&h, &base, &mem, 0, Some(&[true; 16])).unwrap(), all);
    }

    /// Runs are exact at their edges: a run across a 64-word boundary, runs of one word on either
    /// side of one, 64 words from a page's start, a run over two boundaries, a whole page, the
    /// page's last word.
    #[test]
    fn runs_are_exact_at_their_edges() {
        let base = vec![7u8; 65536];
        let mut mem = base.clone();
        let mut change = |from: usize, to: usize| mem[from..to].fill(1);
        change(60 * WORD, 70 * WORD);
        change(PAGE + 63 * WORD, PAGE + 64 * WORD);
        change(2 * PAGE + 64 * WORD, 2 * PAGE + 65 * WORD);
        change(3 * PAGE, 4 * PAGE);
        change(4 * PAGE, 4 * PAGE + 64 * WORD);
        change(5 * PAGE - WORD, 5 * PAGE);
        change(5 * PAGE + 100 * WORD, 5 * PAGE + 200 * WORD);
        let bytes = encode(&header(mem.len() as u64), &base, &mem, 0, None).unwrap();
        let d = decode(&bytes, "quickjs-wasi", "b1", &base).unwrap();
        let runs: Vec<(usize, usize)> = d.runs().map(|(at, c)| (at, c.len())).collect();
        assert_eq!(
            runs,
            vec![
                (60 * WORD, 10 * WORD),
                (PAGE + 63 * WORD, WORD),
                (2 * PAGE + 64 * WORD, WORD),
                (3 * PAGE, PAGE),
                (4 * PAGE, 64 * WORD),
                (5 * PAGE - WORD, WORD),
                (5 * PAGE + 100 * WORD, 100 * WORD),
            ]
        );
        assert_eq!(rebuild(&base, mem.len(), &d), mem);
    }

    /// Many scattered changes (an xorshift stream of positions and values) come back exactly, and
    /// the dead region under `dead_below` is left out in whole pages.
    #[test]
    fn scattered_changes_round_trip_and_the_dead_stack_is_left_out() {
        let base: Vec<u8> = (0..65536 * 4).map(|i| (i * 31 % 251) as u8).collect();
        let mut mem = base.clone();
        mem.resize(65536 * 6, 0);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..3000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = (x % mem.len() as u64) as usize;
            mem[at] = mem[at].wrapping_add((x >> 40) as u8 | 1);
        }
        let bytes = encode(&header(mem.len() as u64), &base, &mem, 0, None).unwrap();
        let d = decode(&bytes, "quickjs-wasi", "b1", &base).unwrap();
        assert_eq!(rebuild(&base, mem.len(), &d), mem);
        // Under 3 pages plus a bit: the stack under a stack pointer inside page 3.
        let dead = 3 * PAGE + 100;
        let bytes = encode(&header(mem.len() as u64), &base, &mem, dead, None).unwrap();
        let d = decode(&bytes, "quickjs-wasi", "b1", &base).unwrap();
        assert!(d.runs().all(|(at, _)| at >= 3 * PAGE), "nothing of the dead pages");
        assert!(d.runs().any(|(at, _)| at < 4 * PAGE), "the page holding the stack pointer stays");
        let mut want = mem.clone();
        want[..3 * PAGE].copy_from_slice(&base[..3 * PAGE]);
        assert_eq!(rebuild(&base, mem.len(), &d), want);
    }

    /// A hostile snapshot may carry a correct digest over a malformed body (anyone can compute a
    /// SHA-256): every malformed record is refused before any byte reaches a memory.
    #[test]
    fn malformed_bodies_with_valid_digests_are_refused() {
        let base = vec![0u8; 65536];
        let h = header(65536);
        let page = |index: u32, runs: &[(u16, u16)]| {
            let mut b = index.to_le_bytes().to_vec();
            b.extend_from_slice(&(runs.len() as u16).to_le_bytes());
            for &(off, len) in runs {
                b.extend_from_slice(&off.to_le_bytes());
                b.extend_from_slice(&len.to_le_bytes());
                b.extend(std::iter::repeat_n(0xAA, usize::from(len)));
            }
            b
        };
        let good = [page(1, &[(0, 8), (16, 8)]), page(3, &[(4088, 8)]), page(4, &[(0, 4096)])].concat();
        let d = decode(&seal(&h, &good).unwrap(), "quickjs-wasi", "b1", &base).unwrap();
        assert_eq!(d.runs().count(), 4);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("page past the memory", page(16, &[(0, 8)])),
            ("pages out of order", [page(3, &[(0, 8)]), page(1, &[(0, 8)])].concat()),
            ("a page twice", [page(2, &[(0, 8)]), page(2, &[(8, 8)])].concat()),
            ("no runs", page(1, &[])),
            ("an empty run", page(1, &[(0, 0)])),
            ("a run past the page", page(1, &[(4090, 8)])),
            ("overlapping runs", page(1, &[(0, 16), (8, 8)])),
            ("touching runs", page(1, &[(0, 8), (8, 8)])),
            ("a run off a word boundary", page(1, &[(4, 8)])),
            ("a run of part of a word", page(1, &[(0, 12)])),
            ("runs out of order", page(1, &[(16, 8), (0, 8)])),
            ("cut inside a run", page(1, &[(0, 8)])[..10].to_vec()),
            ("cut inside a page index", vec![1, 0]),
        ];
        for (what, body) in cases {
            let bytes = seal(&h, &body).unwrap();
            assert!(decode(&bytes, "quickjs-wasi", "b1", &base).is_err(), "{what} was accepted");
        }
        // A body that inflates past what its memory could need (zeros compress ~1,000:1) is refused
        // by the decompressor, whatever size the frame states.
        let bomb = vec![0u8; 16 * (PAGE + 10) + 1];
        let e = decode(&seal(&h, &bomb).unwrap(), "quickjs-wasi", "b1", &base).unwrap_err();
        assert!(matches!(e, SnapshotError::Decompress(_)), "{e}");
        // A header claiming more memory than an instance can have is refused before decompressing.
        let huge = header(MAX_MEMORY + 65536);
        let e = decode(&seal(&huge, &good).unwrap(), "quickjs-wasi", "b1", &base).unwrap_err();
        assert!(matches!(e, SnapshotError::Layout), "{e}");
    }

    #[test]
    fn tampered_truncated_and_foreign_snapshots_are_refused() {
        let base = vec![0u8; 65536];
        let mut mem = base.clone();
        mem[100] = 42;
        let bytes = encode(&header(65536), &base, &mem, 0, None).unwrap();
        for i in [0, 9, 20, bytes.len() / 2, bytes.len() - 1] {
            let mut t = bytes.clone();
            t[i] ^= 0x40;
            assert!(decode(&t, "quickjs-wasi", "b1", &base).is_err(), "flip at {i}");
        }
        for n in [0, 7, 40, bytes.len() - 1] {
            assert!(decode(&bytes[..n], "quickjs-wasi", "b1", &base).is_err(), "cut at {n}");
        }
        assert!(matches!(decode(&bytes, "quickjs-wasi", "b2", &base), Err(SnapshotError::Build { .. })));
        assert!(matches!(decode(&bytes, "quickjs", "b1", &base), Err(SnapshotError::Engine { .. })));
    }
}
