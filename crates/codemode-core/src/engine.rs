//! The engine contract (docs/src/engines.md): how the runtime drives a JavaScript engine.
//!
//! A [`GuestEngine`] prepares a [`GuestInstance`] for one program. The runtime then calls
//! [`GuestInstance::drive`] repeatedly: each call delivers settled bridge requests, runs the guest until
//! it is quiescent (no runnable jobs), and reports the state of the cell plus the new bridge requests and
//! output items. A quiescent instance can be turned into a [`Snapshot`] and later restored — by the same
//! process ([`SnapshotBody::Live`]: the VM stays in memory) or by any process with the same engine build
//! ([`SnapshotBody::Serialized`]). The runtime treats both alike; only stores tell them apart.
//!
//! Engines never see tools, policy or MCP: a bridge request is a typed
//! [`GuestRequest`](crate::guest::GuestRequest) the runtime answers.
//!
//! # What an engine must do
//!
//! - **`prepare`**: load or compile what it needs, once; never charged to a run's time limit.
//! - **`start(program, limits)`**: a fresh VM per run (runs never share a VM, contract Q2), with no
//!   capabilities beyond the bridge: no modules, files, network, timers or host objects. Evaluate
//!   the bridge prelude (`codemode_bridge::PRELUDE`, a classic script whose completion value is
//!   `install(host, plainJson?, defineNamespaces?, settlesNatively?, ownFirst?, react?, callPlain?)`), call `install`
//!   with the one host primitive `host(kind, payloadJson, more?, last?)` — whose every call goes to
//!   `codemode_bridge::BridgeHost::host_call`, with `more` and `last` (when given) appended to the
//!   payload —
//!   and call the handle's `boot(head, index, texts)` with `program.boot` split at its first two
//!   newlines (`codemode_bridge::split_boot`); the head may go as the number
//!   `codemode_bridge::head_max_depth` reads from it, which spares a `JSON.parse` per run. No cell
//!   code runs before the first `drive`.
//!   `plainJson(value, depth, maxDepth)` is optional: a native serializer of plain data that must
//!   return `JSON.stringify(value)` byte for byte, or `undefined` for anything it does not handle,
//!   and must run no guest code (the prelude's contract for it is in its layer 0; both QuickJS
//!   engines provide one, the quickjs-wasi shim in C and the native engine in Rust over QuickJS's
//!   C API; the conformance cases `plain_json_*` check the bytes and the prototype-chain rules).
//!   `settlesNatively` (true when `host` answers every request with its promise), `ownFirst`
//!   (a native proxy `get` trap for own data properties), `react` (a promise's `then` without
//!   the derived promise, for the cell's result) and `callPlain` (`plainJson` and `host` in one
//!   call, for a tool call's message) are optional too; layer 0 of the prelude states their
//!   contracts. An engine that gives `react` may skip `poll()` while the promise it reacted to is
//!   pending (the prelude's state changes only in those reactions once the cell has started).
//! - **`drive(input)`**, in this order (`codemode_bridge::drive` implements it over the few VM
//!   primitives of `codemode_bridge::GuestVm`): on the first step compile the cell wrapped by
//!   `codemode_bridge::wrap_code` and pass the function to the handle's `run`; deliver each
//!   [`Delivery`] through the handle's `settle(id, ok, json)` (the bridge encodes it once and never
//!   twice; an engine whose `host` answered the request with a promise settles that promise itself:
//!   resolved with the JSON parsed exactly as `JSON.parse` would, or rejected with the handle's
//!   `hostError(failure)`); run jobs until none is left; read the handle's `poll()`. Report
//!   [`DriveOutcome::Pending`] while the cell waits, `Completed`/`Failed` when it ended, with the requests and output of this
//!   step in order. Guest code still running at `input.deadline` ends the step as a `timeout`
//!   failure, and so does `input.cancel` being set (the run is being aborted; the runtime reports
//!   `aborted`); a guest that exceeds its limits fails with the matching code, and the host process
//!   is never harmed (no panic, no abort, no unbounded memory).
//! - **`snapshot()`**: only after a step that ended `Pending` (quiescent: no guest frame on the
//!   stack). Either self-contained bytes that `restore` accepts in another process with the same
//!   engine build (refusing anything else with [`EngineError::Restore`]), or the live VM.
//! - **`capabilities()`**: claim only the limits the engine enforces; the conformance suite holds
//!   it to every claim and skips cases for limits it does not claim.
//!
//! Then register it (`codemode::Engines::register`) and run `codemode_conformance::conformance_suite!`
//! on it.
//!
//! # A skeleton
//!
//! The smallest engine that satisfies the types: it "runs" every cell to `null` without a VM (a
//! real engine puts a JavaScript VM where this one has nothing).
//!
//! ```
//! use codemode_core::engine::*;
//! use serde_json::Value;
//!
//! struct Toy;
//! struct ToyInstance;
//!
//! impl GuestEngine for Toy {
//!     fn name(&self) -> &str { "toy" }
//!     fn serializes_snapshots(&self) -> bool { false }
//!     fn start(&self, _program: &GuestProgram, _limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
//!         Ok(Box::new(ToyInstance))
//!     }
//!     fn restore(&self, snapshot: Snapshot, _limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError> {
//!         snapshot.into_live_instance("toy")
//!     }
//! }
//!
//! impl GuestInstance for ToyInstance {
//!     fn drive(&mut self, _input: DriveInput) -> Result<DriveReport, EngineError> {
//!         Ok(DriveReport { outcome: DriveOutcome::Completed(Value::Null), requests: vec![], output: vec![] })
//!     }
//!     fn snapshot(self: Box<Self>) -> Result<Snapshot, EngineError> {
//!         Ok(Snapshot { engine: "toy".into(), body: SnapshotBody::Live { size_bytes: 0, instance: self } })
//!     }
//! }
//!
//! let program = GuestProgram { code: "return 1".into(), boot: "{}".into() };
//! let mut vm = Toy.start(&program, &GuestLimits::default()).unwrap();
//! let input = DriveInput::new(vec![], std::time::Instant::now(), 1024);
//! assert_eq!(vm.drive(input).unwrap().outcome, DriveOutcome::Completed(Value::Null));
//! assert_eq!(Toy.capabilities(), EngineCapabilities::NONE, "claims nothing it does not enforce");
//! ```

