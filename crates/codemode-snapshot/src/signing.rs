//! Signed runs: the key that authenticates every run a store keeps outside this process's memory
//! (a directory, Redis) and every exported run, and the tags made with it.
//!
//! A suspended run is state the host trusts: its metadata says which calls are pending, which are
//! parked for approval and what policy it runs under, and the approval decisions next to it let
//! parked calls run. Whoever can write those bytes (a shared volume, a Redis a team reaches, a
//! database a host keeps exported runs in) could otherwise forge an approval or a policy. So every
//! such record carries an HMAC-SHA-256 tag over all of it — format header, metadata (the expiry is
//! part of it), decisions and snapshot — and a store or an import refuses a record whose tag is
//! missing, wrong or made for another record before anything of the run happens
//! (`docs/src/security.md`, "Signed runs").
//!
//! # Where the key comes from, and what it protects against
//!
//! | origin ([`KeyOrigin`]) | how | refuses |
//! |---|---|---|
//! | `Configured` | `CODEMODE_RUN_SIGNING_KEY` (or the variable `runSigning.keyEnv` names), at least 32 bytes | forged and tampered records: the store never holds the key |
//! | `KeptInStore` | generated once and kept beside the runs (`<dir>/.signing-key`, Redis `P secret`) | corrupt and misplaced records only: whoever can write the store can read the key |
//! | `Process` | random per process | anything not written by this process |
//!
//! Rotation: the previous keys (`CODEMODE_RUN_SIGNING_PREVIOUS_KEYS`, comma-separated) still verify;
//! every new record is tagged with the current key.
//!
//! Records written before runs were signed carry no tag; they are refused unless
//! [`RunKeys::accept_unsigned_until`] names a time still ahead (an upgrade window).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// Length of a tag.
pub const TAG_BYTES: usize = 32;

/// Shortest key accepted. Prevents: a short, guessable key that lets whoever can write the store
/// forge tags by brute force.
pub const MIN_KEY_BYTES: usize = 32;

/// The environment variable holding the signing key (unless `runSigning.keyEnv` names another).
pub const KEY_ENV: &str = "CODEMODE_RUN_SIGNING_KEY";

/// The environment variable holding previous keys, comma-separated (verification only).
pub const PREVIOUS_KEYS_ENV: &str = "CODEMODE_RUN_SIGNING_PREVIOUS_KEYS";

/// The name of the key file a directory store generates when no key is configured.
pub const KEY_FILE: &str = ".signing-key";

/// Where a [`RunKeys`]' current key came from (it decides what a tag proves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrigin {
    /// From configuration or the environment; the store never holds it.
    Configured,
    /// Generated and kept in the store itself: detects corruption and records moved between
    /// stores, not an attacker who can read the store.
    KeptInStore,
    /// Random for this process: only this process can verify its records.
    Process,
}

/// A bad key or key setting.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct KeyError(pub String);

/// The keys that sign and verify runs.
#[derive(Clone)]
pub struct RunKeys {
    current: Arc<[u8]>,
    previous: Vec<Arc<[u8]>>,
    origin: KeyOrigin,
    accept_unsigned_until_ms: Option<u64>,
}

impl std::fmt::Debug for RunKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the keys themselves.
        f.debug_struct("RunKeys")
            .field("origin", &self.origin)
            .field("previous", &self.previous.len())
            .field("accept_unsigned_until_ms", &self.accept_unsigned_until_ms)
            .finish()
    }
}

/// Why a record was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It carries no tag (written before runs were signed), outside any upgrade window.
    Unsigned,
    /// Its tag matches none of the keys (tampered, forged, or signed with a key this process does
    /// not hold).
    Mismatch,
}

impl Refusal {
    /// The refusal in words, for `what` ("run file", "exported run", …).
    pub fn describe(&self, what: &str, origin: KeyOrigin) -> String {
        match self {
            Refusal::Unsigned => format!(
                "{what} carries no signature (written before runs were signed?); it is refused unless \
                 runSigning.acceptUnsignedUntil is in the future"
            ),
            Refusal::Mismatch => match origin {
                KeyOrigin::Process => format!(
                    "{what}'s signature does not match this process's key: it was altered, or signed by another \
                     process; set CODEMODE_RUN_SIGNING_KEY (or the variable runSigning.keyEnv names) to the same key \
                     wherever runs travel"
                ),
                _ => format!(
                    "{what}'s signature matches none of this process's signing keys: it was altered or forged, or \
                     signed with a key this process does not hold"
                ),
            },
        }
    }
}

