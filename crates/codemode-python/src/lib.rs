//! # codemode-python
//!
//! The native half (`codemode._native`) of the `codemode` Python package: a code-mode runtime
//! ([`codemode_embed::Embedded`]) owned by Python, with Python callables as tools, a before-call
//! hook and an approver. The Python half (`python/codemode/`) gives it its API: `CodeMode`,
//! typed results, `@tool`, the sync wrapper and the PydanticAI toolset.
//!
//! Threads: the guest runs on codemode's guest worker threads and tools are awaited on a tokio
//! runtime owned by this module; neither ever holds the GIL while the guest runs. A synchronous
//! Python tool runs on the lane (module `lane`) or tokio's blocking pool (it may block as long as
//! it likes: the run's own limits bound the run, not the tool), an `async def` tool on the asyncio
//! event loop that called `exec` / `wait`. A quick run's answer is taken on the caller's thread
//! without a turn of the event loop (`Handoff`). Only JSON crosses (module `convert`): no Python
//! object ever reaches the guest.
//!
//! Layering (docs/src/layout.md): a language package on top of `codemode-embed`.
// Raw Python C-API calls only in `gil.rs` (a guest worker keeping its thread state), each with
// its SAFETY reasoning.
#![deny(unsafe_code)]

mod awake;
mod calls;
mod convert;
mod gil;
mod lane;

use calls::{Callback, LoopSlot, Mode};
use codemode_embed::{
    Caller, EmbedError, EmbedOptions, Embedded, HookVerdict, HostApprover, HostFailure, HostFunction, HostHook,
};
use convert::{Json, from_py, to_py};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::Value;
use std::sync::{Arc, Mutex};

pyo3::create_exception!(
    codemode._native,
    CodeModeError,
    PyException,
    "A host API call that could not be made: `.code` (`invalid_input`, `config_error`, …) and `.message`."
);

/// The Python exception for an [`EmbedError`]: `args` = (text, code, message); the package exposes
/// them as `.code` and `.message`. Built lazily, so no GIL is needed here.
fn py_error(e: EmbedError) -> PyErr {
    CodeModeError::new_err((format!("{}: {}", e.code, e.message), e.code.as_str(), e.message))
}

/// A Python function behind a tool: called with the input object's keys as keyword arguments
/// (the Python side adapts signatures; see `codemode/_tools.py`).
struct PyTool(Callback);

#[async_trait::async_trait]
impl HostFunction for PyTool {
    async fn call(&self, input: Value, info: Value) -> Result<Value, HostFailure> {
        self.0.call(vec![input, info]).await
    }
}

/// The before-call hook: `hook(call) -> None | dict | str | False` (see `codemode/__init__.py`).
struct PyHook(Callback);

#[async_trait::async_trait]
impl HostHook for PyHook {
    async fn before_call(&self, call: Value) -> Result<HookVerdict, HostFailure> {
        HookVerdict::from_json(self.0.call(vec![call]).await?)
    }
}

/// The approver: `approver(request) -> True | False | str (deny reason) | None (park)`.
struct PyApprover(Callback);

#[async_trait::async_trait]
impl HostApprover for PyApprover {
    async fn decide(&self, request: Value) -> Result<Option<codemode_embed::ApprovalDecision>, HostFailure> {
        codemode_embed::decision_from_json(self.0.call(vec![request]).await?)
    }
}

/// Bytes that become a Python `bytes` object when a future resolves.
struct Bytes(Vec<u8>);

impl<'py> IntoPyObject<'py> for Bytes {
    type Target = PyBytes;
    type Output = Bound<'py, PyBytes>;
    type Error = std::convert::Infallible;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        Ok(PyBytes::new(py, &self.0))
    }
}

/// The runtime the Python `CodeMode` wraps. Every method that runs something returns an awaitable.
#[pyclass(frozen, module = "codemode._native")]
struct Runtime {
    inner: Arc<Embedded>,
    loop_slot: LoopSlot,
}

