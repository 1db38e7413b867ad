//! # codemode-core
//!
//! The bottom layer of codemode: plain types and traits, no engine, no I/O, no async runtime.
//!
//! Everything the other crates agree on lives here:
//! - [`config`]: the `tools.codeMode` configuration (contract §3) with its clamps;
//! - [`input`] and [`result`]: the wire shapes of the model-visible `exec` / `wait` tools (contract §5);
//! - [`error`]: the error codes of contract §16;
//! - [`telemetry`]: the counters of contract §17;
//! - [`catalog`]: catalog entries and tool definitions (contract §7, §11);
//! - [`scope`]: run identity and scope checks (contract §6);
//! - [`engine`]: the [`GuestEngine`] / [`GuestInstance`]
//!   contract that every JavaScript engine implements (docs/src/engines.md);
//! - [`store`]: the [`SnapshotStore`] contract for suspended runs (docs/src/layout.md);
//! - [`executor`]: the [`ToolExecutor`] contract through which every nested
//!   tool call reaches the host (contract §12);
//! - [`approval`]: human approval of nested calls ([`Approver`], decisions);
//! - [`guest`]: names the guest API reserves (shared by the catalog and the bridge prelude);
//! - [`trajectory`]: transcript records of `exec` / `wait` calls and the nested calls they drove,
//!   with the redaction policy (contract §12 P9, §19 U9);
//! - [`positions`]: mapping error positions back to the cell's own lines and columns;
//! - [`namespace`]: the [`NamespaceRegistry`](namespace::NamespaceRegistry) contract (contract §10): which
//!   namespaces a catalog makes visible, their per-run guest data and how their calls resolve.
//!
//! Layering (docs/src/layout.md): every other codemode crate may depend on this one; this one depends on
//! nothing of codemode.
#![forbid(unsafe_code)]

pub mod approval;
pub mod catalog;
pub mod config;
pub mod engine;
pub mod error;
pub mod executor;
pub mod guest;
pub mod hash;
pub mod input;
pub mod namespace;
pub mod positions;
pub mod result;
pub mod scope;
pub mod store;
pub mod task;
pub mod telemetry;
pub mod text;
pub mod trajectory;

pub use approval::{ApprovalDecision, ApprovalRequest, Approver};
pub use catalog::{ToolCatalogEntry, ToolCatalogEntryWithSchema, ToolDefinition, ToolId, ToolSource};
pub use config::{CodeModeConfig, ConfigError, Language};
pub use engine::{
    BootSource, BridgeRequest, Delivery, DriveInput, DriveOutcome, DriveReport, EngineCapabilities, EngineError,
    GuestEngine, GuestError, GuestFailure, GuestInstance, GuestLimits, GuestProgram, RequestId, RequestKind, Snapshot,
    SnapshotBody,
};
pub use error::{CodeModeError, CodeModeErrorCode};
pub use executor::{NestedToolCall, ToolError, ToolExecutor, ToolResult};
pub use input::{CodeModeExecInput, CodeModeWaitInput, ExecRequest};
pub use result::{CodeModeOutput, CodeModePendingToolCall, CodeModeResult, PendingCallKind, WaitReason};
pub use scope::{RunContext, RunId, RunScope};
pub use store::{PendingRequest, RunPolicy, SnapshotStore, StoreError, SuspendedRun};
pub use task::{TaskQuestion, TaskRecord, TaskState};
pub use telemetry::CodeModeTelemetry;
