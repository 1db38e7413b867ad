//! Loading the guest: pre-initialization (wasmtime-wizer bakes the QuickJS runtime, context and the
//! bridge prelude into the module's data), compilation with Cranelift, and an on-disk cache of the
//! compiled artifact so only the first run on a machine pays for them.

use crate::host::{HostState, linker};
use codemode_core::engine::GuestLimits;
use std::path::{Path, PathBuf};
use std::time::Duration;
use wasmtime::{Config, Engine, InstancePre, Module, Store};

/// The guest module built by build.rs (QuickJS-ng + shim), before pre-initialization.
pub(crate) const GUEST_WASM: &[u8] = include_bytes!(env!("CODEMODE_GUEST_WASM"));
/// SHA-256 of [`GUEST_WASM`] (hex), computed by the build script.
const GUEST_WASM_SHA256: &str = env!("CODEMODE_GUEST_WASM_SHA256");

/// Bumped whenever the pre-initialization or the snapshot layout changes in a way the module hash
/// does not capture.
const BUILD_FORMAT: u32 = 1;

/// Native stack wasm code may use (wasmtime's `max_wasm_stack`). Guest code runs on
/// [`codemode_workers`] threads, whose stack is twice this; deep JS recursion hits QuickJS's own
/// (much smaller) limit long before this one.
pub(crate) const MAX_WASM_STACK: usize = codemode_workers::WORKER_STACK / 2;

/// Instances alive at once (active `exec` / `wait` calls; suspended runs hold none).
const MAX_INSTANCES: u32 = 256;

/// Largest linear memory of one instance: the largest `memoryLimitBytes` plus headroom.
pub(crate) const MAX_MEMORY: usize = (1 << 30) + (64 << 20);

/// Linear memory kept resident between instances of a pool slot: a fresh instance then starts without
/// page faults (measured here: 105 µs instead of 310 µs for `return 1+1`). With the page-map scan
/// (below) only the pages a run wrote are restored when its instance ends.
const KEEP_RESIDENT: usize = 4 << 20;

/// Table memory kept resident between instances of a pool slot. The guest's one function table
/// (QuickJS's function pointers, 8 KiB) was otherwise released with `madvise` at the end of every
/// instance and faulted back in by the next: a system call, two page faults and, in a process with
/// several threads, a TLB shootdown per run. Kept, it is reset by a plain write.
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// A first compile slower than this is reported with its usual cause (wasmtime built unoptimized).
const SLOW_COMPILE: Duration = Duration::from_secs(15);

/// How often the epoch ticks; the wall-clock backstop has this granularity.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Everything needed to run guests; built once per process.
pub(crate) struct Loaded {
    pub(crate) engine: Engine,
    /// Whether instances come from the pooling allocator, whose slots (and the pages a run wrote in
    /// them) outlive the instance: see `Vm`'s deep-stack clean-up.
    pub(crate) pooled: bool,
    pub(crate) pre: InstancePre<HostState>,
    /// Memory and stack pointer of a fresh (pre-initialized) instance: the base snapshots are
    /// diffed against. Read on first need ([`Loaded::base`]): a process that never snapshots never copies it.
    base: std::sync::OnceLock<Base>,
    /// Identity of this engine build ([`build_id`]): the guest module, the prelude and [`BUILD_FORMAT`].
    pub(crate) build_id: String,
    /// Exported mutable globals (the whole non-memory state of an instance).
    pub(crate) mutable_globals: Vec<String>,
    /// Where the shim's host-visible statics are: the same in every instance of this build, so
    /// the first instance asks (`cm_statics`) and every later one reuses the answer.
    pub(crate) statics: std::sync::OnceLock<crate::instance::Statics>,
}

/// The name of the guest's stack pointer global (exported for snapshots, like every mutable global).
pub(crate) const STACK_POINTER: &str = "__stack_pointer";

/// The guest's stack pointer in `instance` (in one no guest code ran in: the top of the stack), or
/// `None` when the module exports no i32 [`STACK_POINTER`].
pub(crate) fn stack_pointer(store: &mut Store<HostState>, instance: &wasmtime::Instance) -> Option<u32> {
    match instance.get_global(&mut *store, STACK_POINTER).map(|g| g.get(&mut *store)) {
        Some(wasmtime::Val::I32(sp)) => Some(sp as u32),
        _ => None,
    }
}