impl Runtime {
    /// Remembers the running event loop (for `async def` tools) and runs `fut` on the runtime.
    fn spawn<'py, T>(
        &self,
        py: Python<'py>,
        fut: impl std::future::Future<Output = PyResult<T>> + Send + 'static,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        let of = calls::LoopOf::current(py)?;
        let event_loop = of.locals.event_loop(py);
        *self.loop_slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(of);
        gil::spawn(py, &event_loop, fut)
    }

    /// Starts an `exec` / `wait` whose result the guest worker hands straight to the event loop
    /// (no hop through the tokio runtime); cancelling the Python future aborts the run.
    ///
    /// The run starts first: the asyncio future is made while the guest runs. A quick run's
    /// answer is taken while looking (see [`Handoff`]) and the future returned already resolved,
    /// with no callback on it (nothing can cancel it any more). Only a run still going when the
    /// look ends gets the cancel callback; its answer goes through the loop.
    fn then<'py>(
        &self,
        py: Python<'py>,
        start: impl FnOnce(&Embedded, Box<dyn FnOnce(Value) + Send>) -> codemode_embed::CallHandle,
    ) -> PyResult<Bound<'py, PyAny>> {
        let of = calls::LoopOf::current(py)?;
        let event_loop = of.locals.event_loop(py);
        *self.loop_slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(of);
        let handoff = Arc::new(Handoff::default());
        let given = handoff.clone();
        let done: Box<dyn FnOnce(Value) + Send> = Box::new(move |v| given.give(v));
        let h = {
            let _entered = pyo3_async_runtimes::tokio::get_runtime().enter();
            start(&self.inner, done)
        };
        let py_fut = match event_loop.call_method0("create_future") {
            Ok(f) => f,
            Err(e) => {
                // Nobody could ever take the answer: the run stops.
                h.cancel();
                return Err(e);
            }
        };
        let target = Target { future: py_fut.clone().unbind(), event_loop: event_loop.unbind() };
        // (`Reacquiring`: the runtime's threads let this caller re-take the GIL before they enter
        // Python again, see the `gil` module.)
        let (looked, reacquiring) = py.detach(|| (handoff.look(target), gil::Reacquiring::begin()));
        drop(reacquiring);
        match looked {
            Some((v, _target)) => py_fut.call_method1("set_result", (Json(v),)).map(drop)?,
            // The answer is resolved through the loop, which runs only after this returns: the
            // callback is on the future before it can be done.
            None => {
                let on_cancel = h.clone();
                if let Err(e) = gil::on_cancel(py, &py_fut, move || on_cancel.cancel()) {
                    h.cancel();
                    return Err(e);
                }
            }
        }
        Ok(py_fut)
    }
}

/// A future of an event loop, where a run's answer is resolved once its caller stopped looking.
struct Target {
    future: Py<PyAny>,
    event_loop: Py<PyAny>,
}

/// Where a run's answer goes: to the caller still looking for it on the event loop's thread, or,
/// once the caller stopped looking, to the loop (`gil::resolve`: `call_soon_threadsafe`).
///
/// Resolving through the loop costs two turns of it and, when the loop's thread sleeps, its
/// wake-up — most of a trivial cell's cost from Python. So `exec` / `wait` first look for the
/// answer for a moment ([`codemode_embed::answer_spin`]: only while a core is idle, one caller at
/// a time, at most 250 µs), with the GIL released. That holds the event loop for that moment; it
/// stops early when a tool needs the loop (an `async def` tool or awaitable hook is scheduled:
/// `calls::loop_wanted`), so a cell calling one never waits out the look.
#[derive(Default)]
struct Handoff {
    /// Set once the answer is in `state`.
    ready: std::sync::atomic::AtomicBool,
    state: Mutex<Handing>,
}

#[derive(Default)]
enum Handing {
    /// The caller may still take the answer.
    #[default]
    Looking,
    /// The answer, for the caller's look.
    Given(Value),
    /// The caller stopped looking: the answer goes here.
    Deliver(Target),
    /// The answer went.
    Done,
}

impl Handoff {
    /// The run's answer: kept for the caller while it looks, else resolved on the loop.
    fn give(&self, v: Value) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *state, Handing::Done) {
            Handing::Looking => {
                *state = Handing::Given(v);
                self.ready.store(true, std::sync::atomic::Ordering::Release);
            }
            Handing::Deliver(Target { future, event_loop }) => {
                // Not under the lock (resolving takes the GIL).
                drop(state);
                gil::resolve(future, event_loop, Ok(Json(v)));
            }
            // A run answers once.
            other => *state = other,
        }
    }

    /// Looks for the answer while the permit lasts: the answer (and `target` back, to be dropped
    /// with the GIL), or `None` when it will be resolved on `target`.
    fn look(&self, target: Target) -> Option<(Value, Target)> {
        if let Some(mut spin) = codemode_embed::answer_spin() {
            let wanted = calls::loop_wanted();
            while !self.ready.load(std::sync::atomic::Ordering::Acquire)
                && spin.keep_going()
                && calls::loop_wanted() == wanted
            {
                std::hint::spin_loop();
            }
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *state, Handing::Done) {
            Handing::Given(v) => Some((v, target)),
            _ => {
                *state = Handing::Deliver(target);
                None
            }
        }
    }
}

