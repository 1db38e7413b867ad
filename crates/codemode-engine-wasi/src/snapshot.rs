//! The serialized snapshot format of the `quickjs-wasi` engine (version 1).
//!
//! ```text
//! magic        8 bytes   "CMWSNAP\x01"
//! header_len   u32 LE
//! header       JSON      {format, engine, build, memoryBytes, pageSize, globals, bridge}
//! body_len     u32 LE
//! body         zstd      (page index u32 LE, 4096 bytes)*  — only pages that differ from the
//!                        pre-initialized image: XOR-ed with the image's page (so a page with a few
//!                        changed words is nearly all zeros and compresses to almost nothing), or
//!                        as they are past the image's end (zero pages there are omitted)
//! digest       32 bytes  SHA-256 of everything before it
//! ```
//!
//! A snapshot of another engine build (`build` differs) or format is refused, and so is any byte
//! flipped or cut off (the digest). Restoring hostile bytes can at worst give the guest a strange
//! memory: it still runs inside the wasm sandbox with every limit in force.

use codemode_bridge::BridgeState;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"CMWSNAP\x01";
/// The format version in the header.
pub(crate) const FORMAT: u32 = 1;
/// Granularity of the diff against the base image.
pub(crate) const PAGE: usize = 4096;
const DIGEST_LEN: usize = 32;
/// zstd level: fast, and ~4x smaller than raw pages.
const ZSTD_LEVEL: i32 = 3;

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

fn decompress(body: &[u8], capacity: usize) -> std::io::Result<Vec<u8>> {
    with_context(&DECOMPRESSOR, zstd::bulk::Decompressor::new, |d| d.decompress(body, capacity))
}

/// Largest linear memory a snapshot may describe (wasm32's 4 GiB address space).
const MAX_MEMORY: u64 = 1 << 32;

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

/// A decoded snapshot: the header and the pages that differ from the base image.
#[derive(Debug)]
pub(crate) struct Decoded {
    pub(crate) header: Header,
    pub(crate) pages: Vec<(u32, Vec<u8>)>,
}

static ZERO_PAGE: [u8; PAGE] = [0; PAGE];

fn page_differs(base: &[u8], memory: &[u8], i: usize) -> bool {
    let start = i * PAGE;
    let end = (start + PAGE).min(memory.len());
    let page = &memory[start..end];
    match base.get(start..end) {
        Some(b) => b != page,
        // Past the end of the base image, fresh memory is zeroed: only non-zero pages matter
        // (compared as slices: memcmp, not a byte loop).
        None => page != &ZERO_PAGE[..page.len()],
    }
}

/// XORs `page` with the base image's page `index` (pages past the image are XOR-ed with zeros, i.e.
/// kept as they are). Applying it twice gives the page back.
pub(crate) fn xor_base(base: &[u8], index: usize, page: &mut [u8]) {
    let start = index * PAGE;
    if let Some(b) = base.get(start..(start + page.len()).min(base.len())) {
        for (p, b) in page.iter_mut().zip(b) {
            *p ^= *b;
        }
    }
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
    /// The body ends inside a page.
    #[error("snapshot body has a partial page")]
    PartialPage,
    /// A page index beyond the memory.
    #[error("snapshot page {0} lies outside its memory")]
    PageOutOfRange(u32),
}

/// Encodes `memory` (diffed against `base`) with its header.
pub(crate) fn encode(header: &Header, base: &[u8], memory: &[u8]) -> Result<Vec<u8>, SnapshotError> {
    let mut body = Vec::new();
    for i in 0..memory.len().div_ceil(PAGE) {
        if page_differs(base, memory, i) {
            let start = i * PAGE;
            let end = (start + PAGE).min(memory.len());
            body.extend_from_slice(&(i as u32).to_le_bytes());
            let at = body.len();
            body.extend_from_slice(&memory[start..end]);
            body.resize(at + PAGE, 0);
            xor_base(base, i, &mut body[at..]);
        }
    }
    let body = compress(&body).map_err(SnapshotError::Compress)?;
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

fn take<'a>(bytes: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], SnapshotError> {
    let end = at.checked_add(n).ok_or(SnapshotError::Truncated)?;
    let s = bytes.get(*at..end).ok_or(SnapshotError::Truncated)?;
    *at = end;
    Ok(s)
}

fn u32_at(bytes: &[u8], at: &mut usize) -> Result<u32, SnapshotError> {
    let s = take(bytes, at, 4)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Decodes and checks a snapshot: magic, digest, format, engine, build, bounds of every page. Pages
/// come back as the memory content (already XOR-ed back with `base`).
pub(crate) fn decode(bytes: &[u8], engine: &str, build: &str, base: &[u8]) -> Result<Decoded, SnapshotError> {
    let (header, body) = check(bytes, engine, build)?;
    let pages_in_memory = header.memory_bytes as usize / PAGE;
    let max_raw = pages_in_memory.saturating_mul(PAGE + 4);
    let raw = decompress(body, max_raw).map_err(SnapshotError::Decompress)?;
    if !raw.len().is_multiple_of(PAGE + 4) {
        return Err(SnapshotError::PartialPage);
    }
    let mut pages = Vec::with_capacity(raw.len() / (PAGE + 4));
    for rec in raw.chunks_exact(PAGE + 4) {
        let index = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
        if index as usize >= pages_in_memory {
            return Err(SnapshotError::PageOutOfRange(index));
        }
        let mut page = rec[4..].to_vec();
        xor_base(base, index as usize, &mut page);
        pages.push((index, page));
    }
    Ok(Decoded { header, pages })
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
    let header_len = u32_at(content, &mut at)? as usize;
    let header: Header = serde_json::from_slice(take(content, &mut at, header_len)?).map_err(SnapshotError::Header)?;
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
    let body_len = u32_at(content, &mut at)? as usize;
    let body = take(content, &mut at, body_len)?;
    if at != content.len() {
        return Err(SnapshotError::Trailing);
    }
    Ok((header, body))
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

    #[test]
    fn round_trip_stores_only_changed_pages() {
        let base = vec![7u8; 65536 * 2];
        let mut mem = base.clone();
        mem.resize(65536 * 3, 0);
        mem[5] = 1; // page 0
        mem[65536 * 2 + 9000] = 3; // past the base image
        let bytes = encode(&header(mem.len() as u64), &base, &mem).unwrap();
        let d = decode(&bytes, "quickjs-wasi", "b1", &base).unwrap();
        let idx: Vec<u32> = d.pages.iter().map(|p| p.0).collect();
        assert_eq!(idx, vec![0, 34]);
        assert_eq!(d.header, header(mem.len() as u64));
        let mut rebuilt = base.clone();
        rebuilt.resize(mem.len(), 0);
        for (i, page) in d.pages {
            rebuilt[i as usize * PAGE..(i as usize + 1) * PAGE].copy_from_slice(&page);
        }
        assert_eq!(rebuilt, mem);
    }

    #[test]
    fn tampered_truncated_and_foreign_snapshots_are_refused() {
        let base = vec![0u8; 65536];
        let mut mem = base.clone();
        mem[100] = 42;
        let bytes = encode(&header(65536), &base, &mem).unwrap();
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