/// What a fresh instance looks like: what snapshots are diffed against.
#[derive(Debug)]
pub(crate) struct Base {
    /// Its linear memory.
    pub(crate) memory: Vec<u8>,
    /// Its stack pointer: the top of the stack, which lies below all data (the guest is linked
    /// with `--stack-first`; `tests::the_stack_lies_below_all_data` checks the module).
    pub(crate) stack_top: usize,
}

impl Loaded {
    /// A fresh instance's memory and stack pointer, read from one instance the first time a
    /// snapshot is taken or restored.
    pub(crate) fn base(&self) -> Result<&Base, ModuleError> {
        if let Some(base) = self.base.get() {
            return Ok(base);
        }
        let mut store = Store::new(&self.engine, HostState::new(GuestLimits::default()));
        store.set_epoch_deadline(u64::MAX / 2);
        let instance = self.pre.instantiate(&mut store).map_err(|e| ModuleError::Instantiate(format!("{e:#}")))?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| ModuleError::Invalid("the guest exports no memory".into()))?;
        let memory = memory.data(&store).to_vec();
        let stack_top = stack_pointer(&mut store, &instance)
            .ok_or_else(|| ModuleError::Invalid(format!("the guest exports no i32 `{STACK_POINTER}`")))?;
        Ok(self.base.get_or_init(move || Base { memory, stack_top: stack_top as usize }))
    }
}

/// The identity of this engine build, as stored in snapshots and in the cached artifact's name:
/// the first 64 bits of the guest module's digest and of the prelude's, and [`BUILD_FORMAT`]. Both
/// digests are computed when the crates are built: hashing the module's megabyte here cost every
/// process start ~1 ms, and even hashing the prelude's 60 KB (with the CPU feature probe SHA-256
/// needs first, which traps to the hypervisor on a virtual machine) took ~50 µs of a ~6 ms process.
pub(crate) fn build_id() -> String {
    let head = |hex: &'static str| hex.get(..16).unwrap_or(hex);
    format!("{}{}-{BUILD_FORMAT}", head(GUEST_WASM_SHA256), head(codemode_bridge::PRELUDE_SHA256))
}

fn engine_config(pooling: bool) -> Config {
    let mut c = Config::new();
    c.epoch_interruption(true);
    c.max_wasm_stack(MAX_WASM_STACK);
    // Must be at least `max_wasm_stack` (wasmtime checks it even though no async call is made).
    c.async_stack_size(MAX_WASM_STACK + (1 << 20));
    // `CODEMODE_WASM_PROFILER=perfmap`: writes /tmp/perf-<pid>.map so `perf report` names the guest's
    // (QuickJS's) functions instead of `[JIT]` addresses. A profiling aid; it does not change code.
    if std::env::var("CODEMODE_WASM_PROFILER").is_ok_and(|v| v == "perfmap") {
        c.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    if pooling {
        let mut p = wasmtime::PoolingAllocationConfig::default();
        p.total_memories(MAX_INSTANCES)
            .total_tables(MAX_INSTANCES)
            .total_core_instances(MAX_INSTANCES)
            .max_memory_size(MAX_MEMORY)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(TABLE_KEEP_RESIDENT)
            // Without the scan, every instance's end resets the whole kept-resident range by hand
            // (the guest's 1.6 MiB: a 1 MiB zero fill of the stack and a copy of the image), however
            // little the run touched; with it (Linux ≥ 6.7), only the pages the run wrote. Elsewhere
            // `Auto` falls back to that full reset.
            .pagemap_scan(wasmtime::Enabled::Auto);
        c.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(p));
    }
    c
}

/// The pooling allocator (fast instantiation) when the platform grants its address-space
/// reservation, else the on-demand allocator; with whether it pools (see [`Loaded::pooled`]).
fn new_engine() -> Result<(Engine, bool), ModuleError> {
    match Engine::new(&engine_config(true)) {
        Ok(e) => Ok((e, true)),
        Err(pooled) => {
            tracing::warn!(error = %pooled, "the pooling allocator is unavailable; falling back to on-demand instances");
            Engine::new(&engine_config(false)).map(|e| (e, false)).map_err(|e| ModuleError::Engine(format!("{e:#}")))
        }
    }
}

