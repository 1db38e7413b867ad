//! The process-local namespace registry (contract §10 L1–L8), keyed by namespace id.

use crate::names::check_global_name;
use crate::scope::{NamespaceTool, Refusal, ScopeValue, serialize_scope};
use codemode_core::catalog::catalog_id;
use codemode_core::namespace::{
    CallableTools, GuestNamespace, NamespaceCall, NamespaceCallError, NamespaceContext, NamespaceError, NamespaceInfo,
    NamespaceOwner, NamespaceRegistry, RunNamespaces,
};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

/// Longest namespace id.
pub const MAX_ID_CHARS: usize = 128;
/// Longest description. Prevents: one registration bloating every `exec` description.
pub const MAX_DESCRIPTION_CHARS: usize = 1_000;
/// Longest prompt (same reason).
pub const MAX_PROMPT_CHARS: usize = 2_000;
/// Most required tools of one namespace.
pub const MAX_REQUIRED_TOOLS: usize = 256;

/// Creates a namespace's scope for one run (contract L4). An `Err` fails the run's `exec` with
/// `invalid_config` before guest code runs; so does a panic.
pub type ScopeFactory = Arc<dyn Fn(&NamespaceContext<'_>) -> Result<ScopeValue, Refusal> + Send + Sync>;

/// One namespace, as the plugin that owns its backing tools registers it.
#[derive(Clone)]
pub struct NamespaceRegistration {
    id: String,
    global_name: String,
    description: String,
    prompt: Option<String>,
    required_tools: Vec<String>,
    scope: ScopeFactory,
}

impl std::fmt::Debug for NamespaceRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceRegistration")
            .field("id", &self.id)
            .field("global_name", &self.global_name)
            .field("required_tools", &self.required_tools)
            .finish_non_exhaustive()
    }
}

impl NamespaceRegistration {
    /// A namespace `id` installed in the guest as `global_name`, described to the model by
    /// `description`. Its scope is empty until [`scope`](Self::scope) sets a factory.
    pub fn new(id: impl Into<String>, global_name: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            global_name: global_name.into(),
            description: description.into(),
            prompt: None,
            required_tools: Vec::new(),
            scope: Arc::new(|_| Ok(ScopeValue::Object(Vec::new()))),
        }
    }

    /// The usage prompt appended to the `exec` description when the namespace is visible.
    pub fn prompt(mut self, prompt: impl Into<String>) -> Self {
        self.prompt = Some(prompt.into());
        self
    }

    /// Requires the owner's tool `name` (`requiredToolNames`, contract §10): the namespace is visible only
    /// when every required tool is, and its members may call only required tools.
    pub fn require(mut self, name: impl Into<String>) -> Self {
        self.required_tools.push(name.into());
        self
    }

    /// Sets the scope factory, called once per run that sees the namespace.
    pub fn scope(
        mut self,
        factory: impl Fn(&NamespaceContext<'_>) -> Result<ScopeValue, Refusal> + Send + Sync + 'static,
    ) -> Self {
        self.scope = Arc::new(factory);
        self
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The global name.
    pub fn global_name(&self) -> &str {
        &self.global_name
    }

    fn check(&self) -> Result<(), RegisterError> {
        let bad = |message: String| RegisterError::Invalid { id: self.id.clone(), message };
        let id_ok = |c: char| c.is_ascii_alphanumeric() || "._:-".contains(c);
        if self.id.is_empty() || self.id.len() > MAX_ID_CHARS || !self.id.chars().all(id_ok) {
            return Err(bad(format!("the id must be 1 to {MAX_ID_CHARS} characters of letters, digits and `._:-`")));
        }
        check_global_name(&self.global_name).map_err(|e| bad(e.to_string()))?;
        if self.description.trim().is_empty() || self.description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(bad(format!("the description must be 1 to {MAX_DESCRIPTION_CHARS} characters")));
        }
        if self.prompt.as_ref().is_some_and(|p| p.chars().count() > MAX_PROMPT_CHARS) {
            return Err(bad(format!("the prompt is longer than {MAX_PROMPT_CHARS} characters")));
        }
        if self.required_tools.is_empty() {
            return Err(bad("a namespace needs at least one required tool: they decide when it is visible".into()));
        }
        if self.required_tools.len() > MAX_REQUIRED_TOOLS {
            return Err(bad(format!("more than {MAX_REQUIRED_TOOLS} required tools")));
        }
        if let Some(t) = self.required_tools.iter().find(|t| t.is_empty()) {
            return Err(bad(format!("required tool name `{t}` is empty")));
        }
        Ok(())
    }
}

