//! # codemode-snapshot
//!
//! [`SnapshotStore`](codemode_core::store::SnapshotStore) implementations (DESIGN §6):
//!
//! - [`MemorySnapshotStore`]: the default. Keeps suspended runs in process memory with the TTL of
//!   `snapshotTtlSeconds`, at most 64 suspended runs per process (`too many suspended code mode
//!   runs.`), scope checks with SPEC §6's messages, one `wait` at a time per run, and removal on
//!   completion, failure, abort and expiry. It accepts live (in-process) snapshots as well as
//!   serialized ones.
//! - [`DirectorySnapshotStore`]: suspended runs as files, so `exec` and `wait` can run in different
//!   processes. Serialized snapshots only.
//!
//! Layering (DESIGN §2): depends on `codemode-core` only; never names an engine.
#![forbid(unsafe_code)]

mod clock;
mod directory;
mod memory;

pub use clock::{Clock, ManualClock, SystemClock};
pub use directory::DirectorySnapshotStore;
pub use memory::MemorySnapshotStore;
