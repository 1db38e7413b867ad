//! # codemode-namespaces
//!
//! Plugin namespaces (contract §10): short domain APIs in the guest — `Shipping.unpaidOver(10)` — whose
//! every call is a catalog tool call, with the same hooks, approvals, abort handling, telemetry and
//! suspend/resume as `tools.call(...)`.
//!
//! - [`Namespaces`]: the process-local registry keyed by namespace id. A plugin registers its
//!   namespaces ([`Namespaces::register_for_plugin`]) and clears them on rollback or uninstall
//!   ([`Namespaces::clear_for_plugin`]). It implements the core
//!   [`NamespaceRegistry`](codemode_core::namespace::NamespaceRegistry) the runtime reads.
//! - [`NamespaceRegistration`]: id, global name, description, optional prompt, required tools, and a
//!   scope factory that receives the run's context and returns a [`ScopeValue`]: plain data and
//!   callable markers made by [`namespace_tool`] / [`namespace_tool_with`]. There is no way to put a
//!   host function into a scope.
//! - [`scope`]: serialization with the contract's rejections (contract S1, S2 and S3), each naming the path.
//! - [`names`]: the global-name rules (S4, S5).
//! - [`declarative`]: namespaces declared in the configuration file over one MCP server's or one
//!   plugin's tools.
//!
//! Visibility and ownership (L3): a namespace is visible in a run only when every required tool is
//! callable there **and** belongs to the namespace's owner (the catalog id `<source>:<owner>:<name>`
//! is what is looked up, so a same-named tool of another plugin never exposes it). Each callable
//! member may target only required tools.
//!
//! ```
//! use codemode_namespaces::{NamespaceRegistration, Namespaces, ScopeValue, namespace_tool, namespace_tool_with};
//! use serde_json::json;
//!
//! let registry = Namespaces::new();
//! registry
//!     .register_for_plugin(
//!         "github",
//!         NamespaceRegistration::new("github-issues", "Issues", "GitHub issue helpers for the current repository.")
//!             .require("github_list_issues")
//!             .require("github_update_issue")
//!             .prompt("Use Issues.list(params) and Issues.update(number, patch).")
//!             .scope(|ctx| {
//!                 Ok(ScopeValue::object([
//!                     ("runId", ScopeValue::from(json!(ctx.run_id))),
//!                     ("list", namespace_tool("github_list_issues").into()),
//!                     (
//!                         "update",
//!                         namespace_tool_with("github_update_issue", |args| {
//!                             Ok(json!({ "number": args.first(), "patch": args.get(1) }))
//!                         })
//!                         .into(),
//!                     ),
//!                 ]))
//!             }),
//!     )
//!     .unwrap();
//! assert_eq!(registry.list()[0].global_name, "Issues");
//! ```
//!
//! Layering (docs/src/layout.md): depends on `codemode-core` only; the `codemode` facade wires a registry
//! into the runtime. It never names an engine, MCP transport or policy.
#![forbid(unsafe_code)]

pub mod declarative;
pub mod names;
pub mod registry;
pub mod scope;

pub use registry::{NamespaceRegistration, Namespaces, RegisterError, ScopeFactory};
pub use scope::{InputMapper, NamespaceTool, Refusal, ScopeValue, namespace_tool, namespace_tool_with};
