//! The directory snapshot store: suspended runs as files, so `exec` and `wait` can be two processes
//! (or two replicas sharing a volume).
//!
//! Layout: `<dir>/<run id>.run` holds a suspended run; while a `wait` holds it, it is renamed to
//! `<run id>.lock` (an atomic rename, so two processes can never resume the same run). Files are
//! written to a temporary name and renamed into place, so a crash never leaves a half-written run.
//!
//! Admission is atomic across processes: the count-then-write of a new run happens under an
//! exclusive lock on `<dir>/.admission`, so concurrent processes never hold more than 64 runs.
//!
//! Nested calls that outlive the process that started them: that process holds a claim
//! (`<run id>.calls-<pid>-<n>`, exclusively `flock`ed — the lock dies with the process, however it
//! ends) and records each result as `<run id>.result-<request id>`; a `wait` in another process
//! collects the results, and issues a call again only when no live process claims it.
//!
//! Runs served as tasks: `<run id>.task` holds the task's record (signed like a decision file, and
//! kept after its run ends, until the record's own expiry); `<run id>.driver` names the process
//! driving it and when its claim ends. Both are changed under the `.admission` lock.
//!
//! Approval decisions on parked calls (`codemode approve`, `CodeMode::decide` in any process) are
//! files `<run id>.decision-<request id>`, collected by the `wait` that resumes the run.
//!
//! File format: `CMRUN\x02`, a u32 LE length, the run's metadata as JSON (scope, pending requests,
//! undelivered results, telemetry, expiry, engine, policy), the engine's serialized snapshot bytes,
//! then a 32-byte HMAC-SHA-256 tag of the run id and everything before it ([`crate::signing`]). Live
//! snapshots cannot be stored here ([`StoreError::LiveNotSupported`]). Decision and result files are
//! `<64 hex digits of their tag>\n<JSON>`, the tag binding the run id and request id too.
//!
//! Signed records: a run file whose tag no key of the store verifies is refused on checkout
//! ([`StoreError::Unauthenticated`]) and stays where it is (a replica with the right key may still
//! resume it); an unsigned or forged decision or result is ignored with a warning, so it never
//! approves or answers a call. The key is the configured one, or else the environment's
//! (`CODEMODE_RUN_SIGNING_KEY`), or else one generated into `<dir>/.signing-key` — which detects
//! corruption and files moved between runs, not a writer who can read the directory.

use crate::clock::{Clock, SystemClock};
use crate::record::RunMeta;
use crate::signing::{RunKeys, TAG_BYTES};
use codemode_core::approval::ApprovalDecision;
use codemode_core::engine::{Delivery, RequestId};
use codemode_core::scope::{RunId, RunScope};
use codemode_core::store::{
    CallsClaim, ConsoleKind, MAX_SUSPENDED_RUNS, RunPage, SnapshotStore, StoreError, SuspendedRun, page_runs,
    parked_ids,
};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MAGIC: &[u8; 6] = b"CMRUN\x02";
/// Run files written before runs were signed (read only inside the upgrade window).
const MAGIC_V1: &[u8; 6] = b"CMRUN\x01";
/// Domains of the tags of a run file, a decision file and a result file.
const RUN_DOMAIN: &str = "codemode directory run/2";
const DECISION_DOMAIN: &str = "codemode directory decision/2";
const RESULT_DOMAIN: &str = "codemode directory result/2";
const TASK_DOMAIN: &str = "codemode directory task/1";
/// Largest file of the directory that is read: a whole stored run is at most `maxSnapshotBytes`
/// (at most 256 MiB), plus the file's header. Stops a corrupt, forged or sparse file from being read
/// into memory.
const MAX_FILE_BYTES: u64 = codemode_core::config::MAX_SNAPSHOT_BYTES.max + (1 << 20);
/// Largest metadata block accepted when reading a run file: the runtime holds a whole stored run,
/// metadata included, to `maxSnapshotBytes`, so any run it wrote fits (stops a corrupt length from
/// allocating more than the file holds).
const MAX_META_BYTES: usize = MAX_FILE_BYTES as usize;
/// The error `open` gives for a symbolic link under `O_NOFOLLOW`.
#[cfg(unix)]
const ELOOP: i32 = libc::ELOOP;
#[cfg(not(unix))]
const ELOOP: i32 = -1;
/// How long after its expiry a `.lock` file (a `wait` in progress, or one that crashed) is kept.
const LOCK_GRACE_MS: u64 = 120_000;