/// Checks a registration's rules without registering it.
pub(crate) fn check_registration(reg: &NamespaceRegistration) -> Result<(), RegisterError> {
    reg.check()
}

/// Why a registration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The registration breaks a rule (contract S4, S5, limits).
    #[error("namespace `{id}`: {message}")]
    Invalid {
        /// The namespace id.
        id: String,
        /// What is wrong.
        message: String,
    },
    /// Another owner already registered this id.
    #[error("namespace `{id}` is already registered by {owner}")]
    IdTaken {
        /// The namespace id.
        id: String,
        /// Its owner.
        owner: NamespaceOwner,
    },
    /// Another namespace already uses this global name.
    #[error("global name `{global_name}` is already used by namespace `{id}`")]
    GlobalNameTaken {
        /// The global name.
        global_name: String,
        /// The namespace using it.
        id: String,
    },
}

struct Entry {
    owner: NamespaceOwner,
    reg: Arc<NamespaceRegistration>,
    /// Changes at every (re-)registration: a run checks it at each call.
    serial: u64,
    /// The required tools' catalog ids (`<source>:<owner>:<name>`), written once at registration:
    /// visibility is checked against them at every run's opening.
    required_ids: Vec<String>,
    /// The required tools' names, the set a scope's callable members are checked against.
    required: Arc<BTreeSet<String>>,
}

#[derive(Default)]
struct Inner {
    /// Shared, so a run's opening takes the visible entries with one reference count each (no
    /// copies of their owners and sets, which every run made before).
    entries: RwLock<BTreeMap<String, Arc<Entry>>>,
    next_serial: AtomicU64,
    /// The last run's opened namespaces, for the next run whose factories return equal scopes.
    last_opened: Mutex<Option<Arc<Opened>>>,
}

/// What opening a run's namespaces made: the serialized scopes and their call targets. Immutable,
/// so runs whose visible registrations and scopes are equal share one.
struct Opened {
    /// What it was made from: each visible registration's serial (which fixes its id, global
    /// name, owner and required tools) and the scope its factory returned, in order.
    made_from: Vec<(u64, ScopeValue)>,
    guest: Vec<GuestNamespace>,
    /// `guest`'s JSON texts, in order.
    texts: Vec<String>,
    entries: HashMap<String, RunEntry>,
}

impl Inner {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Entry>>> {
        self.entries.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Entry>>> {
        self.entries.write().unwrap_or_else(|p| p.into_inner())
    }

    fn forget_opened(&self) {
        *self.last_opened.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The namespace registry: register for a plugin (L1), clear a plugin's registrations (L8), see what
/// a catalog makes visible (L3) and open a run's scopes (L4, L5). Cloning shares the registry.
#[derive(Clone, Default)]
pub struct Namespaces {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Namespaces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespaces").field("ids", &self.inner.read().keys().collect::<Vec<_>>()).finish()
    }
}

impl Namespaces {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide registry, for plugin loaders that register at load time and runtimes that
    /// read it (`CodeMode::builder(..).namespaces(Arc::new(Namespaces::process().clone()))`).
    pub fn process() -> &'static Namespaces {
        static PROCESS: OnceLock<Namespaces> = OnceLock::new();
        PROCESS.get_or_init(Namespaces::new)
    }

    /// Registers `reg` for plugin `plugin_id` (contract L1): its required tools must be tools of that
    /// plugin (`plugin:<plugin_id>:<name>`).
    pub fn register_for_plugin(&self, plugin_id: &str, reg: NamespaceRegistration) -> Result<(), RegisterError> {
        self.register(NamespaceOwner::plugin(plugin_id), reg)
    }

