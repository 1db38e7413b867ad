//! Host-side tools: the [`Tool`] trait for tools implemented in Rust, [`LocalTools`] (a
//! [`ToolExecutor`] over a set of them), and [`ToolHook`]s that see every nested call on its way in and
//! out (contract P6, V13).

use codemode_core::catalog::ToolDefinition;
use codemode_core::executor::{CodeModeCallEvent, NestedToolCall, ToolError, ToolErrorKind, ToolExecutor, ToolResult};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A tool implemented in the host process.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// What the tool declares (name, schemas, source, owner, read-only).
    fn definition(&self) -> &ToolDefinition;

    /// Runs the tool on `input`. `call` says who calls and how (run, request, tool id, context,
    /// progress sink); the input has been moved out of it into `input` (so `call.input` is `null`:
    /// no copy of the input per call).
    async fn call(&self, input: Value, call: &NestedToolCall) -> Result<ToolResult, ToolError>;
}

type BoxedFuture = Pin<Box<dyn Future<Output = Result<ToolResult, ToolError>> + Send>>;

/// A [`Tool`] made from a definition and an async closure over the input.
pub struct FnTool {
    def: ToolDefinition,
    f: Box<dyn Fn(Value) -> BoxedFuture + Send + Sync>,
}

impl FnTool {
    /// Wraps `f` as the implementation of `def`.
    pub fn new<F, Fut>(def: ToolDefinition, f: F) -> Self
    where
        F: Fn(Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolResult, ToolError>> + Send + 'static,
    {
        FnTool { def, f: Box::new(move |v| Box::pin(f(v))) }
    }
}

impl std::fmt::Debug for FnTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTool").field("id", &self.def.id()).finish()
    }
}

impl Tool for FnTool {
    fn definition(&self) -> &ToolDefinition {
        &self.def
    }

    // Written out rather than through `async_trait`: the closure's future is boxed already, and
    // handing it back as it is spares every call a second box around it.
    fn call<'life0, 'life1, 'async_trait>(
        &'life0 self,
        input: Value,
        _call: &'life1 NestedToolCall,
    ) -> Pin<Box<dyn Future<Output = Result<ToolResult, ToolError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        (self.f)(input)
    }
}

/// A set of host tools, addressable by catalog id; also their [`ToolExecutor`].
#[derive(Clone, Default)]
pub struct LocalTools {
    tools: Vec<Arc<dyn Tool>>,
    /// Looked up on every nested call (see [`codemode_core::hash`]).
    by_id: codemode_core::hash::ToolMap<usize>,
}

impl std::fmt::Debug for LocalTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.iter().map(|t| t.definition().id())).finish()
    }
}

impl LocalTools {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool. A tool whose id is already taken replaces the earlier one.
    pub fn add(&mut self, tool: Arc<dyn Tool>) -> &mut Self {
        let id = tool.definition().id();
        match self.by_id.get(&id) {
            Some(&i) => self.tools[i] = tool,
            None => {
                self.by_id.insert(id, self.tools.len());
                self.tools.push(tool);
            }
        }
        self
    }

    /// Adds every tool of `other`.
    pub fn extend(&mut self, other: &LocalTools) -> &mut Self {
        for t in &other.tools {
            self.add(t.clone());
        }
        self
    }

    /// The definitions, in insertion order.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools.iter().map(|t| t.definition().clone()).collect()
    }

    /// Whether a tool with this id is in the set.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

#[async_trait::async_trait]
impl ToolExecutor for LocalTools {
    async fn call(&self, mut call: NestedToolCall) -> Result<ToolResult, ToolError> {
        let Some(&i) = self.by_id.get(&*call.tool_id) else {
            return Err(ToolError::new(ToolErrorKind::Unavailable, format!("no executor for `{}`", call.tool_id)));
        };
        let tool = self.tools[i].clone();
        let input = std::mem::take(&mut call.input);
        tool.call(input, &call).await
    }
}

/// Sees every nested call before it runs and every result before it reaches the guest, like a
/// host's `before_tool_call` / `after_tool_call` plugin hooks (contract P6).
#[async_trait::async_trait]
pub trait ToolHook: Send + Sync {
    /// Runs before an outer `exec` or `wait` call (contract X8: `toolKind: "code_mode_exec"`,
    /// `toolInputKind: "javascript" | "typescript"`). An error refuses the call: it fails with the
    /// error's message and no run starts or resumes.
    async fn before_code_mode_call(&self, event: &CodeModeCallEvent) -> Result<(), ToolError> {
        let _ = event;
        Ok(())
    }

    /// Runs before the tool: may rewrite `call.input`, or refuse the call with an error (which the
    /// guest sees as a failed nested call; the tool never runs).
    async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
        let _ = call;
        Ok(())
    }

    /// Runs after `before_tool_call` of every hook: `Some(reason)` makes the call wait for a human's
    /// approval (see [`codemode_core::approval`]), as if the approval policy named the tool.
    async fn requires_approval(&self, call: &NestedToolCall) -> Option<String> {
        let _ = call;
        None
    }

    /// Runs after the tool (or after a hook's refusal or an approver's denial): may inspect or
    /// replace the outcome. Not called for a call parked for approval (it has not run): when a parked
    /// call is approved later it runs the whole path again, and when it is denied through
    /// `CodeMode::decide` the guest gets the denial directly.
    async fn after_tool_call(&self, call: &NestedToolCall, outcome: &mut Result<ToolResult, ToolError>) {
        let _ = (call, outcome);
    }
}

/// The message of a denied call (the guest sees it prefixed by the tool id, coded
/// `nested_tool_failed`).
pub(crate) fn denial_message(reason: &str) -> String {
    format!("approval denied: {reason}")
}