/// 32 random bytes from the operating system's generator (a generated key or fleet secret).
pub fn random_key() -> [u8; 32] {
    // 244 random bits (two v4 UUIDs from the operating system's generator).
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    key[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    key
}

fn checked(key: &[u8], what: &str) -> Result<Arc<[u8]>, KeyError> {
    if key.len() < MIN_KEY_BYTES {
        return Err(KeyError(format!(
            "{what} is {} bytes; a run signing key needs at least {MIN_KEY_BYTES} (e.g. `openssl rand -hex 32`)",
            key.len()
        )));
    }
    Ok(Arc::from(key))
}

impl RunKeys {
    /// Keys with `key` as the current one, configured by the operator.
    pub fn configured(key: &[u8]) -> Result<Self, KeyError> {
        Ok(Self {
            current: checked(key, "the run signing key")?,
            previous: Vec::new(),
            origin: KeyOrigin::Configured,
            accept_unsigned_until_ms: None,
        })
    }

    /// Keys with a key kept in the store as the current one ([`KeyOrigin::KeptInStore`]).
    pub fn kept_in_store(key: &[u8]) -> Result<Self, KeyError> {
        Ok(Self { origin: KeyOrigin::KeptInStore, ..Self::configured(key)? })
    }

    /// This process's own random key (the same for every call in the process).
    pub fn process() -> Self {
        static KEY: OnceLock<[u8; 32]> = OnceLock::new();
        let key = KEY.get_or_init(random_key);
        Self {
            current: Arc::from(&key[..]),
            previous: Vec::new(),
            origin: KeyOrigin::Process,
            accept_unsigned_until_ms: None,
        }
    }

    /// Keys from the environment: the current key from `key_env`, previous ones (comma-separated)
    /// from `previous_env`. `Ok(None)` when `key_env` is unset or empty.
    pub fn from_env(key_env: &str, previous_env: &str) -> Result<Option<Self>, KeyError> {
        let Some(key) = std::env::var(key_env).ok().filter(|k| !k.is_empty()) else {
            return Ok(None);
        };
        let keys = Self::configured(key.as_bytes()).map_err(|e| KeyError(format!("{key_env}: {e}")))?;
        let previous = std::env::var(previous_env).unwrap_or_default();
        let previous: Vec<&[u8]> =
            previous.split(',').map(str::trim).filter(|k| !k.is_empty()).map(str::as_bytes).collect();
        keys.with_previous(&previous).map(Some).map_err(|e| KeyError(format!("{previous_env}: {e}")))
    }

    /// `given` keys, or else those of the default environment variables: what a store signs with
    /// before it falls back to a key of its own (`Ok(None)`).
    pub fn given_or_env(given: Option<RunKeys>) -> Result<Option<Self>, KeyError> {
        match given {
            Some(keys) => Ok(Some(keys)),
            None => Self::from_default_env(),
        }
    }

    /// The keys of the default environment variables ([`KEY_ENV`], [`PREVIOUS_KEYS_ENV`]).
    pub fn from_default_env() -> Result<Option<Self>, KeyError> {
        Self::from_env(KEY_ENV, PREVIOUS_KEYS_ENV)
    }

    /// The key kept in `dir` (`.signing-key`, owner-only), generated on first use. Two processes
    /// generating it at once agree on one (the file appears atomically, by a hard link).
    pub fn kept_in_dir(dir: &Path) -> Result<Self, std::io::Error> {
        let path = dir.join(KEY_FILE);
        let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
        if !path.exists() {
            let tmp = dir.join(format!(".signing-key.{}.{}", std::process::id(), uuid::Uuid::new_v4()));
            {
                use std::io::Write as _;
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                let mut f = options.open(&tmp)?;
                f.write_all(&random_key())?;
                f.sync_all()?;
            }
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let meta = std::fs::symlink_metadata(&path)?;
        if !meta.is_file() || meta.len() != 32 {
            return Err(invalid(format!("{} is not a 32-byte key file", path.display())));
        }
        let key = std::fs::read(&path)?;
        Self::kept_in_store(&key).map_err(|e| invalid(e.0))
    }

    /// Adds keys that still verify (after a rotation) but never sign.
    pub fn with_previous(mut self, keys: &[&[u8]]) -> Result<Self, KeyError> {
        for (i, k) in keys.iter().enumerate() {
            self.previous.push(checked(k, &format!("previous key {}", i + 1))?);
        }
        Ok(self)
    }

    /// Accepts records without a tag until `until_ms` (Unix ms): an upgrade window for runs
    /// written before runs were signed.
    pub fn accept_unsigned_until(mut self, until_ms: Option<u64>) -> Self {
        self.accept_unsigned_until_ms = until_ms;
        self
    }

    /// Where the current key came from.
    pub fn origin(&self) -> KeyOrigin {
        self.origin
    }

    /// Whether an untagged record is still accepted at `now_ms`.
    pub fn accepts_unsigned(&self, now_ms: u64) -> bool {
        self.accept_unsigned_until_ms.is_some_and(|until| now_ms < until)
    }

    fn mac(key: &[u8], domain: &str, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC accepts keys of any length; ours are at least MIN_KEY_BYTES.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!());
        // Each part is length-prefixed, so no two different records give the same input.
        for part in std::iter::once(domain.as_bytes()).chain(parts.iter().copied()) {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac
    }

    /// The tag of a record: `domain` names the kind of record (and its format version), `parts` are
    /// its fields in order (a run id among them, so a record cannot be moved to another run).
    pub fn sign(&self, domain: &str, parts: &[&[u8]]) -> [u8; TAG_BYTES] {
        Self::mac(&self.current, domain, parts).finalize().into_bytes().into()
    }

    /// Checks a record's tag against the current key, then each previous one (in constant time).
    pub fn verify(&self, domain: &str, parts: &[&[u8]], tag: &[u8]) -> Result<(), Refusal> {
        let matches = |key: &Arc<[u8]>| Self::mac(key, domain, parts).verify_slice(tag).is_ok();
        if matches(&self.current) || self.previous.iter().any(matches) { Ok(()) } else { Err(Refusal::Mismatch) }
    }

    /// Checks a record that may carry no tag (`None`): such a record passes only inside the
    /// upgrade window.
    pub fn verify_optional(
        &self,
        domain: &str,
        parts: &[&[u8]],
        tag: Option<&[u8]>,
        now_ms: u64,
    ) -> Result<(), Refusal> {
        match tag {
            Some(tag) => self.verify(domain, parts, tag),
            None if self.accepts_unsigned(now_ms) => Ok(()),
            None => Err(Refusal::Unsigned),
        }
    }
}

impl RunKeys {
    /// A record beside a run (an approval decision, a recorded result): `<hex tag>\n<json>`, the
    /// tag binding `domain`, the run, the request and the JSON.
    pub fn seal_record(&self, domain: &str, run_id: &str, request_id: u64, json: &[u8]) -> Vec<u8> {
        let tag = self.sign(domain, &[run_id.as_bytes(), &request_id.to_be_bytes(), json]);
        let mut out = hex(&tag).into_bytes();
        out.push(b'\n');
        out.extend_from_slice(json);
        out
    }

    /// The JSON of a record made by [`seal_record`](Self::seal_record) for this run and request,
    /// once its tag verifies (a record without one passes only inside the upgrade window).
    pub fn open_record<'a>(
        &self,
        domain: &str,
        run_id: &str,
        request_id: u64,
        record: &'a [u8],
        now_ms: u64,
    ) -> Result<&'a [u8], Refusal> {
        let (tag, json) = match record.iter().position(|&b| b == b'\n') {
            Some(at) if at == TAG_BYTES * 2 => {
                (std::str::from_utf8(&record[..at]).ok().and_then(unhex), &record[at + 1..])
            }
            _ => (None, record),
        };
        let parts: [&[u8]; 3] = [run_id.as_bytes(), &request_id.to_be_bytes(), json];
        self.verify_optional(domain, &parts, tag.as_deref(), now_ms).map(|()| json)
    }
}

