//! Host-side tools: the [`Tool`] trait for tools implemented in Rust, [`LocalTools`] (a
//! [`ToolExecutor`] over a set of them), and [`ToolHook`]s that see every nested call on its way in and
//! out (SPEC P6, V13).

use codemode_core::catalog::ToolDefinition;
use codemode_core::executor::{NestedToolCall, ToolError, ToolErrorKind, ToolExecutor, ToolResult};
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A tool implemented in the host process.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// What the tool declares (name, schemas, source, owner, read-only).
    fn definition(&self) -> &ToolDefinition;

    /// Runs the tool.
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

#[async_trait::async_trait]
impl Tool for FnTool {
    fn definition(&self) -> &ToolDefinition {
        &self.def
    }

    async fn call(&self, input: Value, _call: &NestedToolCall) -> Result<ToolResult, ToolError> {
        (self.f)(input).await
    }
}

/// A set of host tools, addressable by catalog id; also their [`ToolExecutor`].
#[derive(Clone, Default)]
pub struct LocalTools {
    tools: Vec<Arc<dyn Tool>>,
    by_id: HashMap<String, usize>,
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
    async fn call(&self, call: NestedToolCall) -> Result<ToolResult, ToolError> {
        let Some(&i) = self.by_id.get(&call.tool_id) else {
            return Err(ToolError::new(ToolErrorKind::Unavailable, format!("no executor for `{}`", call.tool_id)));
        };
        let tool = self.tools[i].clone();
        tool.call(call.input.clone(), &call).await
    }
}

/// Sees every nested call before it runs and every result before it reaches the guest, like a
/// host's `before_tool_call` / `after_tool_call` plugin hooks (SPEC P6).
#[async_trait::async_trait]
pub trait ToolHook: Send + Sync {
    /// Runs before the tool: may rewrite `call.input`, or refuse the call with an error (which the
    /// guest sees as a failed nested call; the tool never runs).
    async fn before_tool_call(&self, call: &mut NestedToolCall) -> Result<(), ToolError> {
        let _ = call;
        Ok(())
    }

    /// Runs after the tool (or after a refusal): may inspect or replace the outcome.
    async fn after_tool_call(&self, call: &NestedToolCall, outcome: &mut Result<ToolResult, ToolError>) {
        let _ = (call, outcome);
    }
}

/// Runs one nested call through the hooks and the executor.
pub(crate) async fn run_hooked(
    hooks: &[Arc<dyn ToolHook>],
    executor: &dyn ToolExecutor,
    mut call: NestedToolCall,
) -> Result<ToolResult, ToolError> {
    let mut refused = None;
    for h in hooks {
        if let Err(e) = h.before_tool_call(&mut call).await {
            refused = Some(e);
            break;
        }
    }
    let mut outcome = match refused {
        Some(e) => Err(e),
        None => executor.call(call.clone()).await,
    };
    for h in hooks {
        h.after_tool_call(&call, &mut outcome).await;
    }
    outcome
}