/// Why the guest module could not be loaded. Cloneable (the outcome of the one load of a process is
/// shared by every run), so wasmtime's errors are kept as their rendered text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModuleError {
    /// wasmtime could not create an engine.
    #[error("cannot create the wasm engine: {0}")]
    Engine(String),
    /// Pre-initialization (QuickJS runtime, context, prelude) failed.
    #[error("cannot pre-initialize the guest: {0}")]
    Preinitialize(String),
    /// The module does not parse, or breaks an invariant snapshots rely on.
    #[error("invalid guest module: {0}")]
    Invalid(String),
    /// Cranelift could not compile it.
    #[error("cannot compile the guest: {0}")]
    Compile(String),
    /// Linking or instantiation failed.
    #[error("cannot instantiate the guest: {0}")]
    Instantiate(String),
}

/// Where compiled artifacts are cached: `$CODEMODE_CACHE_DIR`, else `$XDG_CACHE_HOME/codemode`, else
/// `~/.cache/codemode`. `CODEMODE_NO_MODULE_CACHE=1` disables the cache.
pub fn cache_dir() -> Option<PathBuf> {
    if std::env::var("CODEMODE_NO_MODULE_CACHE").is_ok_and(|v| v == "1") {
        return None;
    }
    if let Some(d) = std::env::var_os("CODEMODE_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("codemode"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("codemode"))
}

fn artifact_path(dir: &Path, build_id: &str) -> PathBuf {
    let target = format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS);
    dir.join(format!("quickjs-wasi-{build_id}-{target}-wasmtime{}.cwasm", env!("CARGO_PKG_VERSION")))
}

fn load_cached(engine: &Engine, path: &Path) -> Option<Module> {
    if !path.is_file() {
        return None;
    }
    // SAFETY: `Module::deserialize_file` runs native code from the artifact, so the artifact must come
    // from `Module::serialize` of a compatible engine. This file is written only by `store_cached`
    // below, into the user's own cache directory (created with mode 0700), under a name keyed by the
    // module hash, target and crate version; wasmtime additionally checks that the artifact matches
    // this engine's version and configuration and returns an error (we then recompile) when it does
    // not. Anyone able to write there could equally replace the `codemode` binary itself. The file is
    // mapped, not read (no 3.6 MB copy at every start); mapped files must not change while in use,
    // and `store_cached` never writes in place: it writes a temporary file and renames it over the
    // old one, so a mapping keeps the old file's contents.
    #[allow(unsafe_code)]
    let module = unsafe { Module::deserialize_file(engine, path) };
    match module {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "ignoring an unusable cached guest module");
            None
        }
    }
}

fn store_cached(module: &Module, path: &Path) {
    let Some(dir) = path.parent() else { return };
    let result = (|| -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
        let bytes = module.serialize().map_err(|e| std::io::Error::other(e.to_string()))?;
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            path.file_name().and_then(|n| n.to_str()).unwrap_or("cwasm"),
            std::process::id()
        ));
        std::fs::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        tracing::warn!(path = %path.display(), error = %e, "cannot cache the compiled guest module");
        return;
    }
    prune_stale(dir, path, std::time::SystemTime::now());
}

/// How long another build's cached artifact may go unread before a new artifact's write removes it.
/// Prevents: every upgrade leaving its ~4 MB artifact in the cache directory forever. Kept this long
/// so that two installed versions used in turn do not remove each other's artifact (and recompile)
/// at each switch: an artifact in use is read at every start, which keeps its access time fresh
/// (the kernel updates it at least daily under `relatime`).
const STALE_ARTIFACT: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// Removes the other builds' artifacts not read for [`STALE_ARTIFACT`] and temporary files an
/// interrupted write left behind more than a day ago. Runs only after this process wrote a new
/// artifact (once per build and machine), never on the start path. Touches nothing but this
/// cache's own file names, never directories or symbolic links (`DirEntry::metadata` does not
/// follow them); errors are ignored (another process may be removing the same files).
fn prune_stale(dir: &Path, keep: &Path, now: std::time::SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == keep {
            continue;
        }
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        let limit = if name.starts_with(".quickjs-wasi-") && name.ends_with(".tmp") {
            std::time::Duration::from_secs(24 * 3600)
        } else if name.starts_with("quickjs-wasi-") && name.ends_with(".cwasm") {
            STALE_ARTIFACT
        } else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let Some(last) = [meta.accessed(), meta.modified()].into_iter().flatten().max() else { continue };
        if now.duration_since(last).is_ok_and(|idle| idle > limit) {
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::debug!(path = %path.display(), "removed a stale cached guest module"),
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "cannot remove a stale cached guest module")
                }
            }
        }
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