use crate::error::CodeModeErrorCode;
use crate::result::CodeModeOutput;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::time::Instant;

/// Opaque id of one bridge request, unique within a run (ids are never reused).
pub type RequestId = u64;

/// What the guest asks the host for. The payload shape depends on the kind (see `codemode-bridge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RequestKind {
    /// `tools.search(query, {limit})` → `{query, limit?}`.
    Search,
    /// `tools.describe(id)` → `{id}`.
    Describe,
    /// A catalog tool call → `{id, input, mode: "raw" | "value"}`.
    Call,
    /// `yield_control(reason?)` → `{reason?}`.
    Yield,
    /// An MCP tool call `MCP.<server>.<tool>(input)` → `{server, tool, input}` (also
    /// `resources.read` / `prompts.get`, under their reserved catalog names).
    Mcp,
    /// `MCP.<server>.$api(tool?, {schema?})` → `{server, tool?, schema}`, answered from the catalog.
    McpApi,
    /// A namespace member call `Shipping.unpaidOver(10)` → `{namespace, path, args, line?}`; the host
    /// maps it to a catalog tool call (contract §10 L6).
    Namespace,
}

impl RequestKind {
    /// The wire spelling used between the prelude and the host.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Search => "search",
            RequestKind::Describe => "describe",
            RequestKind::Call => "call",
            RequestKind::Yield => "yield",
            RequestKind::Mcp => "mcp",
            RequestKind::McpApi => "mcp_api",
            RequestKind::Namespace => "namespace",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "search" => Some(RequestKind::Search),
            "describe" => Some(RequestKind::Describe),
            "call" => Some(RequestKind::Call),
            "yield" => Some(RequestKind::Yield),
            "mcp" => Some(RequestKind::Mcp),
            "mcp_api" => Some(RequestKind::McpApi),
            "namespace" => Some(RequestKind::Namespace),
            _ => None,
        }
    }

    /// Whether requests of this kind run a tool and so count against `maxPendingToolCalls`.
    pub fn is_tool_call(self) -> bool {
        matches!(self, RequestKind::Call | RequestKind::Mcp)
    }
}

