//! The portable form of a suspended run: the bytes a host keeps when it exports a `waiting` run
//! (`CodeMode::export_run`) and hands to another process's runtime (`CodeMode::import_run`), e.g.
//! a Python or Node host that stores runs in its own database.
//!
//! Layout (all integers big-endian):
//!
//! ```text
//! "codemode-run/2\n"            15 bytes, the format and its version
//! meta length                   u32
//! meta                          JSON: the run's metadata (as the directory store keeps it, its
//!                               expiry and policy included) and the approval decisions recorded
//!                               for it
//! snapshot                      the engine's serialized VM state, to the tag
//! tag                           HMAC-SHA-256 of everything before it (32 bytes), with the
//!                               exporting runtime's run signing key ([`crate::signing`])
//! ```
//!
//! The tag authenticates the whole export: a changed byte, a forged approval decision or a
//! widened policy with the digest recomputed is refused on import, before anything of the run
//! happens. Only a runtime holding the exporting key (or, after a rotation, one that keeps it as a
//! previous key) imports it. Version 1 (`codemode-run/1`, a plain SHA-256 checksum) is read only
//! inside the upgrade window ([`RunKeys::accept_unsigned_until`]).

use crate::record::RunMeta;
use crate::signing::{RunKeys, TAG_BYTES};
use codemode_core::approval::ApprovalDecision;
use codemode_core::engine::RequestId;
use codemode_core::store::{StoreError, SuspendedRun};
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// The first bytes of every exported run: the format's name and version.
pub const MAGIC: &[u8; 15] = b"codemode-run/2\n";

/// The first bytes of an export of version 1 (checksummed, not signed).
const MAGIC_V1: &[u8; 15] = b"codemode-run/1\n";

/// The domain of an export's tag.
const DOMAIN: &str = "codemode-run/2 export";

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

/// Encodes and signs a run with `keys`; a live (in-process) snapshot cannot leave its process
/// ([`StoreError::LiveNotSupported`]).
pub fn encode(portable: PortableRun, keys: &RunKeys) -> Result<Vec<u8>, StoreError> {
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
    let tag = keys.sign(DOMAIN, &[&out]);
    out.extend_from_slice(&tag);
    Ok(out)
}