/// Runs the shim's `cm_init` (QuickJS runtime, context, prelude) in an instrumented instance and lets
/// wizer bake the resulting state into a new module.
fn preinitialize(engine: &Engine) -> wasmtime::Result<Vec<u8>> {
    let wizer = wasmtime_wizer::Wizer::new();
    let (cx, instrumented) = wizer.instrument(GUEST_WASM)?;
    let module = Module::new(engine, &instrumented)?;
    let linker = linker(engine)?;
    let mut store = Store::new(engine, HostState::new(GuestLimits::default()));
    store.set_epoch_deadline(u64::MAX / 2);
    let instance = linker.instantiate(&mut store, &module)?;
    if let Some(init) = instance.get_func(&mut store, "_initialize") {
        init.typed::<(), ()>(&store)?.call(&mut store, ())?;
    }
    let prelude = codemode_bridge::PRELUDE.as_bytes();
    let alloc = instance.get_typed_func::<u32, u32>(&mut store, "cm_alloc")?;
    let free = instance.get_typed_func::<u32, ()>(&mut store, "cm_free")?;
    let init = instance.get_typed_func::<(u32, u32), i32>(&mut store, "cm_init")?;
    let len = u32::try_from(prelude.len())?;
    let ptr = alloc.call(&mut store, len)?;
    let memory = instance.get_memory(&mut store, "memory").ok_or_else(|| wasmtime::format_err!("no memory export"))?;
    memory.write(&mut store, ptr as usize, prelude)?;
    let status = init.call(&mut store, (ptr, len))?;
    free.call(&mut store, ptr)?;
    if status != 0 {
        // The failure is in the shim's output buffer; `cm_statics` says where its pointer and
        // length are (the first two words of its table).
        let statics = instance.get_typed_func::<(), u32>(&mut store, "cm_statics")?.call(&mut store, ())? as usize;
        let word = |at: usize| -> Option<usize> {
            let b = memory.data(&store).get(at..at.checked_add(4)?)?;
            Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        };
        let text = |out_ptr: usize, out_len: usize| {
            memory
                .data(&store)
                .get(out_ptr..out_ptr.checked_add(out_len)?)
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        let detail = word(statics)
            .zip(word(statics + 4))
            .and_then(|(buf_at, len_at)| text(word(buf_at)?, word(len_at)?))
            .unwrap_or_default();
        wasmtime::bail!("the guest failed to initialize (step {status}): {detail}");
    }
    let mut state = WizerState { store: &mut store, instance };
    block_on(wizer.snapshot(&cx, &mut state))
}

/// What wizer reads out of the initialized instance.
struct WizerState<'a> {
    store: &'a mut Store<HostState>,
    instance: wasmtime::Instance,
}

impl wasmtime_wizer::InstanceState for WizerState<'_> {
    async fn global_get(&mut self, name: &str, _: wasmtime_wizer::ValType) -> wasmtime_wizer::SnapshotVal {
        use wasmtime_wizer::SnapshotVal as S;
        let value = self.instance.get_global(&mut *self.store, name).map(|g| g.get(&mut *self.store));
        match value {
            Some(wasmtime::Val::I32(x)) => S::I32(x),
            Some(wasmtime::Val::I64(x)) => S::I64(x),
            Some(wasmtime::Val::F32(x)) => S::F32(x),
            Some(wasmtime::Val::F64(x)) => S::F64(x),
            Some(wasmtime::Val::V128(x)) => S::V128(x.as_u128()),
            // Wizer only asks for globals it found in the module; our guest has only numeric ones.
            _ => S::I32(0),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(m) => contents(m.data(&*self.store)),
            None => contents(&[]),
        }
    }
}

