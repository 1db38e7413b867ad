//! The engine registry: built-in engines by Cargo feature, and engines an application registers
//! by name (see [`Engines`]).

use crate::{CodeModeConfig, CodeModeError, CodeModeErrorCode, GuestEngine};
use std::sync::Arc;

/// The engine registry: engines are selected by name (`tools.codeMode.runtime`, `--engine`).
///
/// The built-in engines are those compiled into this build by Cargo feature (`engine-wasi` →
/// `quickjs-wasi`, `engine-quickjs` → `quickjs`). An application adds its own engine — for instance
/// one written outside this repository against the `codemode_core::engine` contract — with
/// [`Engines::register`]; from then on it is selected by name exactly like a built-in one. A name
/// that is neither compiled in nor registered gives `None`, and runs fail closed with
/// `runtime_unavailable`: there is never a silent switch to another engine.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use codemode::{CodeMode, CodeModeConfig, Engines, GuestEngine};
/// # fn my_engine() -> Arc<dyn GuestEngine> { unimplemented!() }
/// // At start-up, before building runtimes that name it:
/// Engines::register(my_engine()).expect("a new engine name");
/// let mut config = CodeModeConfig::enabled();
/// config.runtime = "my-engine".into(); // or `runtime: "my-engine"` in the config file
/// let cm = CodeMode::builder(config).build();
/// assert!(Engines::by_name("no-such-engine").is_none());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Engines;

/// Why [`Engines::register`] refused an engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// A built-in engine has this name (built-in engines cannot be replaced).
    #[error("engine name `{0}` belongs to a built-in engine")]
    BuiltIn(String),
    /// Another engine was registered under this name.
    #[error("an engine named `{0}` is already registered")]
    Taken(String),
    /// The name is empty or not made of letters, digits, `-`, `_` and `.`.
    #[error("`{0}` is not a valid engine name (letters, digits, `-`, `_`, `.`)")]
    BadName(String),
}

fn registered() -> &'static std::sync::RwLock<std::collections::BTreeMap<String, Arc<dyn GuestEngine>>> {
    static REGISTERED: std::sync::OnceLock<
        std::sync::RwLock<std::collections::BTreeMap<String, Arc<dyn GuestEngine>>>,
    > = std::sync::OnceLock::new();
    REGISTERED.get_or_init(Default::default)
}

impl Engines {
    /// Names of the engines that ship with codemode, compiled in or not.
    pub const KNOWN: [&'static str; 3] = ["quickjs-wasi", "quickjs", "boa"];

    /// The engine called `name`: a built-in one compiled into this build, else a registered one;
    /// `None` makes runs fail closed with `runtime_unavailable`.
    pub fn by_name(name: &str) -> Option<Arc<dyn GuestEngine>> {
        Self::built_in(name).or_else(|| registered().read().unwrap_or_else(|p| p.into_inner()).get(name).cloned())
    }

    fn built_in(name: &str) -> Option<Arc<dyn GuestEngine>> {
        match name {
            #[cfg(feature = "engine-wasi")]
            codemode_engine_wasi::ENGINE_NAME => Some(Arc::new(codemode_engine_wasi::QuickJsWasiEngine::new())),
            #[cfg(feature = "engine-quickjs")]
            codemode_engine_quickjs::ENGINE_NAME => Some(Arc::new(codemode_engine_quickjs::QuickJsEngine::new())),
            #[cfg(feature = "engine-boa")]
            codemode_engine_boa::ENGINE_NAME => Some(Arc::new(codemode_engine_boa::BoaEngine::new())),
            _ => None,
        }
    }

    /// Registers an engine under its [`GuestEngine::name`], for the whole process. Built-in names
    /// and names already registered are refused (an engine is never replaced behind a running
    /// runtime's back).
    pub fn register(engine: Arc<dyn GuestEngine>) -> Result<(), RegisterError> {
        let name = engine.name().to_string();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
            return Err(RegisterError::BadName(name));
        }
        if Self::KNOWN.contains(&name.as_str()) {
            return Err(RegisterError::BuiltIn(name));
        }
        let mut map = registered().write().unwrap_or_else(|p| p.into_inner());
        if map.contains_key(&name) {
            return Err(RegisterError::Taken(name));
        }
        map.insert(name, engine);
        Ok(())
    }

    /// Starts preparing the engine `config` names for a first run under `config`, ahead of that
    /// run, and returns at once: one instance built in the background for the limits `config`
    /// gives runs ([`GuestEngine::prepare_instance`]; `quickjs-wasi` loads its module first), which
    /// the first run with those limits takes (waiting for it if need be) instead of building its
    /// own. For a process that knows its config before it has a cell (a command starting up), so
    /// the work overlaps the rest of its start. A failure is only reported: the run meets it again
    /// and fails closed as `runtime_unavailable`, as it would have.
    pub fn prepare_ahead(config: &CodeModeConfig) -> Result<(), CodeModeError> {
        let Some(engine) = Self::by_name(&config.runtime) else {
            return Err(CodeModeError::new(
                CodeModeErrorCode::RuntimeUnavailable,
                format!("engine `{}` is not available in this build", config.runtime),
            ));
        };
        engine
            .prepare_instance(&crate::runtime::guest_limits(config))
            .map_err(|e| CodeModeError::new(e.code(), e.to_string()))
    }

    /// Names of the engines available in this process: the built-in ones compiled in, then the
    /// registered ones.
    pub fn compiled() -> Vec<String> {
        Self::all().into_iter().map(|(n, _)| n).collect()
    }

    /// Every available engine with its name (built-in ones first).
    pub fn all() -> Vec<(String, Arc<dyn GuestEngine>)> {
        let mut out: Vec<(String, Arc<dyn GuestEngine>)> =
            Self::KNOWN.iter().filter_map(|n| Self::built_in(n).map(|e| (n.to_string(), e))).collect();
        let map = registered().read().unwrap_or_else(|p| p.into_inner());
        out.extend(map.iter().map(|(n, e)| (n.clone(), e.clone())));
        out
    }
}
