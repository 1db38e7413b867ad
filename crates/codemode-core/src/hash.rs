//! The hasher of the maps a nested call looks a tool up in by id (the catalog's, the host tools',
//! the learned result types'). std's SipHash cost ~200 instructions a lookup there, a few hundred a
//! call in all; foldhash costs a fraction of that for keys this short.
//!
//! Tool ids partly come from upstream MCP servers, which may be hostile: a server that could make
//! its tools' ids collide would make each lookup (and the catalog's build) linear. So the hasher is
//! keyed with a secret the operating system's randomness gives once per process (read through
//! std's `RandomState`), plus foldhash's own address-derived shared seed; foldhash is no
//! cryptographic hash, but without the key there is nothing to aim collisions at.

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// Builds the hashers of a [`ToolMap`]: foldhash, keyed per process (see the module doc).
#[derive(Clone, Debug)]
pub struct ToolMapHasher(foldhash::fast::SeedableRandomState);

impl Default for ToolMapHasher {
    fn default() -> Self {
        static KEY: OnceLock<u64> = OnceLock::new();
        let key = *KEY.get_or_init(|| {
            // std's RandomState carries keys from the OS's randomness; hashing a constant with them
            // yields a secret 64-bit value.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x243f_6a88_85a3_08d3);
            h.finish()
        });
        ToolMapHasher(foldhash::fast::SeedableRandomState::with_seed(key, foldhash::SharedSeed::global_random()))
    }
}

impl BuildHasher for ToolMapHasher {
    type Hasher = foldhash::fast::FoldHasher<'static>;

    fn build_hasher(&self) -> Self::Hasher {
        self.0.build_hasher()
    }
}

/// A map keyed by tool id, hashed with [`ToolMapHasher`].
pub type ToolMap<V> = std::collections::HashMap<String, V, ToolMapHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Two maps of one process hash alike (one key per process), and the map works as a map.
    #[test]
    fn one_key_per_process_and_an_ordinary_map() {
        let (a, b) = (ToolMapHasher::default(), ToolMapHasher::default());
        assert_eq!(a.hash_one("mcp:files:read"), b.hash_one("mcp:files:read"));
        assert_ne!(a.hash_one("mcp:files:read"), a.hash_one("mcp:files:write"));
        let mut m: ToolMap<usize> = ToolMap::default();
        for i in 0..1000 {
            m.insert(format!("tool_{i}"), i);
        }
        assert_eq!(m.len(), 1000);
        assert!((0..1000).all(|i| m.get(&format!("tool_{i}")) == Some(&i)));
        assert_eq!(m.get("tool_1000"), None);
    }
}