/// Every mutable global must be exported, or a snapshot would silently miss state.
fn mutable_globals(wasm: &[u8]) -> Result<Vec<String>, ModuleError> {
    let invalid = |e: wasmparser::BinaryReaderError| ModuleError::Invalid(e.to_string());
    use wasmparser::{ExternalKind, Parser, Payload};
    let mut imported_globals = 0u32;
    let mut mutable: Vec<u32> = Vec::new();
    let mut exported: std::collections::HashMap<u32, String> = std::collections::HashMap::new();
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(invalid)? {
            Payload::ImportSection(r) => {
                for imp in r.into_imports() {
                    if matches!(imp.map_err(invalid)?.ty, wasmparser::TypeRef::Global(_)) {
                        imported_globals += 1;
                    }
                }
            }
            Payload::GlobalSection(r) => {
                for (i, g) in r.into_iter().enumerate() {
                    if g.map_err(invalid)?.ty.mutable {
                        mutable.push(imported_globals + i as u32);
                    }
                }
            }
            Payload::ExportSection(r) => {
                for e in r {
                    let e = e.map_err(invalid)?;
                    if e.kind == ExternalKind::Global {
                        exported.insert(e.index, e.name.to_string());
                    }
                }
            }
            _ => {}
        }
    }
    mutable
        .into_iter()
        .map(|i| {
            exported.get(&i).cloned().ok_or_else(|| {
                ModuleError::Invalid(format!("mutable global #{i} is not exported; snapshots would miss it"))
            })
        })
        .collect()
}

/// Loads (or builds and caches) the pre-initialized guest.
pub(crate) fn load() -> Result<Loaded, ModuleError> {
    let started = std::time::Instant::now();
    let (engine, pooled) = new_engine()?;
    let engine_ms = started.elapsed().as_secs_f64() * 1e3;
    let build_id = build_id();
    let cache = cache_dir().map(|d| artifact_path(&d, &build_id));
    let module = match cache.as_deref().and_then(|p| load_cached(&engine, p)) {
        Some(m) => m,
        None => {
            let started = std::time::Instant::now();
            let wizened = preinitialize(&engine).map_err(|e| ModuleError::Preinitialize(format!("{e:#}")))?;
            mutable_globals(&wizened)?;
            let module = Module::new(&engine, &wizened).map_err(|e| ModuleError::Compile(format!("{e:#}")))?;
            let took = started.elapsed();
            tracing::info!(ms = took.as_millis() as u64, "pre-initialized and compiled the quickjs-wasi guest");
            if took > SLOW_COMPILE {
                tracing::warn!(
                    seconds = took.as_secs(),
                    "compiling the guest module was slow (once per machine: it is cached); an application built \
                     in Cargo's dev profile should optimize its dependencies: [profile.dev.package.\"*\"] opt-level = 2"
                );
            }
            if let Some(p) = &cache {
                store_cached(&module, p);
            }
            module
        }
    };
    let mutable_globals: Vec<String> = module
        .exports()
        .filter_map(|e| match e.ty() {
            wasmtime::ExternType::Global(g) if g.mutability() == wasmtime::Mutability::Var => {
                Some(e.name().to_string())
            }
            _ => None,
        })
        .collect();
    let linker = linker(&engine).map_err(|e| ModuleError::Instantiate(format!("cannot link the guest: {e:#}")))?;
    let pre = linker.instantiate_pre(&module).map_err(|e| {
        ModuleError::Instantiate(format!("the guest module needs imports this host does not provide: {e:#}"))
    })?;
    start_ticker(engine.clone());
    tracing::debug!(
        engine_ms,
        total_ms = started.elapsed().as_secs_f64() * 1e3,
        "loaded the quickjs-wasi guest (engine, module)"
    );
    Ok(Loaded {
        engine,
        pooled,
        pre,
        base: std::sync::OnceLock::new(),
        build_id,
        mutable_globals,
        statics: std::sync::OnceLock::new(),
    })
}

