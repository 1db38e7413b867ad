//! The portable form of a suspended run: the bytes a host keeps when it exports a `waiting` run
//! (`CodeMode::export_run`) and hands to another process's runtime (`CodeMode::import_run`), e.g.
//! a Python or Node host that stores runs in its own database.
//!
//! Layout (all integers big-endian):
//!
//! ```text
//! "codemode-run/1\n"            15 bytes, the format and its version
//! meta length                   u32
//! meta                          JSON: the run's metadata (as the directory store keeps it) and
//!                               the approval decisions recorded for it
//! snapshot                      the engine's serialized VM state, to the checksum
//! checksum                      SHA-256 of everything before it (32 bytes)
//! ```
//!
//! The checksum catches truncation and corruption, not forgery: the bytes are as trusted as the
//! host that keeps them. A forged snapshot can only change what the guest's own sandboxed VM holds
//! (the engine restores it into a fresh instance under the run's limits), never reach the host.

use crate::record::RunMeta;
use codemode_core::approval::ApprovalDecision;
use codemode_core::engine::RequestId;
use codemode_core::store::{StoreError, SuspendedRun};
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The first bytes of every exported run: the format's name and version.
pub const MAGIC: &[u8; 15] = b"codemode-run/1\n";

/// Longest metadata accepted on import (pending calls with their inputs, undelivered results).
/// Prevents: a length field claiming gigabytes making the importer allocate before it checks.
/// The whole run is also held to the importing runtime's `maxSnapshotBytes`.
pub const MAX_META_BYTES: usize = 64 * 1024 * 1024;

/// An exported run: the run and the approval decisions recorded for it but not yet applied.
#[derive(Debug)]
pub struct PortableRun {
    /// The run, with its serialized snapshot.
    pub run: SuspendedRun,
    /// Decisions on its parked calls, by request id (applied by the next `wait`).
    pub decisions: Vec<(RequestId, ApprovalDecision)>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope {
    run: RunMeta,
    #[serde(default)]
    decisions: Vec<(RequestId, ApprovalDecision)>,
}

/// Encodes a run; a live (in-process) snapshot cannot leave its process
/// ([`StoreError::LiveNotSupported`]).
pub fn encode(portable: PortableRun) -> Result<Vec<u8>, StoreError> {
    let (meta, snapshot) = RunMeta::split(portable.run)?;
    let meta = serde_json::to_vec(&Envelope { run: meta, decisions: portable.decisions })
        .map_err(|e| StoreError::Encode(e.to_string()))?;
    let meta_len = u32::try_from(meta.len())
        .ok()
        .filter(|&n| n as usize <= MAX_META_BYTES)
        .ok_or_else(|| StoreError::Encode(format!("run metadata of {} bytes is too large to export", meta.len())))?;
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + meta.len() + snapshot.len() + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&meta_len.to_be_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&snapshot);
    let sum = sha2::Sha256::digest(&out);
    out.extend_from_slice(&sum);
    Ok(out)
}

/// Decodes an exported run; anything but an intact export of this format is
/// [`StoreError::Corrupt`] with the reason.
pub fn decode(bytes: &[u8]) -> Result<PortableRun, StoreError> {
    let corrupt = |why: &str| StoreError::Corrupt(format!("not an exported code mode run: {why}"));
    if bytes.len() < MAGIC.len() + 4 + 32 {
        return Err(corrupt("too short"));
    }
    if !bytes.starts_with(MAGIC) {
        return Err(if bytes.starts_with(b"codemode-run/") {
            corrupt("written by another version of the format")
        } else {
            corrupt("the header is missing")
        });
    }
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    if sha2::Sha256::digest(body).as_slice() != sum {
        return Err(corrupt("checksum mismatch (truncated or altered)"));
    }
    let rest = &body[MAGIC.len()..];
    let (len, rest) = rest.split_at(4);
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
    if len > MAX_META_BYTES || len > rest.len() {
        return Err(corrupt("metadata length out of range"));
    }
    let (meta, snapshot) = rest.split_at(len);
    let envelope: Envelope = serde_json::from_slice(meta).map_err(|e| corrupt(&format!("metadata: {e}")))?;
    Ok(PortableRun { run: envelope.run.into_run(snapshot.to_vec()), decisions: envelope.decisions })
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_core::engine::{Snapshot, SnapshotBody};
    use codemode_core::result::WaitReason;
    use codemode_core::scope::{RunId, RunScope};

    fn run(body: Vec<u8>) -> SuspendedRun {
        SuspendedRun {
            run_id: RunId::from_generated("run-1".into()),
            scope: RunScope::session("s"),
            snapshot: Snapshot { engine: "quickjs-wasi".into(), body: SnapshotBody::Serialized(body) },
            reason: WaitReason::Yield,
            pending: Vec::new(),
            ready: Vec::new(),
            restart_safe: true,
            telemetry: Default::default(),
            created_at_ms: 1,
            expires_at_ms: 2,
            positions: Default::default(),
            policy: Some(codemode_core::store::RunPolicy::default()),
        }
    }

    #[test]
    fn round_trip_keeps_the_run_and_its_decisions() -> Result<(), StoreError> {
        let bytes = encode(PortableRun { run: run(vec![7; 100]), decisions: vec![(3, ApprovalDecision::deny("no"))] })?;
        let back = decode(&bytes)?;
        assert_eq!(back.run.run_id.as_str(), "run-1");
        assert_eq!(back.run.scope, RunScope::session("s"));
        assert!(back.run.restart_safe);
        assert_eq!(back.decisions, vec![(3, ApprovalDecision::deny("no"))]);
        match back.run.snapshot.body {
            SnapshotBody::Serialized(b) => assert_eq!(b, vec![7; 100]),
            _ => panic!("the snapshot should stay serialized"),
        }
        Ok(())
    }

    #[test]
    fn damaged_bytes_are_refused_with_the_reason() -> Result<(), StoreError> {
        let bytes = encode(PortableRun { run: run(vec![1, 2, 3]), decisions: Vec::new() })?;
        let reason = |b: &[u8]| match decode(b) {
            Err(StoreError::Corrupt(m)) => m,
            other => format!("unexpected: {other:?}"),
        };
        assert!(reason(&bytes[..bytes.len() - 1]).contains("checksum"));
        let mut flipped = bytes.clone();
        flipped[MAGIC.len() + 10] ^= 1;
        assert!(reason(&flipped).contains("checksum"));
        assert!(reason(b"hello").contains("too short"));
        assert!(reason(&[b'x'; 80]).contains("header"));
        let mut other_version = bytes.clone();
        other_version[13] = b'9';
        assert!(reason(&other_version).contains("another version"));
        // A length field past the end, with a valid checksum: still refused before any allocation.
        let mut forged = MAGIC.to_vec();
        forged.extend_from_slice(&u32::MAX.to_be_bytes());
        forged.extend_from_slice(b"{}");
        let sum = sha2::Sha256::digest(&forged);
        forged.extend_from_slice(&sum);
        assert!(reason(&forged).contains("length"));
        Ok(())
    }
}