/// Lowercase hex of a tag (for text records).
pub fn hex(tag: &[u8]) -> String {
    tag.iter().map(|b| format!("{b:02x}")).collect()
}

/// A tag back from [`hex`]; `None` unless it is exactly [`TAG_BYTES`] bytes of hex.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() != TAG_BYTES * 2 || !text.is_ascii() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &[u8] = b"0123456789abcdef0123456789abcdef";
    const B: &[u8] = b"fedcba9876543210fedcba9876543210";

    #[test]
    fn a_tag_binds_every_part_and_the_domain() -> Result<(), KeyError> {
        let keys = RunKeys::configured(A)?;
        let tag = keys.sign("run", &[b"id-1", b"meta", b"snap"]);
        assert_eq!(keys.verify("run", &[b"id-1", b"meta", b"snap"], &tag), Ok(()));
        for (domain, parts) in [
            ("run", [&b"id-2"[..], b"meta", b"snap"]),
            ("run", [b"id-1", b"metA", b"snap"]),
            ("run", [b"id-1", b"meta", b"sna"]),
            // Moving a byte between parts changes the tag (length prefixes).
            ("run", [b"id-1", b"met", b"asnap"]),
            ("decision", [b"id-1", b"meta", b"snap"]),
        ] {
            assert_eq!(keys.verify(domain, &parts, &tag), Err(Refusal::Mismatch), "{domain} {parts:?}");
        }
        assert_eq!(keys.verify("run", &[b"id-1", b"meta", b"snap"], &tag[..31]), Err(Refusal::Mismatch));
        Ok(())
    }

    #[test]
    fn rotation_keeps_previous_keys_for_verification_only() -> Result<(), KeyError> {
        let old = RunKeys::configured(A)?;
        let rotated = RunKeys::configured(B)?.with_previous(&[A])?;
        let by_old = old.sign("run", &[b"x"]);
        assert_eq!(rotated.verify("run", &[b"x"], &by_old), Ok(()));
        let by_new = rotated.sign("run", &[b"x"]);
        assert_ne!(by_new, by_old, "new records are signed with the current key");
        assert_eq!(old.verify("run", &[b"x"], &by_new), Err(Refusal::Mismatch));
        // Once the old key is dropped, its records are refused.
        assert_eq!(RunKeys::configured(B)?.verify("run", &[b"x"], &by_old), Err(Refusal::Mismatch));
        Ok(())
    }

    #[test]
    fn short_keys_are_refused_and_debug_output_hides_keys() {
        assert!(RunKeys::configured(b"short").is_err());
        assert!(RunKeys::configured(A).and_then(|k| k.with_previous(&[b"tiny"])).is_err());
        let shown = format!("{:?}", RunKeys::configured(A));
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
    }

    #[test]
    fn unsigned_records_pass_only_inside_the_upgrade_window() -> Result<(), KeyError> {
        let keys = RunKeys::configured(A)?;
        assert_eq!(keys.verify_optional("run", &[], None, 10), Err(Refusal::Unsigned));
        let window = keys.accept_unsigned_until(Some(100));
        assert_eq!(window.verify_optional("run", &[], None, 99), Ok(()));
        assert_eq!(window.verify_optional("run", &[], None, 100), Err(Refusal::Unsigned));
        // A wrong tag is never excused by the window.
        assert_eq!(window.verify_optional("run", &[], Some(&[0; 32]), 50), Err(Refusal::Mismatch));
        Ok(())
    }

    #[test]
    fn a_directory_key_is_generated_once_and_owner_only() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("cm-signing-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir)?;
        let first = RunKeys::kept_in_dir(&dir)?;
        let second = RunKeys::kept_in_dir(&dir)?;
        assert_eq!(first.origin(), KeyOrigin::KeptInStore);
        let tag = first.sign("run", &[b"x"]);
        assert_eq!(second.verify("run", &[b"x"], &tag), Ok(()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(dir.join(KEY_FILE))?.permissions().mode() & 0o777, 0o600);
        }
        std::fs::write(dir.join(KEY_FILE), b"not a key")?;
        assert!(RunKeys::kept_in_dir(&dir).is_err(), "a damaged key file is an error, never replaced silently");
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn a_record_opens_only_for_its_run_and_request() -> Result<(), KeyError> {
        let keys = RunKeys::configured(A)?;
        let record = keys.seal_record("decision", "run-1", 2, b"{}");
        assert_eq!(keys.open_record("decision", "run-1", 2, &record, 0), Ok(&b"{}"[..]));
        assert_eq!(keys.open_record("decision", "run-1", 3, &record, 0), Err(Refusal::Mismatch));
        assert_eq!(keys.open_record("decision", "run-2", 2, &record, 0), Err(Refusal::Mismatch));
        assert_eq!(keys.open_record("result", "run-1", 2, &record, 0), Err(Refusal::Mismatch));
        assert_eq!(keys.open_record("decision", "run-1", 2, b"{}", 0), Err(Refusal::Unsigned));
        Ok(())
    }

    #[test]
    fn hex_round_trips_and_rejects_other_lengths() {
        let tag = [0xabu8; 32];
        assert_eq!(unhex(&hex(&tag)), Some(tag.to_vec()));
        assert_eq!(unhex("abcd"), None);
        assert_eq!(unhex(&"zz".repeat(32)), None);
    }
}