/// One request from the guest, queued by the host primitive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BridgeRequest {
    /// Request id.
    pub id: RequestId,
    /// The request, parsed from a payload already checked and sanitised by the bridge adapter.
    pub request: crate::guest::GuestRequest,
}

impl BridgeRequest {
    /// The request's kind.
    pub fn kind(&self) -> RequestKind {
        self.request.kind()
    }
}

/// An error handed to the guest as plain data; the prelude throws it as a plain `Error` (contract B7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestError {
    /// `Error.name` in the guest, e.g. `"ToolError"`.
    pub name: String,
    /// `Error.message`.
    pub message: String,
    /// `Error.code`, e.g. `nested_tool_failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<CodeModeErrorCode>,
}

impl GuestError {
    /// A guest error with a code.
    pub fn new(name: &str, message: impl Into<String>, code: Option<CodeModeErrorCode>) -> Self {
        Self { name: name.to_string(), message: message.into(), code }
    }
}

/// The settled outcome of one request, to be delivered into the guest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// The request it settles.
    pub id: RequestId,
    /// Resolve with a value, or reject with an error.
    pub outcome: Result<Value, GuestError>,
}

/// A program ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct GuestProgram {
    /// JavaScript source (TypeScript already transformed), the body of an async function.
    pub code: String,
    /// Per-run data for the prelude's `boot` (limits, the run's namespaces) as text: a JSON head,
    /// then, after a newline, the namespaces' JSON texts (see `codemode_bridge::BootText`). Shared,
    /// because it is the same for every run over one catalog without namespaces.
    pub boot: std::sync::Arc<str>,
}

/// Limits that bound what the guest and the bridge may consume. Each exists to stop a specific abuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestLimits {
    /// Guest heap limit (`memoryLimitBytes`): stops memory bombs from exhausting the host.
    pub memory_limit_bytes: u64,
    /// Guest stack budget: deep recursion becomes a catchable `RangeError` instead of a crash.
    pub max_stack_bytes: u64,
    /// Largest JSON message from guest to host (one request payload or output item): stops one call
    /// from copying an arbitrarily large string into host memory.
    pub max_message_bytes: u64,
    /// Largest JSON value delivered from host to guest (one tool result): stops a tool from blowing
    /// the guest heap in one step.
    pub max_delivery_bytes: u64,
    /// Deepest JSON nesting accepted in either direction: stops stack exhaustion in parsers and
    /// serializers on both sides.
    pub max_json_depth: u32,
    /// Most requests of any kind that may be outstanding at once: stops a loop of un-awaited calls
    /// from growing the host's request queue without bound. Tool calls are further bounded by
    /// `maxPendingToolCalls` in the runtime.
    pub max_outstanding_requests: u32,
}

impl Default for GuestLimits {
    fn default() -> Self {
        Self {
            memory_limit_bytes: 64 << 20,
            max_stack_bytes: 512 << 10,
            max_message_bytes: 4 << 20,
            max_delivery_bytes: 16 << 20,
            max_json_depth: 64,
            max_outstanding_requests: 1024,
        }
    }
}