/// Advances the engine's epoch every [`EPOCH_TICK`], for the wall-clock backstop.
fn start_ticker(engine: Engine) {
    let weak = engine.weak();
    drop(engine);
    let spawned = std::thread::Builder::new().name("codemode-epoch".into()).spawn(move || {
        while let Some(engine) = weak.upgrade() {
            engine.increment_epoch();
            drop(engine);
            std::thread::sleep(EPOCH_TICK);
        }
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the epoch ticker; only QuickJS's own interrupt stops busy guests");
    }
}

#[cfg(test)]
mod tests {
    /// The build id names this guest module and this prelude by their bytes as embedded (the
    /// build scripts' digests are of what the binary holds) and the build format: any change of
    /// one gives snapshots and cached artifacts another id.
    #[test]
    fn the_build_id_names_the_module_the_prelude_and_the_format() {
        use sha2::Digest as _;
        let hex = |bytes: &[u8]| -> String { sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect() };
        let (module, prelude) = (hex(super::GUEST_WASM), hex(codemode_bridge::PRELUDE.as_bytes()));
        let format = super::BUILD_FORMAT;
        assert_eq!(super::build_id(), format!("{}{}-{format}", &module[..16], &prelude[..16]));
    }

    /// A new artifact's write removes the other builds' artifacts unread for 30 days and old
    /// leftovers of interrupted writes; recent artifacts, the new one and foreign files stay.
    #[test]
    fn writing_an_artifact_prunes_stale_ones_only() {
        use std::time::{Duration, SystemTime};
        let dir = std::env::temp_dir().join(format!("codemode-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let now = SystemTime::now();
        let day = Duration::from_secs(24 * 3600);
        let file = |name: &str, idle: Duration| {
            let p = dir.join(name);
            std::fs::write(&p, b"x").unwrap();
            let t = now - idle;
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_times(std::fs::FileTimes::new().set_accessed(t).set_modified(t)).unwrap();
            p
        };
        let keep = file("quickjs-wasi-new-x86_64-linux-wasmtime0.1.0.cwasm", 60 * day);
        let stale = file("quickjs-wasi-old-x86_64-linux-wasmtime0.1.0.cwasm", 31 * day);
        let recent = file("quickjs-wasi-other-x86_64-linux-wasmtime0.1.0.cwasm", 29 * day);
        let old_tmp = file(".quickjs-wasi-old.cwasm.123.tmp", 2 * day);
        let new_tmp = file(".quickjs-wasi-new.cwasm.456.tmp", Duration::from_secs(60));
        let foreign = file("notes.cwasm", 400 * day);
        std::fs::create_dir(dir.join("quickjs-wasi-dir.cwasm")).unwrap();
        super::prune_stale(&dir, &keep, now);
        let left = |p: &std::path::Path| p.exists();
        assert!(left(&keep) && left(&recent) && left(&new_tmp) && left(&foreign));
        assert!(!left(&stale) && !left(&old_tmp));
        assert!(dir.join("quickjs-wasi-dir.cwasm").is_dir(), "directories are never touched");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_built_guest_exports_every_mutable_global() {
        let globals = super::mutable_globals(super::GUEST_WASM).unwrap();
        assert!(globals.contains(&"__stack_pointer".to_string()), "{globals:?}");
    }

    fn const_i32(expr: &wasmparser::ConstExpr<'_>) -> i64 {
        match expr.get_operators_reader().read().unwrap() {
            wasmparser::Operator::I32Const { value } => i64::from(value),
            other => panic!("not an i32 constant: {other:?}"),
        }
    }

    /// Snapshots leave out the stack under the stack pointer (it is dead between drive steps), which
    /// is only sound if nothing but the stack lives below the stack's top: the guest must be linked
    /// with `--stack-first`. Checks the built module's layout: every data segment lies above the
    /// stack pointer's initial value.
    #[test]
    fn the_stack_lies_below_all_data() {
        use wasmparser::{DataKind, ExternalKind, Parser, Payload};
        let (mut globals, mut sp_index, mut segments) = (Vec::new(), None, Vec::new());
        for payload in Parser::new(0).parse_all(super::GUEST_WASM) {
            match payload.unwrap() {
                // Export indexes count imported globals first: the guest imports none.
                Payload::ImportSection(r) => {
                    for i in r.into_imports() {
                        assert!(!matches!(i.unwrap().ty, wasmparser::TypeRef::Global(_)), "an imported global");
                    }
                }
                Payload::GlobalSection(r) => {
                    for g in r {
                        globals.push(g.unwrap().init_expr);
                    }
                }
                Payload::ExportSection(r) => {
                    for e in r {
                        let e = e.unwrap();
                        if e.kind == ExternalKind::Global && e.name == super::STACK_POINTER {
                            sp_index = Some(e.index as usize);
                        }
                    }
                }
                Payload::DataSection(r) => {
                    for d in r {
                        if let DataKind::Active { offset_expr, .. } = d.unwrap().kind {
                            segments.push(const_i32(&offset_expr));
                        }
                    }
                }
                _ => {}
            }
        }
        let stack_top = const_i32(&globals[sp_index.expect("the stack pointer is exported")]);
        assert!(stack_top >= 1 << 16, "a real stack: {stack_top}");
        assert!(!segments.is_empty(), "the module has data");
        for at in segments {
            assert!(at >= stack_top, "a data segment at {at} lies below the stack's top {stack_top}");
        }
    }
}