    /// Registers `reg` for `owner`. Re-registering an id the same owner holds replaces it (runs that
    /// saw the old one fail their next call through it as removed); an id or a global name another
    /// namespace holds is refused.
    pub fn register(&self, owner: NamespaceOwner, reg: NamespaceRegistration) -> Result<(), RegisterError> {
        reg.check()?;
        let mut entries = self.inner.write();
        if let Some(e) = entries.get(&reg.id)
            && e.owner != owner
        {
            return Err(RegisterError::IdTaken { id: reg.id.clone(), owner: e.owner.clone() });
        }
        if let Some((id, _)) = entries.iter().find(|(id, e)| **id != reg.id && e.reg.global_name == reg.global_name) {
            return Err(RegisterError::GlobalNameTaken { global_name: reg.global_name.clone(), id: id.clone() });
        }
        let serial = self.inner.next_serial.fetch_add(1, Ordering::SeqCst);
        tracing::debug!(id = %reg.id, owner = %owner, global = %reg.global_name, "namespace registered");
        let required_ids = reg.required_tools.iter().map(|name| catalog_id(owner.source, &owner.name, name)).collect();
        let required = Arc::new(reg.required_tools.iter().cloned().collect());
        entries.insert(reg.id.clone(), Arc::new(Entry { owner, reg: Arc::new(reg), serial, required_ids, required }));
        self.inner.forget_opened();
        Ok(())
    }

    /// Removes every namespace of plugin `plugin_id` (contract L8: rollback or uninstall). Returns how
    /// many were removed. Later runs do not see them; a run that already has them fails its next
    /// call through them as removed.
    pub fn clear_for_plugin(&self, plugin_id: &str) -> usize {
        self.clear_for_owner(&NamespaceOwner::plugin(plugin_id))
    }

    /// Removes every namespace of `owner`. Returns how many were removed.
    pub fn clear_for_owner(&self, owner: &NamespaceOwner) -> usize {
        let mut entries = self.inner.write();
        let before = entries.len();
        entries.retain(|_, e| &e.owner != owner);
        // (The next run would not match it anyway; this lets go of the removed scopes' mappers.)
        self.inner.forget_opened();
        before - entries.len()
    }

    /// Removes every registration, so cases sharing [`Namespaces::process`] do not leak into each
    /// other.
    #[cfg(any(test, feature = "test-util"))]
    pub fn clear_for_test(&self) {
        self.inner.write().clear();
        self.inner.forget_opened();
    }

    /// Every registered namespace, visible or not.
    pub fn list(&self) -> Vec<NamespaceInfo> {
        self.inner.read().values().map(|e| info(e)).collect()
    }
}

fn info(e: &Entry) -> NamespaceInfo {
    NamespaceInfo {
        id: e.reg.id.clone(),
        global_name: e.reg.global_name.clone(),
        description: e.reg.description.clone(),
        prompt: e.reg.prompt.clone(),
        owner: e.owner.clone(),
        required_tools: e.reg.required_tools.clone(),
    }
}

fn is_visible(e: &Entry, catalog: &dyn CallableTools) -> bool {
    e.required_ids.iter().all(|id| catalog.callable(id).is_some_and(|t| e.owner.owns(t)))
}

impl NamespaceRegistry for Namespaces {
    fn visible(&self, catalog: &dyn CallableTools) -> Vec<NamespaceInfo> {
        self.inner.read().values().filter(|e| is_visible(e, catalog)).map(|e| info(e)).collect()
    }

    fn open(
        &self,
        ctx: &NamespaceContext<'_>,
        catalog: &dyn CallableTools,
    ) -> Result<Arc<dyn RunNamespaces>, NamespaceError> {
        // Factories run outside the lock: a slow or re-entrant factory cannot block registration.
        let visible: Vec<Arc<Entry>> = self.inner.read().values().filter(|e| is_visible(e, catalog)).cloned().collect();
        // Every factory runs, for every run (contract L4); only their serialization may be reused.
        let mut made_from = Vec::with_capacity(visible.len());
        for e in &visible {
            let reg = &e.reg;
            let scope = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (reg.scope)(ctx))) {
                Ok(Ok(scope)) => scope,
                Ok(Err(err)) => return Err(fail(reg, format!("its scope factory failed: {err}"))),
                Err(_) => return Err(fail(reg, "its scope factory panicked".into())),
            };
            made_from.push((e.serial, scope));
        }
        let registry = Arc::downgrade(&self.inner);
        let last = self.inner.last_opened.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(last) = last
            && last.made_from == made_from
        {
            return Ok(Arc::new(RunTable { registry, opened: last }));
        }
        let mut opened = Opened {
            made_from: Vec::new(),
            guest: Vec::with_capacity(visible.len()),
            texts: Vec::with_capacity(visible.len()),
            entries: HashMap::new(),
        };
        for (e, (_, scope)) in visible.iter().zip(&made_from) {
            let (reg, owner, serial) = (&e.reg, &e.owner, e.serial);
            let s = serialize_scope(&reg.global_name, scope, owner, &e.required).map_err(|err| fail(reg, err))?;
            let guest = GuestNamespace {
                id: reg.id.clone(),
                global_name: reg.global_name.clone(),
                data: s.data,
                calls: s.calls,
            };
            opened.texts.push(guest_text(&guest, &s.data_json));
            opened.guest.push(guest);
            opened.entries.insert(
                reg.id.clone(),
                RunEntry { serial, global_name: reg.global_name.clone(), owner: owner.clone(), targets: s.targets },
            );
        }
        opened.made_from = made_from;
        let opened = Arc::new(opened);
        *self.inner.last_opened.lock().unwrap_or_else(|p| p.into_inner()) = Some(opened.clone());
        Ok(Arc::new(RunTable { registry, opened }))
    }
}