/// An auto-wait budget from Python's `(max_wall_ms, max_resumes)`.
fn budget((max_wall_ms, max_resumes): (u64, u32)) -> codemode_embed::AutoWait {
    codemode_embed::AutoWait::new(std::time::Duration::from_millis(max_wall_ms), max_resumes)
}

#[pymethods]
impl Runtime {
    /// `exec`: runs a cell; the result's JSON as a dict. Cancelling the awaiting task aborts the run.
    /// `agent`, `provider`, `model`: the target the run is for (the runtime's default otherwise).
    #[pyo3(signature = (code, language=None, session="default".to_string(), agent=None, provider=None, model=None, auto_wait=None))]
    #[allow(clippy::too_many_arguments)]
    fn exec<'py>(
        &self,
        py: Python<'py>,
        code: String,
        language: Option<String>,
        session: String,
        agent: Option<String>,
        provider: Option<String>,
        model: Option<String>,
        auto_wait: Option<(u64, u32)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let caller = Caller { session, agent, provider, model, auto_wait: auto_wait.map(budget) };
        self.then(py, |inner, done| inner.exec_then(&code, language.as_deref(), &caller, done))
    }

    /// `wait`: resumes a waiting run; the result's JSON as a dict (the same target as its `exec`).
    #[pyo3(signature = (run_id, session="default".to_string(), agent=None, provider=None, model=None, auto_wait=None))]
    #[allow(clippy::too_many_arguments)]
    fn wait<'py>(
        &self,
        py: Python<'py>,
        run_id: String,
        session: String,
        agent: Option<String>,
        provider: Option<String>,
        model: Option<String>,
        auto_wait: Option<(u64, u32)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let caller = Caller { session, agent, provider, model, auto_wait: auto_wait.map(budget) };
        self.then(py, |inner, done| inner.wait_then(&run_id, &caller, done))
    }

    /// `exec` from a model's raw tool arguments (a dict); the result's JSON.
    #[pyo3(signature = (args, session="default".to_string(), agent=None, provider=None, model=None, auto_wait=None))]
    #[allow(clippy::too_many_arguments)]
    fn exec_json<'py>(
        &self,
        py: Python<'py>,
        args: Bound<'py, PyAny>,
        session: String,
        agent: Option<String>,
        provider: Option<String>,
        model: Option<String>,
        auto_wait: Option<(u64, u32)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = from_py(&args)?;
        let caller = Caller { session, agent, provider, model, auto_wait: auto_wait.map(budget) };
        self.then(py, |inner, done| inner.exec_json_then(&args, &caller, done))
    }

    /// `wait` from a model's raw tool arguments (a dict); the result's JSON.
    #[pyo3(signature = (args, session="default".to_string(), agent=None, provider=None, model=None, auto_wait=None))]
    #[allow(clippy::too_many_arguments)]
    fn wait_json<'py>(
        &self,
        py: Python<'py>,
        args: Bound<'py, PyAny>,
        session: String,
        agent: Option<String>,
        provider: Option<String>,
        model: Option<String>,
        auto_wait: Option<(u64, u32)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = from_py(&args)?;
        let caller = Caller { session, agent, provider, model, auto_wait: auto_wait.map(budget) };
        self.then(py, |inner, done| inner.wait_json_then(&args, &caller, done))
    }

    /// Records a decision on a parked call (`deny`: the reason of a denial).
    #[pyo3(signature = (run_id, request_id, deny=None))]
    fn approve<'py>(
        &self,
        py: Python<'py>,
        run_id: String,
        request_id: u64,
        deny: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        self.spawn(py, async move { inner.approve(&run_id, request_id, deny).await.map_err(py_error) })
    }

    /// Aborts a run; whether there was one.
    fn abort<'py>(&self, py: Python<'py>, run_id: String) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        self.spawn(py, async move { Ok(inner.abort(&run_id).await) })
    }

    /// Takes a waiting run out as bytes.
    #[pyo3(signature = (run_id, session="default".to_string(), agent=None, provider=None, model=None))]
    fn export_run<'py>(
        &self,
        py: Python<'py>,
        run_id: String,
        session: String,
        agent: Option<String>,
        provider: Option<String>,
        model: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        let caller = Caller { session, agent, provider, model, auto_wait: None };
        self.spawn(py, async move { inner.export_run(&run_id, &caller).await.map(Bytes).map_err(py_error) })
    }

    /// Puts exported bytes into this runtime's store; the run id.
    fn import_run<'py>(&self, py: Python<'py>, data: Vec<u8>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        self.spawn(py, async move { inner.import_run(data).await.map_err(py_error) })
    }

    /// Closes the upstream MCP servers' connections.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        self.spawn(py, async move {
            inner.close().await;
            Ok(())
        })
    }

    /// The model-visible `exec` and `wait` tools: `[{name, description, inputSchema}]`.
    fn model_tools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.model_tools())
    }

    /// The catalog ids the guest can call.
    fn tool_ids(&self) -> Vec<String> {
        self.inner.tool_ids()
    }

    /// The engine's name.
    #[getter]
    fn engine(&self) -> String {
        self.inner.engine().to_string()
    }
}