/// Decodes an exported run after checking its tag with `keys` at `now_ms`: anything but an intact
/// export of this format is [`StoreError::Corrupt`], an export no key of `keys` signed (altered,
/// forged, or from a runtime with another key) is [`StoreError::Unauthenticated`], each with the
/// reason.
pub fn decode(bytes: &[u8], keys: &RunKeys, now_ms: u64) -> Result<PortableRun, StoreError> {
    let corrupt = |why: &str| StoreError::Corrupt(format!("not an exported code mode run: {why}"));
    if bytes.len() < MAGIC.len() + 4 + TAG_BYTES {
        return Err(corrupt("too short"));
    }
    let (body, tag) = bytes.split_at(bytes.len() - TAG_BYTES);
    if bytes.starts_with(MAGIC_V1) {
        // Version 1: a checksum only, read inside the upgrade window.
        if !keys.accepts_unsigned(now_ms) {
            return Err(StoreError::Unauthenticated(
                crate::signing::Refusal::Unsigned.describe("the exported run (format codemode-run/1)", keys.origin()),
            ));
        }
        if sha2::Sha256::digest(body).as_slice() != tag {
            return Err(corrupt("checksum mismatch (truncated or altered)"));
        }
    } else if !bytes.starts_with(MAGIC) {
        return Err(if bytes.starts_with(b"codemode-run/") {
            corrupt("written by another version of the format")
        } else {
            corrupt("the header is missing")
        });
    } else if let Err(refusal) = keys.verify(DOMAIN, &[body], tag) {
        return Err(StoreError::Unauthenticated(refusal.describe("the exported run", keys.origin())));
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

    fn keys() -> RunKeys {
        RunKeys::configured(b"0123456789abcdef0123456789abcdef").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn round_trip_keeps_the_run_and_its_decisions() -> Result<(), StoreError> {
        let bytes = encode(
            PortableRun { run: run(vec![7; 100]), decisions: vec![(3, ApprovalDecision::deny("no"))] },
            &keys(),
        )?;
        let back = decode(&bytes, &keys(), 0)?;
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

    fn reason(b: &[u8], keys: &RunKeys, now_ms: u64) -> String {
        match decode(b, keys, now_ms) {
            Err(StoreError::Corrupt(m) | StoreError::Unauthenticated(m)) => m,
            other => format!("unexpected: {other:?}"),
        }
    }

    #[test]
    fn damaged_bytes_are_refused_with_the_reason() -> Result<(), StoreError> {
        let keys = keys();
        let bytes = encode(PortableRun { run: run(vec![1, 2, 3]), decisions: Vec::new() }, &keys)?;
        assert!(reason(&bytes[..bytes.len() - 1], &keys, 0).contains("signature"));
        let mut flipped = bytes.clone();
        flipped[MAGIC.len() + 10] ^= 1;
        assert!(reason(&flipped, &keys, 0).contains("altered"));
        assert!(reason(b"hello", &keys, 0).contains("too short"));
        assert!(reason(&[b'x'; 80], &keys, 0).contains("header"));
        let mut other_version = bytes.clone();
        other_version[13] = b'9';
        assert!(reason(&other_version, &keys, 0).contains("another version"));
        // A length field past the end, correctly signed: still refused before any allocation.
        let mut forged = MAGIC.to_vec();
        forged.extend_from_slice(&u32::MAX.to_be_bytes());
        forged.extend_from_slice(b"{}");
        let tag = keys.sign(DOMAIN, &[&forged]);
        forged.extend_from_slice(&tag);
        assert!(reason(&forged, &keys, 0).contains("length"));
        Ok(())
    }

    /// Re-encodes `bytes`' envelope after `edit`, as someone who can recompute a digest but holds
    /// no key would: the tag is replaced by a SHA-256 of the new body.
    fn forge(bytes: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let rest = &bytes[MAGIC.len()..bytes.len() - TAG_BYTES];
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let mut envelope: serde_json::Value =
            serde_json::from_slice(&rest[4..4 + len]).unwrap_or_else(|e| panic!("{e}"));
        edit(&mut envelope);
        let meta = serde_json::to_vec(&envelope).unwrap_or_else(|e| panic!("{e}"));
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&(meta.len() as u32).to_be_bytes());
        out.extend_from_slice(&meta);
        out.extend_from_slice(&rest[4 + len..]);
        let sum = sha2::Sha256::digest(&out);
        out.extend_from_slice(&sum);
        out
    }

    #[test]
    fn a_forged_approval_or_policy_with_the_digest_recomputed_is_refused() -> Result<(), StoreError> {
        let keys = keys();
        let bytes = encode(PortableRun { run: run(vec![1, 2, 3]), decisions: Vec::new() }, &keys)?;
        let approved = forge(&bytes, |e| e["decisions"] = serde_json::json!([[1, {"approved": true}]]));
        assert!(reason(&approved, &keys, 0).contains("altered or forged"), "{}", reason(&approved, &keys, 0));
        let widened = forge(&bytes, |e| e["run"]["policy"] = serde_json::Value::Null);
        assert!(matches!(decode(&widened, &keys, 0), Err(StoreError::Unauthenticated(_))));
        let later = forge(&bytes, |e| e["run"]["expiresAtMs"] = serde_json::json!(u64::MAX));
        assert!(matches!(decode(&later, &keys, 0), Err(StoreError::Unauthenticated(_))));
        // Another runtime's key: refused, and the message says how to share a key.
        let other = RunKeys::process();
        assert!(reason(&bytes, &other, 0).contains("CODEMODE_RUN_SIGNING_KEY"));
        Ok(())
    }

    #[test]
    fn rotated_keys_still_import_and_version_one_only_inside_the_window() -> Result<(), StoreError> {
        let old = keys();
        let bytes = encode(PortableRun { run: run(vec![9]), decisions: Vec::new() }, &old)?;
        let rotated = RunKeys::configured(b"fedcba9876543210fedcba9876543210")
            .and_then(|k| k.with_previous(&[b"0123456789abcdef0123456789abcdef"]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(decode(&bytes, &rotated, 0).is_ok());
        // A version-1 export (checksummed): refused, then accepted inside an upgrade window.
        let mut v1 = MAGIC_V1.to_vec();
        v1.extend_from_slice(&bytes[MAGIC.len()..bytes.len() - TAG_BYTES]);
        let sum = sha2::Sha256::digest(&v1);
        v1.extend_from_slice(&sum);
        assert!(reason(&v1, &old, 0).contains("no signature"));
        let window = old.clone().accept_unsigned_until(Some(1_000));
        assert!(decode(&v1, &window, 999).is_ok());
        assert!(matches!(decode(&v1, &window, 1_000), Err(StoreError::Unauthenticated(_))));
        Ok(())
    }
}
