//! A tool whose calls the test answers, in the style of `tower-test`'s mock: [`mock`] gives the
//! tool and a [`Handle`]; each call the guest makes waits at [`Handle::next_call`] until the test
//! [responds](Call::respond) or [fails](Call::fail) it — or keeps holding it, for as long as the
//! test likes. Tests order events with these handles instead of tools that sleep.
//!
//! ```
//! # async fn demo() {
//! use codemode::{ToolDefinition, ToolSource};
//! let (tool, mut handle) = codemode_testing::mock::mock(ToolDefinition::new(ToolSource::Plugin, "t", "slow"));
//! let mut tools = codemode::LocalTools::new();
//! tools.add(tool);
//! // … start a cell that calls `plugin:t:slow`, then:
//! # drop(tools);
//! if let Some(call) = handle.next_call().await {
//!     call.respond(serde_json::json!({ "ok": true }));
//! }
//! # }
//! ```

use codemode::{FnTool, Tool, ToolDefinition, ToolError, ToolResult};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::{mpsc, oneshot};

/// One call of a mock tool, held until it is answered. Dropped unanswered, the call fails (as a
/// tool whose process died would).
#[derive(Debug)]
pub struct Call {
    /// The input the guest passed.
    pub input: Value,
    answer: oneshot::Sender<Result<ToolResult, ToolError>>,
}

impl Call {
    /// Answers the call with `details`.
    pub fn respond(self, details: Value) {
        let _ = self.answer.send(Ok(ToolResult::value(details)));
    }

    /// Fails the call with a tool error.
    pub fn fail(self, message: &str) {
        let _ = self.answer.send(Err(ToolError::failed(message)));
    }

    /// Waits until the caller gave the call up (the run was aborted or its caller went away: the
    /// tool's future was dropped unanswered).
    pub async fn cancelled(&mut self) {
        self.answer.closed().await;
    }

    /// Whether the caller gave the call up already.
    pub fn is_cancelled(&self) -> bool {
        self.answer.is_closed()
    }
}

/// The test's side of a mock tool.
#[derive(Debug)]
pub struct Handle {
    calls: mpsc::UnboundedReceiver<Call>,
    made: Arc<AtomicUsize>,
}

impl Handle {
    /// The next call the guest makes, once it makes it; `None` when the tool is gone (its runtime
    /// dropped).
    pub async fn next_call(&mut self) -> Option<Call> {
        self.calls.recv().await
    }

    /// A call already made and not yet taken, if any (never waits).
    pub fn try_next_call(&mut self) -> Option<Call> {
        self.calls.try_recv().ok()
    }

    /// How many calls the tool received so far.
    pub fn calls_made(&self) -> usize {
        self.made.load(Ordering::SeqCst)
    }
}

/// A tool with definition `def` whose calls wait for the test's answer through the returned
/// [`Handle`].
pub fn mock(def: ToolDefinition) -> (Arc<dyn Tool>, Handle) {
    let (tx, rx) = mpsc::unbounded_channel();
    let made = Arc::new(AtomicUsize::new(0));
    let counted = made.clone();
    let tool = FnTool::new(def, move |input| {
        let (answer, answered) = oneshot::channel();
        counted.fetch_add(1, Ordering::SeqCst);
        let sent = tx.send(Call { input, answer });
        async move {
            if sent.is_err() {
                return Err(ToolError::failed("the test's handle of this mock tool is gone"));
            }
            answered.await.unwrap_or_else(|_| Err(ToolError::failed("the test dropped this call unanswered")))
        }
    });
    (Arc::new(tool), Handle { calls: rx, made })
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode::{NestedToolCall, RunContext, RunId, ToolSource};
    use serde_json::json;

    fn call_of(tool: &Arc<dyn Tool>, input: Value) -> tokio::task::JoinHandle<Result<ToolResult, ToolError>> {
        let tool = tool.clone();
        tokio::spawn(async move {
            let def = Arc::new(tool.definition().clone());
            let call = NestedToolCall {
                run_id: RunId::from_generated("cm_mock".to_string()),
                request_id: 1,
                tool_id: def.id().into(),
                tool: def,
                input: Value::Null,
                context: Arc::new(RunContext::session("mock")),
                progress: None,
                task_note: None,
                resume: None,
                answer: None,
            };
            tool.call(input, &call).await
        })
    }

    #[tokio::test]
    async fn each_call_waits_for_the_tests_answer() {
        let (tool, mut handle) = mock(ToolDefinition::new(ToolSource::Plugin, "t", "m"));
        let first = call_of(&tool, json!({ "n": 1 }));
        let second = call_of(&tool, json!({ "n": 2 }));
        let (a, b) = (handle.next_call().await, handle.next_call().await);
        let (Some(a), Some(b)) = (a, b) else { panic!("two calls were made") };
        assert_eq!(handle.calls_made(), 2);
        assert!(!first.is_finished() && !second.is_finished(), "held until answered");
        let (one, two) = if a.input["n"] == 1 { (a, b) } else { (b, a) };
        two.fail("no");
        one.respond(json!("yes"));
        assert_eq!(first.await.ok().and_then(Result::ok).map(|r| r.details), Some(json!("yes")));
        assert_eq!(second.await.ok().and_then(Result::err).map(|e| e.message), Some("no".to_string()));
        let dropped = call_of(&tool, json!({}));
        drop(handle.next_call().await);
        assert!(dropped.await.ok().is_some_and(|r| r.is_err()), "a dropped call fails");
        assert!(handle.try_next_call().is_none());
        // The caller giving up is seen by the test.
        let abandoned = call_of(&tool, json!({}));
        let Some(mut call) = handle.next_call().await else { panic!("a call was made") };
        assert!(!call.is_cancelled());
        abandoned.abort();
        call.cancelled().await;
        assert!(call.is_cancelled());
    }
}