/// Builds a [`Runtime`]. `tools`: `(spec dict, callable, mode)` triples, mode `"sync"`, `"inline"`
/// or `"async"` (see [`calls`]); `config`: the configuration document (a dict) or `None`. Blocks
/// (without the GIL) while upstream MCP servers connect and the engine loads.
#[pyfunction]
#[pyo3(signature = (tools, config=None, hook=None, approver=None))]
fn start(
    py: Python<'_>,
    tools: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>, String)>,
    config: Option<Bound<'_, PyAny>>,
    hook: Option<Bound<'_, PyAny>>,
    approver: Option<Bound<'_, PyAny>>,
) -> PyResult<Runtime> {
    let loop_slot: LoopSlot = Arc::new(Mutex::new(None));
    let callback = |callable: Bound<'_, PyAny>, what: String, mode: Mode| -> PyResult<Callback> {
        if !callable.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!("{what} must be callable")));
        }
        Ok(Callback { callable: Arc::new(callable.unbind()), what: what.into(), loop_slot: loop_slot.clone(), mode })
    };
    let mut host_tools: Vec<(codemode_embed::ToolDefinition, Arc<dyn HostFunction>)> = Vec::new();
    for (spec, callable, mode) in tools {
        let def = codemode_embed::tool_definition(&from_py(&spec)?, "python").map_err(py_error)?;
        let mode = match mode.as_str() {
            "sync" => Mode::Sync,
            "inline" => Mode::Inline,
            "async" => Mode::Async,
            other => return Err(pyo3::exceptions::PyValueError::new_err(format!("unknown tool mode `{other}`"))),
        };
        let what = format!("tool `{}`", def.name);
        host_tools.push((def, Arc::new(PyTool(callback(callable, what, mode)?))));
    }
    let options = EmbedOptions {
        config: config.map(|c| from_py(&c)).transpose()?,
        tools: host_tools,
        hook: hook
            .map(|h| callback(h, "the before-call hook".into(), Mode::Sync))
            .transpose()?
            .map(|c| Arc::new(PyHook(c)) as _),
        approver: approver
            .map(|a| callback(a, "the approver".into(), Mode::Sync))
            .transpose()?
            .map(|c| Arc::new(PyApprover(c)) as _),
    };
    let rt = pyo3_async_runtimes::tokio::get_runtime();
    let embedded = py.detach(|| rt.block_on(Embedded::start(options))).map_err(py_error)?;
    Ok(Runtime { inner: Arc::new(embedded), loop_slot })
}

/// The native module.
#[pymodule(name = "_native", module = "codemode")]
mod native {
    use pyo3::prelude::*;

    #[pymodule_export]
    use super::{CodeModeError, Runtime, gil::shutdown, start};

    /// The document of a configuration file's text (JSON5), as a dict.
    #[pyfunction]
    fn parse_config<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
        let doc = codemode_embed::parse_config_text(text).map_err(super::py_error)?;
        super::to_py(py, &doc)
    }

    /// The package version (the crate's).
    #[pyfunction]
    fn version() -> &'static str {
        env!("CARGO_PKG_VERSION")
    }

    #[pymodule_init]
    fn init() {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(2).thread_name("codemode-tokio").enable_all();
        pyo3_async_runtimes::tokio::init(builder);
        // Logs go to stderr, filtered by CODEMODE_LOG (default: warnings).
        let filter = tracing_subscriber::EnvFilter::try_from_env("CODEMODE_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt().with_writer(std::io::stderr).with_env_filter(filter).try_init();
    }
}