/// Input of one [`GuestInstance::drive`] step.
#[derive(Debug, Clone)]
pub struct DriveInput {
    /// Settled requests to deliver before running jobs.
    pub deliveries: Vec<Delivery>,
    /// When the guest must stop running; still busy at this instant means `timeout`.
    pub deadline: Instant,
    /// Bytes of output this step may still produce before `output_limit_exceeded`.
    pub output_budget: u64,
    /// Set (to `true`) when the run is aborted while this step runs: an engine that can interrupt
    /// stops the guest at once, as if the deadline had passed (the runtime then reports `aborted`,
    /// not `timeout`). `None`: nothing can cancel this step.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// The run's catalog data the guest reads on demand (the bridge's `pull`, see [`BootSource`]).
    /// The same for every step of a run; `None` answers every pull with nothing (a catalog with no
    /// tools, as far as the guest can tell).
    pub boot_source: Option<std::sync::Arc<dyn BootSource>>,
    /// Who takes the step's requests the moment the guest makes them (see [`Answerer`]). An engine
    /// that can hand a settled outcome back through the host primitive passes each request to it;
    /// one that cannot ignores it, and every request comes back in [`DriveReport::requests`].
    /// `None`: every request comes back in the report.
    pub answerer: Option<std::sync::Arc<dyn Answerer>>,
}

impl DriveInput {
    /// A step that delivers `deliveries`, must stop by `deadline` and may produce `output_budget`
    /// bytes of output; nothing can cancel it, no catalog data is pulled and no request is
    /// answered inline (set `cancel`, `boot_source` and `answerer` for those).
    pub fn new(deliveries: Vec<Delivery>, deadline: Instant, output_budget: u64) -> Self {
        DriveInput { deliveries, deadline, output_budget, cancel: None, boot_source: None, answerer: None }
    }
}

/// Takes a request while the guest waits in the host primitive, so that one whose outcome is there
/// at once (a tool that returns without waiting, a search, a refusal) settles without the drive
/// step ending: the outcome goes back through the primitive, the engine settles the guest's
/// promise with it when the guest's job queue next runs dry (where the next step would have
/// delivered it, so the cell sees the same order of events), and the step goes on.
/// Without it, every request ends up in [`DriveReport::requests`], and a nested call costs a step's
/// end and a new step (the host's bookkeeping, a call into the guest, polling the cell).
///
/// The runtime implements it with the same handling a reported request gets, so inline answers
/// change when a request is handled, never how. The bridge passes a request only while the step
/// has produced no output and no request it kept for the report, so requests are handled in the
/// order they were made and output is observed in order with them; `yield` requests are never
/// passed (a yield ends the step).
pub trait Answerer: Send + Sync + fmt::Debug {
    /// Handles `request` (already issued under its id): what became of it. `notes` collects text
    /// the host adds to the output at this point (loop-detection warnings, contract §22).
    fn answer(&self, request: BridgeRequest, notes: &mut Vec<String>) -> Answer;
}

/// What an [`Answerer`] did with a request.
#[derive(Debug)]
pub enum Answer {
    /// The request settled at once: the primitive hands this outcome back to the guest.
    Settled(Delivery),
    /// The request was taken and is under way: its outcome comes in a later step's
    /// [`DriveInput::deliveries`].
    Started,
    /// Not taken: the request goes into the step's report, as without an answerer.
    Declined(BridgeRequest),
    /// Handling the request ended the run with this failure: the engine stops the guest, and the
    /// step reports it.
    Stop(GuestFailure),
}

/// Catalog data the guest reads on demand, by key, through the bridge's synchronous `pull` (DESIGN
/// §3): `ALL_TOOLS`, the convenience function of one tool name, the `API` files, an MCP server's
/// tool list. Held by the host per catalog, so a run pays only for what its cell touches and a
/// trivial cell costs the same over 6 tools or 1,000. Keys and values are defined by
/// `codemode-bridge` (its `BootText`); engines only pass them through.
pub trait BootSource: Send + Sync + std::fmt::Debug {
    /// The text under `key`, or `None` when there is none.
    fn pull(&self, key: &str) -> Option<std::sync::Arc<str>>;
}