/// Keeps suspended runs as files in one directory.
///
/// Limits: at most 64 runs held at once in the directory (contract §6), so suspended runs cannot fill a
/// disk; each run file is deleted at its expiry, on completion, failure or abort.
#[derive(Debug)]
pub struct DirectorySnapshotStore {
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    max_runs: usize,
    keys: RunKeys,
}

/// A run file's parts, as read.
struct RunFile<'a> {
    meta: RunMeta,
    /// Everything the tag covers (header, metadata, snapshot).
    body: &'a [u8],
    /// Where the snapshot starts in `body`.
    snapshot_at: usize,
    /// `None`: a version-1 file, written before runs were signed.
    tag: Option<&'a [u8]>,
}

fn io(e: std::io::Error) -> StoreError {
    StoreError::from(e)
}

impl DirectorySnapshotStore {
    /// A store in `dir` (created with owner-only permissions if missing), signing with the key of
    /// `CODEMODE_RUN_SIGNING_KEY` or, when it is unset, the key kept in the directory.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, StoreError> {
        Self::with_clock(dir, Arc::new(SystemClock))
    }

    /// A store with a given clock (tests), keys as [`new`](Self::new).
    pub fn with_clock(dir: impl Into<PathBuf>, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        Self::open(dir, None, clock)
    }

    /// A store signing with `keys` (`None`: as [`new`](Self::new)).
    pub fn open(dir: impl Into<PathBuf>, keys: Option<RunKeys>, clock: Arc<dyn Clock>) -> Result<Self, StoreError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
        }
        let keys = match RunKeys::given_or_env(keys).map_err(|e| StoreError::Unsupported(e.to_string()))? {
            Some(k) => k,
            None => RunKeys::kept_in_dir(&dir).map_err(io)?,
        };
        Ok(Self { dir, clock, max_runs: MAX_SUSPENDED_RUNS, keys })
    }

    /// Accepts run files and side records without a signature until `until_ms` (Unix ms) when the
    /// keys were not given to [`open`](Self::open) (an upgrade window; given keys carry their own).
    pub fn accept_unsigned_until(mut self, until_ms: Option<u64>) -> Self {
        if until_ms.is_some() {
            self.keys = self.keys.accept_unsigned_until(until_ms);
        }
        self
    }

    /// The keys this store signs and verifies with.
    pub fn keys(&self) -> &RunKeys {
        &self.keys
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &RunId, ext: &str) -> PathBuf {
        self.dir.join(format!("{id}.{ext}"))
    }

    fn run_files(&self) -> Vec<(RunId, PathBuf, bool)> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        rd.flatten()
            .filter_map(|e| {
                let p = e.path();
                let ext = p.extension()?.to_str()?;
                let locked = match ext {
                    "run" => false,
                    "lock" => true,
                    _ => return None,
                };
                let id = RunId::parse(p.file_stem()?.to_str()?).ok()?;
                Some((id, p, locked))
            })
            .collect()
    }

    fn encode(&self, run: SuspendedRun) -> Result<Vec<u8>, StoreError> {
        let (meta, bytes) = RunMeta::split(run)?;
        let id = meta.run_id.clone();
        let meta = serde_json::to_vec(&meta).map_err(|e| StoreError::Encode(e.to_string()))?;
        let mut out = Vec::with_capacity(MAGIC.len() + 4 + meta.len() + bytes.len() + TAG_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&u32::try_from(meta.len()).map_err(|e| StoreError::Encode(e.to_string()))?.to_le_bytes());
        out.extend_from_slice(&meta);
        out.extend_from_slice(&bytes);
        let tag = self.keys.sign(RUN_DOMAIN, &[id.as_str().as_bytes(), &out]);
        out.extend_from_slice(&tag);
        Ok(out)
    }

    /// Splits a run file (either version) into its parts; the tag is not checked here.
    fn decode(bytes: &[u8]) -> Result<RunFile<'_>, StoreError> {
        let corrupt = |m: &str| StoreError::Corrupt(m.to_string());
        let (body, tag) = if bytes.starts_with(MAGIC) && bytes.len() >= MAGIC.len() + 4 + TAG_BYTES {
            let (body, tag) = bytes.split_at(bytes.len() - TAG_BYTES);
            (body, Some(tag))
        } else if bytes.starts_with(MAGIC_V1) {
            (bytes, None)
        } else {
            return Err(corrupt("not a codemode run file"));
        };
        if body.len() < MAGIC.len() + 4 {
            return Err(corrupt("run file is truncated"));
        }
        let mut len = [0u8; 4];
        len.copy_from_slice(&body[MAGIC.len()..MAGIC.len() + 4]);
        let len = u32::from_le_bytes(len) as usize;
        let start = MAGIC.len() + 4;
        if len > MAX_META_BYTES || start + len > body.len() {
            return Err(corrupt("run file is truncated"));
        }
        let meta = RunMeta::parse(&body[start..start + len])?;
        Ok(RunFile { meta, body, snapshot_at: start + len, tag })
    }

    fn decode_meta(bytes: &[u8]) -> Result<(RunMeta, usize), StoreError> {
        Self::decode(bytes).map(|f| (f.meta, f.snapshot_at))
    }

    /// The JSON of a side record whose tag verifies; `None` (with a warning) otherwise.
    fn open_side<'a>(
        &self,
        domain: &str,
        run_id: &RunId,
        request_id: RequestId,
        bytes: &'a [u8],
        what: &str,
    ) -> Option<&'a [u8]> {
        match self.keys.open_record(domain, run_id.as_str(), request_id, bytes, self.clock.now_ms()) {
            Ok(json) => Some(json),
            Err(refusal) => {
                tracing::warn!(run = %run_id, request = request_id, "ignoring {}", refusal.describe(what, self.keys.origin()));
                None
            }
        }
    }

    /// Reads a run or side file of the directory. Only a regular file of at most [`MAX_FILE_BYTES`] is
    /// read; anything else named like one (a FIFO, a device, a symbolic link, a huge sparse file)
    /// is [`StoreError::Corrupt`]. Prevents: a FIFO that blocks every `exec`/`wait` of the
    /// directory on its open or read, and a sparse file of terabytes read into memory. The checks
    /// are made on the opened file (non-blocking, without following links), so the file cannot be
    /// swapped between the check and the read.
    fn read(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
        use std::io::Read as _;
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
        }
        let file = match options.open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            // O_NOFOLLOW on a symbolic link.
            Err(e) if cfg!(unix) && e.raw_os_error() == Some(ELOOP) => {
                return Err(StoreError::Corrupt(format!("{} is a symbolic link, not a run file", path.display())));
            }
            Err(e) => return Err(io(e)),
        };
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(StoreError::Corrupt(format!("{} is not a regular file", path.display())));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(StoreError::Corrupt(format!(
                "{} is {} bytes, more than any run file ({MAX_FILE_BYTES})",
                path.display(),
                meta.len()
            )));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
        if bytes.len() as u64 > MAX_FILE_BYTES {
            return Err(StoreError::Corrupt(format!("{} grew past {MAX_FILE_BYTES} bytes", path.display())));
        }
        Ok(Some(bytes))
    }

    /// Opens a claim file without blocking or following links; `None` unless it is a regular file.
    fn open_claim(path: &Path) -> Option<std::fs::File> {
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
        }
        let f = options.open(path).ok()?;
        f.metadata().ok().filter(|m| m.is_file()).map(|_| f)
    }

    /// Holds the directory's admission lock until the returned file is dropped.
    fn admission_lock(&self) -> Result<std::fs::File, StoreError> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(".admission"))
            .map_err(io)?;
        f.lock().map_err(io)?;
        Ok(f)
    }

    /// Side files of a run whose names start with `<run id>.<kind>-`.
    fn side_files(&self, id: &RunId, kind: &str) -> Vec<(String, PathBuf)> {
        let prefix = format!("{id}.{kind}-");
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        rd.flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let rest = name.strip_prefix(&prefix)?.to_string();
                Some((rest, e.path()))
            })
            .collect()
    }

    fn remove_side_files(&self, id: &RunId) {
        for (_, p) in self.side_files(id, "result").into_iter().chain(self.side_files(id, "decision")) {
            let _ = std::fs::remove_file(p);
        }
    }

    fn write_atomically(&self, dest: &Path, bytes: &[u8]) -> Result<(), StoreError> {
        static NEXT_TMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tmp = self.dir.join(format!(
            ".{}.{}.{}.tmp",
            dest.file_name().and_then(|n| n.to_str()).unwrap_or("run"),
            std::process::id(),
            NEXT_TMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let result = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, dest)
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map_err(io)
    }
}