fn fail(reg: &NamespaceRegistration, message: String) -> NamespaceError {
    NamespaceError { namespace: reg.id.clone(), message }
}

struct RunEntry {
    serial: u64,
    global_name: String,
    owner: NamespaceOwner,
    targets: HashMap<String, NamespaceTool>,
}

/// One run's namespaces: the serialized scopes and their call targets.
struct RunTable {
    registry: Weak<Inner>,
    opened: Arc<Opened>,
}

/// The JSON text of `guest` (as serde writes a [`GuestNamespace`]: `id`, `globalName`, `data`,
/// `calls`), around its data's text `data_json` already written for the size check.
fn guest_text(guest: &GuestNamespace, data_json: &str) -> String {
    let parts = (
        serde_json::to_string(&guest.id),
        serde_json::to_string(&guest.global_name),
        serde_json::to_string(&guest.calls),
    );
    // Strings and a list of string pairs always serialize; were one not to, the whole namespace
    // is serialized the plain way rather than a broken text assembled.
    let (Ok(id), Ok(global_name), Ok(calls)) = parts else {
        return serde_json::to_string(guest).unwrap_or_else(|_| "null".to_string());
    };
    let mut out = String::with_capacity(48 + id.len() + global_name.len() + data_json.len() + calls.len());
    out.push_str("{\"id\":");
    out.push_str(&id);
    out.push_str(",\"globalName\":");
    out.push_str(&global_name);
    out.push_str(",\"data\":");
    out.push_str(data_json);
    out.push_str(",\"calls\":");
    out.push_str(&calls);
    out.push('}');
    out
}

impl RunNamespaces for RunTable {
    fn guest(&self) -> &[GuestNamespace] {
        &self.opened.guest
    }

    fn guest_texts(&self) -> std::borrow::Cow<'_, [String]> {
        std::borrow::Cow::Borrowed(&self.opened.texts)
    }

    fn resolve(&self, namespace: &str, path: &str, args: &[Value]) -> Result<NamespaceCall, NamespaceCallError> {
        // N4: only ids and paths this run was given resolve; anything else is forged.
        let Some(entry) = self.opened.entries.get(namespace) else {
            return Err(NamespaceCallError::UnknownNamespace(namespace.chars().take(100).collect()));
        };
        // L8: a registration cleared (or replaced) since the run opened it calls nothing any more.
        let current =
            self.registry.upgrade().is_some_and(|r| r.read().get(namespace).is_some_and(|e| e.serial == entry.serial));
        if !current {
            return Err(NamespaceCallError::Removed(entry.global_name.clone()));
        }
        let Some(target) = entry.targets.get(path) else {
            return Err(NamespaceCallError::UnknownPath {
                namespace: entry.global_name.clone(),
                path: path.chars().take(100).collect(),
            });
        };
        let input = target
            .input(args)
            .map_err(|e| NamespaceCallError::BadArguments(format!("{}.{path}: {e}", entry.global_name)))?;
        Ok(NamespaceCall {
            source: entry.owner.source,
            owner: entry.owner.name.clone(),
            tool: target.tool().to_string(),
            input,
        })
    }
}