/// A guest-level failure of the cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestFailure {
    /// The code, when the failure has one (`timeout`, `memory_limit_exceeded`, …); `None` for a plain
    /// uncaught exception.
    pub code: Option<CodeModeErrorCode>,
    /// The message (for exceptions, `Name: message` plus a short stack).
    pub message: String,
}

/// State of the cell after a drive step.
#[derive(Debug, Clone, PartialEq)]
pub enum DriveOutcome {
    /// The cell's promise is fulfilled with this JSON-safe value. Un-awaited requests may still be
    /// outstanding; the runtime finishes them before it reports `completed`.
    Completed(Value),
    /// The cell failed; the instance must not be driven again.
    Failed(GuestFailure),
    /// The cell waits on outstanding requests.
    Pending,
}

/// What a drive step produced.
#[derive(Debug, Clone, PartialEq)]
pub struct DriveReport {
    /// The cell's state.
    pub outcome: DriveOutcome,
    /// Requests issued during this step and not taken by the step's [`Answerer`], in issue order.
    pub requests: Vec<BridgeRequest>,
    /// Output items produced during this step, in guest call order.
    pub output: Vec<CodeModeOutput>,
}

/// An engine-level failure (not a guest exception). Engines render their own typed errors into these
/// contract-level kinds (the kind decides the error code, contract §16).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The engine cannot run here (missing module, failed load).
    #[error("runtime unavailable: {0}")]
    Unavailable(String),
    /// A snapshot could not be restored.
    #[error("snapshot restore failed: {0}")]
    Restore(String),
    /// The engine cannot snapshot this instance.
    #[error("snapshot failed: {0}")]
    Snapshot(String),
    /// Anything else (a trap, a broken invariant).
    #[error("engine failure: {0}")]
    Internal(String),
}

impl EngineError {
    /// The contract §16 code for this failure.
    pub fn code(&self) -> CodeModeErrorCode {
        match self {
            EngineError::Unavailable(_) => CodeModeErrorCode::RuntimeUnavailable,
            EngineError::Restore(_) => CodeModeErrorCode::SnapshotRestoreFailed,
            EngineError::Snapshot(_) | EngineError::Internal(_) => CodeModeErrorCode::InternalError,
        }
    }
}

/// What an engine guarantees, so hosts and the conformance suite know which limits hold. Each flag
/// is a promise about hostile code; an engine that cannot keep one must say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct EngineCapabilities {
    /// Snapshots are self-contained bytes another process (with the same engine build) can restore.
    pub serialized_snapshots: bool,
    /// `memoryLimitBytes` is enforced: a memory bomb ends as `memory_limit_exceeded`.
    pub memory_limit: bool,
    /// The deadline interrupts running guest code, also after an `await`: a busy loop ends as
    /// `timeout`.
    pub interrupt: bool,
    /// Deep recursion is a catchable `RangeError`, never a host stack overflow.
    pub stack_limit: bool,
}

impl EngineCapabilities {
    /// Every limit enforced, with or without serialized snapshots.
    pub const fn all_limits(serialized_snapshots: bool) -> Self {
        EngineCapabilities { serialized_snapshots, memory_limit: true, interrupt: true, stack_limit: true }
    }

    /// Nothing promised (the default for an engine that does not declare its capabilities).
    pub const NONE: EngineCapabilities =
        EngineCapabilities { serialized_snapshots: false, memory_limit: false, interrupt: false, stack_limit: false };

    /// Whether the named capability is promised (`serializedSnapshots`, `memoryLimit`,
    /// `interrupt`, `stackLimit`); `None` for an unknown name.
    pub fn has(&self, name: &str) -> Option<bool> {
        match name {
            "serializedSnapshots" => Some(self.serialized_snapshots),
            "memoryLimit" => Some(self.memory_limit),
            "interrupt" => Some(self.interrupt),
            "stackLimit" => Some(self.stack_limit),
            _ => None,
        }
    }
}