/// A console record's file (`console/<kind>/<key>.json`).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConsoleFile {
    updated_ms: u64,
    expires_ms: u64,
    value: String,
}

impl DirectorySnapshotStore {
    fn console_dir(&self, kind: ConsoleKind) -> PathBuf {
        self.dir.join("console").join(kind.as_str())
    }

    /// The console records of `kind` not expired (expired ones are deleted), with their paths.
    fn read_console(&self, kind: ConsoleKind) -> Vec<(PathBuf, ConsoleFile)> {
        let now = self.clock.now_ms();
        let Ok(rd) = std::fs::read_dir(self.console_dir(kind)) else { return Vec::new() };
        rd.flatten()
            .filter_map(|e| {
                let path = e.path();
                if path.extension().and_then(|x| x.to_str()) != Some("json") {
                    return None;
                }
                let record =
                    Self::read(&path).ok().flatten().and_then(|b| serde_json::from_slice::<ConsoleFile>(&b).ok());
                match record {
                    Some(r) if r.expires_ms > now => Some((path, r)),
                    _ => {
                        let _ = std::fs::remove_file(&path);
                        None
                    }
                }
            })
            .collect()
    }
}

impl DirectorySnapshotStore {
    /// The task's record as stored (`None`: missing, unsigned, forged, or expired — then deleted).
    fn read_task(&self, id: &RunId) -> Result<Option<codemode_core::task::TaskRecord>, StoreError> {
        let path = self.path(id, "task");
        let Some(bytes) = Self::read(&path)? else { return Ok(None) };
        let Some(json) = self.open_side(TASK_DOMAIN, id, 0, &bytes, "a task record") else { return Ok(None) };
        let Some(task) = crate::tasks::decode(id.as_str(), json) else { return Ok(None) };
        if task.expired(self.clock.now_ms()) {
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(self.path(id, "driver"));
            return Ok(None);
        }
        Ok(Some(task))
    }

