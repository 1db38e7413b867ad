//! # codemode-snapshot
//!
//! [`SnapshotStore`](codemode_core::store::SnapshotStore) implementations (docs/src/layout.md):
//!
//! - [`MemorySnapshotStore`]: the default. Keeps suspended runs in process memory with the TTL of
//!   `snapshotTtlSeconds`, at most 64 suspended runs per process (`too many suspended code mode
//!   runs.`), scope checks with contract §6's messages, one `wait` at a time per run, and removal on
//!   completion, failure, abort and expiry. It accepts live (in-process) snapshots as well as
//!   serialized ones.
//! - [`DirectorySnapshotStore`]: suspended runs as files, so `exec` and `wait` can run in different
//!   processes. Serialized snapshots only.
//! - `RedisSnapshotStore` (feature `redis`): the store of a fleet of gateways — runs, the call log,
//!   approval decisions and leases in Redis, so any replica resumes any run with exactly-once
//!   nested calls.
//!
//! - [`signing`]: the keys and HMAC tags that authenticate every run kept outside process memory
//!   and every exported run.
//! - [`portable`]: the bytes of an exported run, which a host keeps wherever it likes and imports
//!   into another process's runtime.
//!
//! The `conformance` feature adds the store conformance suite every store passes (memory,
//! directory, Redis) and a `redis-server` launcher for tests.
//!
//! Layering (docs/src/layout.md): depends on `codemode-core` only; never names an engine.
#![forbid(unsafe_code)]

mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
mod console;
mod directory;
mod memory;
pub mod portable;
mod record;
#[cfg(feature = "redis")]
pub mod redis;
pub mod signing;
mod tasks;
pub use tasks::{MAX_TASK_RECORD_BYTES, MAX_TASK_RECORDS};

pub use clock::{Clock, ManualClock, SystemClock};
pub use directory::DirectorySnapshotStore;
pub use memory::MemorySnapshotStore;
pub use signing::{KeyOrigin, RunKeys};
/// SHA-256 of the input's canonical JSON (keys sorted), hex: the call log's input digest.
pub fn input_digest(input: &serde_json::Value) -> String {
    use sha2::Digest;
    fn canonical(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::Value::String(k.clone()).to_string());
                    out.push(':');
                    canonical(&m[k], out);
                }
                out.push('}');
            }
            serde_json::Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    canonical(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut text = String::new();
    canonical(input, &mut text);
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(feature = "redis")]
pub use redis::{RedisSnapshotStore, RedisStoreConfig};