/// A JavaScript engine.
pub trait GuestEngine: Send + Sync + 'static {
    /// The engine's name (`"quickjs-wasi"`, `"quickjs"`, …).
    fn name(&self) -> &str;

    /// Whether snapshots of this engine are serialized bytes that can leave the process.
    fn serializes_snapshots(&self) -> bool;

    /// The limits this engine enforces on hostile code. The default promises none of them (beyond
    /// what [`serializes_snapshots`](Self::serializes_snapshots) says): an engine claims only what
    /// it keeps, and the conformance suite holds it to every claim.
    fn capabilities(&self) -> EngineCapabilities {
        EngineCapabilities { serialized_snapshots: self.serializes_snapshots(), ..EngineCapabilities::NONE }
    }

    /// Loads or compiles whatever the engine needs before its first run (a guest module, say).
    /// Idempotent and cheap once done. The runtime calls it before a run's clock starts, so engine
    /// preparation is never charged to a cell's `timeoutMs`; hosts may call it at start-up.
    fn prepare(&self) -> Result<(), EngineError> {
        Ok(())
    }

    /// Starts building, ahead of a first run, one instance for runs under `limits` (and whatever
    /// [`prepare`](Self::prepare) would load), in the background — on a thread the engine starts
    /// or its worker pool — and returns at once: for a process that knows its limits before it has
    /// a cell (a command starting up), so the build overlaps the rest of its start. The next
    /// [`start`](Self::start) with equal limits takes that instance (waiting for it if it is still
    /// being built) instead of building its own; a start with other limits leaves it alone. The
    /// instance is built exactly as `start` would build it and no guest code has run in it, so a
    /// run that takes it is as isolated as one that built its own. A failed build leaves the run
    /// to build (and fail) on its own. The default builds nothing: runs prepare as usual.
    fn prepare_instance(&self, limits: &GuestLimits) -> Result<(), EngineError> {
        let _ = limits;
        Ok(())
    }

    /// Prepares an instance for `program`. No guest code runs until the first
    /// [`GuestInstance::drive`].
    fn start(&self, program: &GuestProgram, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError>;

    /// Checks, without running anything, that [`restore`](Self::restore) would accept `snapshot`:
    /// that it was taken by this engine and build and is intact (for serialized snapshots, its
    /// digest). The runtime calls it when a `wait` takes a run out of the store, before any call of
    /// the run is approved, re-issued or delivered: a run that cannot resume must fail before it
    /// has side effects (a corrupt or cut-off run file, a snapshot of an older build after an
    /// upgrade). The default checks the engine name; an engine with a serialized format should
    /// check its integrity too.
    fn verify(&self, snapshot: &Snapshot) -> Result<(), EngineError> {
        if snapshot.engine == self.name() {
            Ok(())
        } else {
            Err(EngineError::Restore(format!(
                "snapshot was taken by engine `{}`, not `{}`",
                snapshot.engine,
                self.name()
            )))
        }
    }

    /// Restores an instance from a snapshot taken by this engine.
    ///
    /// A snapshot of another engine or engine build fails with [`EngineError::Restore`].
    fn restore(&self, snapshot: Snapshot, limits: &GuestLimits) -> Result<Box<dyn GuestInstance>, EngineError>;
}

/// One running program.
pub trait GuestInstance: Send {
    /// Delivers `input.deliveries`, then runs the guest until it is quiescent, fails, or the deadline
    /// passes (→ [`DriveOutcome::Failed`] with `timeout`).
    fn drive(&mut self, input: DriveInput) -> Result<DriveReport, EngineError>;

    /// Turns the quiescent instance into a snapshot.
    fn snapshot(self: Box<Self>) -> Result<Snapshot, EngineError>;
}

