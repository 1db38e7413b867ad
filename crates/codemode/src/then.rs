//! `exec` and `wait` for hosts that are not async Rust (the Python and Node packages):
//! [`CodeMode::exec_then`] / [`CodeMode::wait_then`] start a call and return at once, and hand the
//! result to a callback on the thread that finished the run; [`CallHandle`] cancels it.

use crate::runtime::{self, Inner};
use crate::{CodeMode, no_runtime};
use codemode_core::error::{CodeModeError, CodeModeErrorCode};
use codemode_core::input::{CodeModeExecInput, CodeModeWaitInput};
use codemode_core::result::CodeModeResult;
use codemode_core::scope::RunContext;
use codemode_core::telemetry::CodeModeTelemetry;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// An `exec` / `wait` started with [`CodeMode::exec_then`] / [`CodeMode::wait_then`].
#[derive(Clone, Default)]
pub struct CallHandle {
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) task: Arc<std::sync::Mutex<Option<tokio::task::AbortHandle>>>,
}

impl CallHandle {
    /// Aborts the call's run (at its next step; at the latest at its deadline while the guest is
    /// busy), as dropping the future of [`CodeMode::exec`] does.
    pub fn cancel(&self) {
        self.cancel.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(task) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            task.abort();
        }
    }
}

impl std::fmt::Debug for CallHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallHandle").field("cancelled", &self.cancel.load(std::sync::atomic::Ordering::SeqCst)).finish()
    }
}

impl CodeMode {
    /// [`Self::exec`] for hosts that are not async Rust (the Python and Node packages): starts the
    /// cell and returns at once; `done` receives the result on the guest worker thread that ran it
    /// (or, with [`ToolHook`]s, on a runtime thread). This saves the two thread switches of
    /// awaiting a future on the runtime and handing its result over. [`CallHandle::cancel`] aborts
    /// the run as dropping [`Self::exec`]'s future does. With an auto-wait budget
    /// ([`crate::AutoWait`]) `done` receives the result the budget ends on. Call it inside a tokio
    /// runtime context (`Handle::enter`); without one, `done` gets an `internal_error` result.
    pub fn exec_then(
        &self,
        ctx: &RunContext,
        input: &CodeModeExecInput,
        done: impl FnOnce(CodeModeResult) + Send + 'static,
    ) -> CallHandle {
        // Hooks and auto-wait need the async path.
        if !self.inner.hooks.is_empty() || !self.auto_wait.is_off() {
            let (this, ctx, input) = (self.clone(), ctx.clone(), input.clone());
            return self.spawn_then(async move { this.exec(&ctx, &input).await }, done);
        }
        let (ctx2, input) = (ctx.clone(), input.clone());
        self.control_then(crate::surface::EXEC, ctx, None, done, move |inner, rt, handles| {
            inner.exec(rt, &ctx2, &input, handles)
        })
    }

    /// [`Self::wait`] like [`Self::exec_then`].
    pub fn wait_then(
        &self,
        ctx: &RunContext,
        input: &CodeModeWaitInput,
        done: impl FnOnce(CodeModeResult) + Send + 'static,
    ) -> CallHandle {
        // Hooks and auto-wait need the async path.
        if !self.inner.hooks.is_empty() || !self.auto_wait.is_off() {
            let (this, ctx, input) = (self.clone(), ctx.clone(), input.clone());
            return self.spawn_then(async move { this.wait(&ctx, &input).await }, done);
        }
        let (ctx2, input) = (ctx.clone(), input.clone());
        let run_id = Some(input.run_id.clone());
        self.control_then(crate::surface::WAIT, ctx, run_id, done, move |inner, rt, handles| {
            inner.wait(rt, &ctx2, &input, handles)
        })
    }

    /// Runs `fut` on the runtime and hands its result to `done`; cancelling aborts the task
    /// (dropping the future, which aborts its run).
    pub(crate) fn spawn_then(
        &self,
        fut: impl std::future::Future<Output = CodeModeResult> + Send + 'static,
        done: impl FnOnce(CodeModeResult) + Send + 'static,
    ) -> CallHandle {
        let handle = CallHandle::default();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let call = rt.spawn(fut);
                *handle.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(call.abort_handle());
                rt.spawn(async move {
                    let result = match call.await {
                        Ok(r) => r,
                        // Cancelled: dropping the call's future aborted its run.
                        Err(e) => {
                            let (code, msg) = if e.is_cancelled() {
                                (CodeModeErrorCode::Aborted, "the call was cancelled: its run is aborted".to_string())
                            } else {
                                (CodeModeErrorCode::InternalError, format!("code mode call failed: {e}"))
                            };
                            CodeModeResult::failed(
                                CodeModeError::new(code, msg),
                                Vec::new(),
                                CodeModeTelemetry::default(),
                            )
                        }
                    };
                    // `done` runs off the runtime's workers (a host callback may block, e.g. on a GIL).
                    let _ = tokio::task::spawn_blocking(move || done(result)).await;
                });
            }
            Err(e) => done(no_runtime(e)),
        }
        handle
    }

    /// [`Self::control_call`] with a callback instead of a future (see [`Self::exec_then`]).
    pub(crate) fn control_then(
        &self,
        tool: &'static str,
        ctx: &RunContext,
        run_id: Option<String>,
        done: impl FnOnce(CodeModeResult) + Send + 'static,
        f: impl FnOnce(&Inner, &tokio::runtime::Handle, runtime::CallHandles) -> CodeModeResult + Send + 'static,
    ) -> CallHandle {
        let handle = CallHandle::default();
        let rt = match tokio::runtime::Handle::try_current() {
            Ok(rt) => rt,
            Err(e) => {
                done(no_runtime(e));
                return handle;
            }
        };
        let start = self.control_begin(tool, ctx, run_id, None);
        let (this, ctx, cancel) = (self.clone(), ctx.clone(), handle.cancel.clone());
        // Kept where a failed spawn can still answer (the job, and `done` with it, would be lost).
        type Done = Box<dyn FnOnce(CodeModeResult) + Send>;
        let done: Arc<std::sync::Mutex<Option<Done>>> = Arc::new(std::sync::Mutex::new(Some(Box::new(done))));
        let answer = done.clone();
        let spawned = codemode_workers::spawn(move || {
            let span = start.span.clone();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _entered = span.enter();
                f(&this.inner, &rt, runtime::CallHandles { cancel, observer: None })
            }))
            .unwrap_or_else(|p| {
                let msg = codemode_workers::panic_message(p);
                CodeModeResult::failed(
                    CodeModeError::new(CodeModeErrorCode::InternalError, format!("code mode worker panicked: {msg}")),
                    Vec::new(),
                    CodeModeTelemetry::default(),
                )
            });
            this.control_finish(start, &ctx, tool, None, &result);
            if let Some(done) = answer.lock().unwrap_or_else(|p| p.into_inner()).take() {
                done(result);
            }
        });
        if let Err(e) = spawned
            && let Some(done) = done.lock().unwrap_or_else(|p| p.into_inner()).take()
        {
            done(CodeModeResult::failed(
                CodeModeError::new(
                    CodeModeErrorCode::InternalError,
                    format!("cannot start a guest worker thread: {e}"),
                ),
                Vec::new(),
                CodeModeTelemetry::default(),
            ));
        }
        handle
    }
}