    /// The holder of the task's drive claim and when it ends.
    fn read_claim(&self, id: &RunId) -> Option<(String, u64)> {
        let bytes = Self::read(&self.path(id, "driver")).ok()??;
        let text = String::from_utf8(bytes).ok()?;
        let (holder, until) = text.split_once('\n')?;
        Some((holder.to_string(), until.trim().parse().ok()?))
    }

    /// Task files past their expiry (and the claims beside them), deleted.
    fn purge_tasks(&self) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().and_then(|x| x.to_str()) != Some("task") {
                continue;
            }
            let Some(id) = p.file_stem().and_then(|s| s.to_str()).and_then(|s| RunId::parse(s).ok()) else { continue };
            // Reading an expired (or unreadable) record deletes it.
            if !matches!(self.read_task(&id), Ok(Some(_))) {
                let _ = std::fs::remove_file(&p);
                let _ = std::fs::remove_file(self.path(&id, "driver"));
            }
        }
    }
}

#[async_trait::async_trait]
impl SnapshotStore for DirectorySnapshotStore {
    fn name(&self) -> &str {
        "directory"
    }

    fn accepts_live(&self) -> bool {
        false
    }

    async fn put(&self, run: SuspendedRun) -> Result<(), StoreError> {
        let id = run.run_id.clone();
        let lock = self.path(&id, "lock");
        let resuspension = lock.exists();
        let bytes = self.encode(run)?;
        if !resuspension {
            // Count and write under the admission lock: two processes must not both see 63.
            let _admission = self.admission_lock()?;
            self.purge_expired().await;
            if self.run_files().len() >= self.max_runs {
                return Err(StoreError::TooMany);
            }
            self.write_atomically(&self.path(&id, "run"), &bytes)?;
            return Ok(());
        }
        self.write_atomically(&self.path(&id, "run"), &bytes)?;
        if resuspension {
            let _ = std::fs::remove_file(&lock);
        }
        Ok(())
    }