/// A suspended instance.
pub struct Snapshot {
    /// Name of the engine that took it.
    pub engine: String,
    /// The state.
    pub body: SnapshotBody,
}

/// The state of a suspended instance.
pub enum SnapshotBody {
    /// Self-contained bytes (a versioned engine format); may be stored anywhere.
    Serialized(Vec<u8>),
    /// A VM kept alive in this process; only an in-memory store can hold it.
    Live {
        /// Bytes the VM uses, by the engine's own accounting (checked against `maxSnapshotBytes`).
        size_bytes: u64,
        /// The instance itself.
        instance: Box<dyn GuestInstance>,
    },
}

impl Snapshot {
    /// Size counted against `maxSnapshotBytes`.
    pub fn size_bytes(&self) -> u64 {
        match &self.body {
            SnapshotBody::Serialized(b) => b.len() as u64,
            SnapshotBody::Live { size_bytes, .. } => *size_bytes,
        }
    }

    /// Whether the snapshot can leave the process.
    pub fn is_serialized(&self) -> bool {
        matches!(self.body, SnapshotBody::Serialized(_))
    }

    /// The whole of [`GuestEngine::restore`] for an engine that keeps live VMs only: the instance of
    /// a live snapshot taken by `engine`; [`EngineError::Restore`] for another engine's snapshot or
    /// for serialized bytes.
    pub fn into_live_instance(self, engine: &str) -> Result<Box<dyn GuestInstance>, EngineError> {
        if self.engine != engine {
            return Err(EngineError::Restore(format!(
                "snapshot was taken by engine `{}`, not `{engine}`",
                self.engine
            )));
        }
        match self.body {
            SnapshotBody::Live { instance, .. } => Ok(instance),
            SnapshotBody::Serialized(_) => Err(EngineError::Restore(format!(
                "engine `{engine}` keeps live VMs only and cannot restore serialized snapshots"
            ))),
        }
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.body {
            SnapshotBody::Serialized(_) => "serialized",
            SnapshotBody::Live { .. } => "live",
        };
        f.debug_struct("Snapshot")
            .field("engine", &self.engine)
            .field("kind", &kind)
            .field("size_bytes", &self.size_bytes())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_kinds_round_trip() {
        for k in [
            RequestKind::Search,
            RequestKind::Describe,
            RequestKind::Call,
            RequestKind::Yield,
            RequestKind::Mcp,
            RequestKind::McpApi,
        ] {
            assert_eq!(RequestKind::parse(k.as_str()), Some(k));
        }
        assert!(RequestKind::Call.is_tool_call() && !RequestKind::Search.is_tool_call());
        assert_eq!(RequestKind::parse("exec"), None);
    }

    #[test]
    fn live_only_restore_checks_engine_and_kind() {
        struct Nothing;
        impl GuestInstance for Nothing {
            fn drive(&mut self, _input: DriveInput) -> Result<DriveReport, EngineError> {
                Err(EngineError::Internal("not used".into()))
            }
            fn snapshot(self: Box<Self>) -> Result<Snapshot, EngineError> {
                Err(EngineError::Internal("not used".into()))
            }
        }
        let live = |engine: &str| Snapshot {
            engine: engine.into(),
            body: SnapshotBody::Live { size_bytes: 0, instance: Box::new(Nothing) },
        };
        assert!(live("a").into_live_instance("a").is_ok());
        let other = live("b").into_live_instance("a").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(other.contains("taken by engine `b`"), "{other}");
        let bytes = Snapshot { engine: "a".into(), body: SnapshotBody::Serialized(vec![1]) };
        assert!(matches!(bytes.into_live_instance("a"), Err(EngineError::Restore(_))));
    }

    #[test]
    fn engine_error_codes() {
        assert_eq!(EngineError::Unavailable("x".into()).code(), CodeModeErrorCode::RuntimeUnavailable);
        assert_eq!(EngineError::Restore("x".into()).code(), CodeModeErrorCode::SnapshotRestoreFailed);
    }
}