    async fn checkout(&self, run_id: &RunId, scope: &RunScope) -> Result<SuspendedRun, StoreError> {
        let now = self.clock.now_ms();
        let run_path = self.path(run_id, "run");
        let Some(bytes) = Self::read(&run_path)? else {
            // Held by another wait? Then tell the owner it is busy (and others it is not theirs).
            return match Self::read(&self.path(run_id, "lock"))? {
                Some(b) => {
                    let (meta, _) = Self::decode_meta(&b)?;
                    meta.scope.check(scope).map_err(StoreError::WrongScope)?;
                    Err(StoreError::Busy)
                }
                None => Err(StoreError::Unavailable),
            };
        };
        let RunFile { meta, body, snapshot_at, tag } = Self::decode(&bytes)?;
        if meta.run_id != *run_id {
            return Err(StoreError::Corrupt("run file names another run".into()));
        }
        if now >= meta.expires_at_ms {
            let _ = std::fs::remove_file(&run_path);
            return Err(StoreError::Unavailable);
        }
        meta.scope.check(scope).map_err(StoreError::WrongScope)?;
        // Before the run is taken: a refused file stays for a process holding the right key.
        if let Err(refusal) = self.keys.verify_optional(RUN_DOMAIN, &[run_id.as_str().as_bytes(), body], tag, now) {
            return Err(StoreError::Unauthenticated(refusal.describe("the run file", self.keys.origin())));
        }
        match std::fs::rename(&run_path, self.path(run_id, "lock")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StoreError::Busy),
            Err(e) => return Err(io(e)),
        }
        Ok(meta.into_run(body[snapshot_at..].to_vec()))
    }

    async fn remove(&self, run_id: &RunId) -> bool {
        let a = std::fs::remove_file(self.path(run_id, "run")).is_ok();
        let b = std::fs::remove_file(self.path(run_id, "lock")).is_ok();
        self.remove_side_files(run_id);
        a || b
    }

    async fn purge_expired(&self) -> Vec<RunId> {
        let now = self.clock.now_ms();
        let mut gone = Vec::new();
        for (id, path, locked) in self.run_files() {
            let expired = match Self::read(&path) {
                Ok(Some(bytes)) => match Self::decode_meta(&bytes) {
                    Ok((meta, _)) => {
                        let grace = if locked { LOCK_GRACE_MS } else { 0 };
                        now >= meta.expires_at_ms.saturating_add(grace)
                    }
                    // Unreadable files are garbage.
                    Err(_) => true,
                },
                // Not a run file at all (a FIFO, a link, a file too large to be one): garbage too.
                Err(StoreError::Corrupt(_)) => true,
                _ => false,
            };
            if expired && std::fs::remove_file(&path).is_ok() {
                self.remove_side_files(&id);
                gone.push(id);
            }
        }
        self.purge_tasks();
        gone
    }

    async fn count(&self) -> usize {
        self.run_files().len()
    }

    /// Reads every run file of the directory (at most 64, the directory's cap) for its metadata;
    /// a file that cannot be read or decoded is left out (a sweep deletes it).
    async fn list_runs(
        &self,
        scope: Option<&RunScope>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let now = self.clock.now_ms();
        let mut runs = Vec::new();
        for (id, path, locked) in self.run_files() {
            let Ok(Some(bytes)) = Self::read(&path) else { continue };
            let Ok(RunFile { meta, .. }) = Self::decode(&bytes) else { continue };
            if meta.run_id != id || now >= meta.expires_at_ms || scope.is_some_and(|s| *s != meta.scope) {
                continue;
            }
            let mut listing = meta.listing(bytes.len() as u64);
            listing.checked_out = locked;
            runs.push(listing);
        }
        Ok(page_runs(runs, cursor, limit))
    }

    async fn put_console_record(
        &self,
        kind: ConsoleKind,
        key: &str,
        value: &str,
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        crate::console::check_record(key, value)?;
        let dir = self.console_dir(kind);
        std::fs::create_dir_all(&dir).map_err(io)?;
        let now = self.clock.now_ms();
        let record = ConsoleFile { updated_ms: now, expires_ms: now.saturating_add(ttl_ms), value: value.to_string() };
        let bytes = serde_json::to_vec(&record).map_err(|e| StoreError::Encode(e.to_string()))?;
        self.write_atomically(&dir.join(format!("{key}.json")), &bytes)?;
        // Past the cap: the expired records, then the least recently updated, go.
        let mut records = self.read_console(kind);
        if records.len() > kind.max_records() {
            records.sort_by_key(|r| r.1.updated_ms);
            let excess = records.len() - kind.max_records();
            for (path, _) in records.into_iter().take(excess) {
                let _ = std::fs::remove_file(path);
            }
        }
        Ok(())
    }

    async fn console_record(&self, kind: ConsoleKind, key: &str) -> Result<Option<String>, StoreError> {
        if !codemode_core::store::console_key_ok(key) {
            return Ok(None);
        }
        let path = self.console_dir(kind).join(format!("{key}.json"));
        let Some(bytes) = Self::read(&path).ok().flatten() else { return Ok(None) };
        Ok(serde_json::from_slice::<ConsoleFile>(&bytes)
            .ok()
            .filter(|r| r.expires_ms > self.clock.now_ms())
            .map(|r| r.value))
    }

    async fn console_records(&self, kind: ConsoleKind, limit: usize) -> Result<Vec<String>, StoreError> {
        let mut records = self.read_console(kind);
        records.sort_by_key(|r| std::cmp::Reverse(r.1.updated_ms));
        Ok(records.into_iter().take(limit).map(|(_, r)| r.value).collect())
    }

    async fn task(&self, task_id: &str) -> Result<Option<codemode_core::task::TaskRecord>, StoreError> {
        let Ok(id) = RunId::parse(task_id) else { return Ok(None) };
        self.read_task(&id)
    }

    async fn put_task(&self, task: &codemode_core::task::TaskRecord, driver: Option<&str>) -> Result<bool, StoreError> {
        let Ok(id) = RunId::parse(&task.task_id) else {
            return Err(StoreError::Encode(format!("`{}` is not a task id", task.task_id)));
        };
        let json = crate::tasks::encode(task)?;
        let _lock = self.admission_lock()?;
        if self.read_task(&id)?.is_some_and(|t| t.state.is_terminal()) {
            return Ok(false);
        }
        let now = self.clock.now_ms();
        if let Some(d) = driver
            && self.read_claim(&id).is_some_and(|(holder, until)| holder != d && until > now)
        {
            return Ok(false);
        }
        let bytes = self.keys.seal_record(TASK_DOMAIN, id.as_str(), 0, &json);
        self.write_atomically(&self.path(&id, "task"), &bytes)?;
        Ok(true)
    }

    async fn drive_task(&self, task_id: &str, driver: &str, lease_ms: u64) -> Result<bool, StoreError> {
        let Ok(id) = RunId::parse(task_id) else { return Ok(false) };
        if driver.contains('\n') {
            return Err(StoreError::Encode("a driver name has no line breaks".into()));
        }
        let _lock = self.admission_lock()?;
        let now = self.clock.now_ms();
        if self.read_claim(&id).is_some_and(|(holder, until)| holder != driver && until > now) {
            return Ok(false);
        }
        let claim = format!("{driver}\n{}", now.saturating_add(lease_ms));
        self.write_atomically(&self.path(&id, "driver"), claim.as_bytes())?;
        Ok(true)
    }

    async fn orphaned_tasks(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return Ok(Vec::new()) };
        let now = self.clock.now_ms();
        let mut out = Vec::new();
        for e in rd.flatten() {
            if out.len() >= limit {
                break;
            }
            let p = e.path();
            if p.extension().and_then(|x| x.to_str()) != Some("task") {
                continue;
            }
            let Some(id) = p.file_stem().and_then(|s| s.to_str()).and_then(|s| RunId::parse(s).ok()) else { continue };
            let working =
                matches!(self.read_task(&id), Ok(Some(t)) if t.state == codemode_core::task::TaskState::Working);
            if working && self.read_claim(&id).is_none_or(|(_, until)| until <= now) {
                out.push(id.to_string());
            }
        }
        Ok(out)
    }

    async fn release_task(&self, task_id: &str, driver: &str) -> Result<(), StoreError> {
        let Ok(id) = RunId::parse(task_id) else { return Ok(()) };
        let _lock = self.admission_lock()?;
        if self.read_claim(&id).is_some_and(|(holder, _)| holder == driver) {
            let _ = std::fs::remove_file(self.path(&id, "driver"));
        }
        Ok(())
    }

    async fn record_result(&self, run_id: &RunId, delivery: &Delivery) -> Result<bool, StoreError> {
        if !self.path(run_id, "run").exists() && !self.path(run_id, "lock").exists() {
            // The run is gone (settled, aborted, expired): nobody will collect the result.
            return Ok(false);
        }
        let json = serde_json::to_vec(delivery).map_err(|e| StoreError::Encode(e.to_string()))?;
        let bytes = self.keys.seal_record(RESULT_DOMAIN, run_id.as_str(), delivery.id, &json);
        self.write_atomically(&self.dir.join(format!("{run_id}.result-{}", delivery.id)), &bytes)?;
        Ok(true)
    }

    async fn take_results(&self, run_id: &RunId) -> Result<Vec<Delivery>, StoreError> {
        let mut out = Vec::new();
        for (suffix, path) in self.side_files(run_id, "result") {
            let Some(bytes) = Self::read(&path)? else { continue };
            let _ = std::fs::remove_file(&path);
            let Ok(request) = suffix.parse::<RequestId>() else { continue };
            let Some(json) = self.open_side(RESULT_DOMAIN, run_id, request, &bytes, "a recorded result") else {
                continue;
            };
            match serde_json::from_slice::<Delivery>(json) {
                Ok(d) if d.id == request => out.push(d),
                Ok(_) => tracing::warn!(run = %run_id, "ignoring a recorded result filed under another request"),
                Err(e) => tracing::warn!(run = %run_id, error = %e, "ignoring an unreadable recorded result"),
            }
        }
        out.sort_by_key(|d| d.id);
        Ok(out)
    }

    async fn record_decision(
        &self,
        run_id: &RunId,
        request_id: RequestId,
        decision: &ApprovalDecision,
    ) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let run = self.path(run_id, "run");
        let parked = match Self::read(&run)? {
            Some(bytes) => match Self::decode_meta(&bytes) {
                Ok((meta, _)) if now < meta.expires_at_ms => parked_ids(&meta.pending),
                Ok(_) => {
                    // Past its TTL: delete it now, and say so.
                    let _ = std::fs::remove_file(&run);
                    self.remove_side_files(run_id);
                    return Err(StoreError::Expired);
                }
                Err(_) => return Err(StoreError::Unavailable),
            },
            // Checked out by a `wait` right now (the lock file is the run as it was taken): it
            // collects the decision while it waits.
            None => match Self::read(&self.path(run_id, "lock"))? {
                Some(bytes) => match Self::decode_meta(&bytes) {
                    Ok((meta, _)) => parked_ids(&meta.pending),
                    Err(_) => return Err(StoreError::Unavailable),
                },
                None => return Err(StoreError::Unavailable),
            },
        };
        if !parked.contains(&request_id) {
            return Err(StoreError::NotParked { request_id, parked });
        }
        let json = serde_json::to_vec(decision).map_err(|e| StoreError::Encode(e.to_string()))?;
        let bytes = self.keys.seal_record(DECISION_DOMAIN, run_id.as_str(), request_id, &json);
        self.write_atomically(&self.dir.join(format!("{run_id}.decision-{request_id}")), &bytes)
    }

    async fn has_decisions(&self, run_id: &RunId) -> Result<bool, StoreError> {
        Ok(!self.side_files(run_id, "decision").is_empty())
    }

    async fn take_decisions(&self, run_id: &RunId) -> Result<Vec<(RequestId, ApprovalDecision)>, StoreError> {
        let mut out = Vec::new();
        for (suffix, path) in self.side_files(run_id, "decision") {
            let Some(bytes) = Self::read(&path)? else { continue };
            let _ = std::fs::remove_file(&path);
            let Ok(request) = suffix.parse::<RequestId>() else { continue };
            let Some(json) = self.open_side(DECISION_DOMAIN, run_id, request, &bytes, "an approval decision") else {
                continue;
            };
            match serde_json::from_slice::<ApprovalDecision>(json) {
                Ok(d) => out.push((request, d)),
                Err(_) => {
                    tracing::warn!(run = %run_id, file = %path.display(), "ignoring an unreadable approval decision")
                }
            }
        }
        out.sort_by_key(|(id, _)| *id);
        Ok(out)
    }

    async fn claim_calls(&self, run_id: &RunId) -> Result<Option<CallsClaim>, StoreError> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.dir.join(format!("{run_id}.calls-{}-{n}", std::process::id()));
        let file = std::fs::File::create(&path).map_err(io)?;
        file.lock().map_err(io)?;
        Ok(Some(CallsClaim::new(Claim { path, _file: file })))
    }

    async fn calls_claimed(&self, run_id: &RunId) -> bool {
        let mut claimed = false;
        let own = format!("{}-", std::process::id());
        for (rest, path) in self.side_files(run_id, "calls") {
            if rest.starts_with(&own) {
                // This process's own claim (a `wait` that resumed the run watches the other ones).
                continue;
            }
            let Some(f) = Self::open_claim(&path) else {
                // Not a claim this store wrote (a FIFO, a link, a directory): garbage.
                let _ = std::fs::remove_file(&path);
                continue;
            };
            match f.try_lock_shared() {
                // Nobody holds it: its process ended without cleaning up.
                Ok(()) => {
                    let _ = std::fs::remove_file(&path);
                }
                Err(std::fs::TryLockError::WouldBlock) => claimed = true,
                Err(std::fs::TryLockError::Error(e)) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot check a nested-call claim");
                    claimed = true;
                }
            }
        }
        claimed
    }
}

/// A held claim file: unlocked (closed) and deleted on drop.
struct Claim {
    path: PathBuf,
    _file: std::fs::File,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests;
