//! A suite on disk: `servers.json5` (how to start each MCP server a task may use) and
//! `tasks/*.json5` (one task per file: prompt, servers, setup, checks, and the oracle's recorded
//! trajectory per arm). The format is the book's "Measuring code mode" page; every field is
//! checked at load, and an error names the file and the field.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest task or servers file read (a suite is hand-written data; anything larger is a mistake).
pub const MAX_SUITE_FILE_BYTES: u64 = 1 << 20;

/// How a task's tools reach the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Arm {
    /// The upstream servers' tools as they are, through `codemode serve` with code mode disabled
    /// (the passthrough surface).
    #[serde(rename = "direct")]
    Direct,
    /// `exec` and `wait` in front of the same servers; the model calls `wait` itself.
    #[serde(rename = "codemode")]
    CodeMode,
    /// `exec` and `wait`, the client declaring the MCP tasks extension: a `waiting` run comes back
    /// as a task the host polls to its end, so waiting costs the model no turn.
    #[serde(rename = "codemode-tasks")]
    CodeModeTasks,
}

impl Arm {
    /// Every arm, in report order.
    pub const ALL: [Arm; 3] = [Arm::Direct, Arm::CodeMode, Arm::CodeModeTasks];

    /// The arm's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Arm::Direct => "direct",
            Arm::CodeMode => "codemode",
            Arm::CodeModeTasks => "codemode-tasks",
        }
    }

    /// Parses an arm's name.
    pub fn parse(name: &str) -> Option<Arm> {
        Arm::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// How to start one MCP server (stdio). `${WORK}` in any string is the episode's work directory,
/// `${SUITE}` the suite's directory.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerSpec {
    /// The program.
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Per-request time limit (ms) codemode gives the server (`timeoutMs` of `mcpServers`).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// What the server is, for the report.
    #[serde(default)]
    pub about: String,
}

/// What kind of work a task is (the report groups by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One or two calls answer it: direct calling should do fine.
    Lookup,
    /// Filter, join or aggregate over many records or several calls: where code mode should win.
    Aggregate,
    /// Writes state the checks read back.
    Change,
    /// A tool that takes long enough for the run to suspend.
    Slow,
}

/// One SQLite database a task starts with.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SqliteSetup {
    /// The database file, relative to the work directory.
    pub path: String,
    /// SQL run on it (statements separated by `;`).
    #[serde(default)]
    pub sql: String,
    /// A JavaScript function body returning more SQL as a string (run in codemode's sandbox; for
    /// many generated rows).
    #[serde(default)]
    pub generate: Option<String>,
}

/// One commit of a task's git repository.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CommitSetup {
    /// The commit message.
    pub message: String,
    /// `Name <email>`.
    #[serde(default = "default_author")]
    pub author: String,
    /// The commit date (any form git accepts; fixed so hashes are the same every run).
    #[serde(default = "default_date")]
    pub date: String,
    /// Files written (path → content) before the commit.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Files removed before the commit.
    #[serde(default)]
    pub remove: Vec<String>,
}

fn default_author() -> String {
    "Ada Lovelace <ada@example.com>".into()
}

fn default_date() -> String {
    "2026-01-01T12:00:00Z".into()
}

/// A git repository a task starts with.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitSetup {
    /// The repository's directory, relative to the work directory.
    #[serde(default = "default_repo")]
    pub path: String,
    /// Commits, oldest first.
    pub commits: Vec<CommitSetup>,
    /// Files written after the last commit and left uncommitted.
    #[serde(default)]
    pub uncommitted: BTreeMap<String, String>,
}

fn default_repo() -> String {
    "repo".into()
}

/// What a task's work directory holds before the episode starts (made fresh for every episode).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Setup {
    /// Files (path relative to the work directory → content).
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// A JavaScript function body returning more files as `{ path: content }` (run in codemode's
    /// sandbox, with no tools: deterministic data for aggregate tasks).
    #[serde(default)]
    pub generate: Option<String>,
    /// SQLite databases.
    #[serde(default)]
    pub sqlite: Vec<SqliteSetup>,
    /// A git repository.
    #[serde(default)]
    pub git: Option<GitSetup>,
}

/// One check of an episode's outcome. Paths are relative to the work directory.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum Check {
    /// The final answer, trimmed, equals this.
    AnswerEquals(String),
    /// The final answer contains this.
    AnswerContains(String),
    /// The final answer matches this regular expression.
    AnswerMatches(String),
    /// A file contains this text.
    FileContains {
        /// The file.
        path: String,
        /// The text.
        text: String,
    },
    /// A file exists.
    FileExists(String),
    /// A file does not exist.
    FileAbsent(String),
    /// A query on a SQLite database returns at least one row.
    RowExists {
        /// The database.
        db: String,
        /// The query.
        sql: String,
    },
    /// A shell command (`sh -c`, in the work directory, with `ANSWER` and `WORK` in its
    /// environment) exits with status 0.
    Command(String),
}

/// One tool call of a recorded direct trajectory (`${WORK}` is substituted in its strings).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedCall {
    /// The tool's name as the direct surface lists it.
    pub tool: String,
    /// Its input.
    #[serde(default)]
    pub args: Value,
}

/// One turn of a recorded direct trajectory: fixed calls, or calls computed from the results so
/// far (a JavaScript function `(results) => [{tool, args}]`, run in codemode's sandbox).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum RecordedTurn {
    /// Fixed calls.
    Calls(Vec<RecordedCall>),
    /// Calls computed from the results so far.
    Computed {
        /// The function's source.
        js: String,
    },
}

/// The oracle's trajectory in the direct arm.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DirectOracle {
    /// The turns that call tools.
    pub turns: Vec<RecordedTurn>,
    /// `(results) => answer`: the final answer from every tool result so far (each parsed as JSON
    /// when it is JSON, else its text), run in codemode's sandbox.
    pub answer: String,
}

/// The oracle's trajectory in the code-mode arms.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CellOracle {
    /// The cells, one `exec` each (a `waiting` result is followed by `wait` until it ends).
    pub cells: Vec<String>,
    /// `(results) => answer`, as for [`DirectOracle::answer`] (the results are the `exec`/`wait`
    /// results: `{status, value, …}`, the discovery cell's first).
    pub answer: String,
    /// Look the task's servers' tools up (`MCP.<server>.$api()`) in a first cell, as a model that
    /// has not seen them must (default true; false when the prompt gives the calls).
    #[serde(default = "yes")]
    pub discover: bool,
}

fn yes() -> bool {
    true
}

/// The oracle's recorded trajectories.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Oracle {
    /// The direct arm's.
    pub direct: DirectOracle,
    /// Both code-mode arms'.
    pub codemode: CellOracle,
}

/// One task.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Task {
    /// Unique id (the file's stem by convention).
    pub id: String,
    /// What kind of work it is.
    pub kind: Kind,
    /// The prompt given to the model (`${WORK}` substituted).
    pub prompt: String,
    /// The servers it needs (names in `servers.json5`).
    pub servers: Vec<String>,
    /// The work directory's starting state.
    #[serde(default)]
    pub setup: Setup,
    /// Overrides of `tools.codeMode` for the code-mode arms (e.g. a short `timeoutMs` so a slow
    /// tool suspends the run).
    #[serde(default)]
    pub code_mode: Option<Value>,
    /// Most model turns before the episode is stopped (default 20).
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// The checks; all must pass.
    pub verify: Vec<Check>,
    /// The recorded minimal trajectories.
    pub oracle: Oracle,
}

/// A loaded suite.
#[derive(Debug, Clone)]
pub struct Suite {
    /// Its directory.
    pub dir: PathBuf,
    /// Its servers.
    pub servers: BTreeMap<String, ServerSpec>,
    /// Its tasks, sorted by id.
    pub tasks: Vec<Task>,
}

/// Why a suite could not be loaded.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct SuiteError {
    /// The file (and field) at fault.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn err(path: &Path, message: impl Into<String>) -> SuiteError {
    SuiteError { path: path.display().to_string(), message: message.into() }
}

fn read(path: &Path) -> Result<String, SuiteError> {
    let meta = std::fs::metadata(path).map_err(|e| err(path, e.to_string()))?;
    if meta.len() > MAX_SUITE_FILE_BYTES {
        return Err(err(path, format!("larger than {MAX_SUITE_FILE_BYTES} bytes")));
    }
    std::fs::read_to_string(path).map_err(|e| err(path, e.to_string()))
}

/// A JSON5 file as `T` (syntax errors with their position, then field errors with their path).
fn parse<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, SuiteError> {
    let value: Value = json5::from_str(&read(path)?).map_err(|e| err(path, e.to_string()))?;
    serde_json::from_value(value).map_err(|e| err(path, e.to_string()))
}

impl Suite {
    /// Loads `dir/servers.json5` and every `dir/tasks/*.json5`, checking that ids are unique, that
    /// every server a task names exists, and that every regular expression compiles.
    pub fn load(dir: &Path) -> Result<Suite, SuiteError> {
        // Absolute: servers start in the episode's work directory, so `${SUITE}` must not be relative.
        let dir = &dir.canonicalize().map_err(|e| err(dir, e.to_string()))?;
        let servers_path = dir.join("servers.json5");
        let servers: BTreeMap<String, ServerSpec> = parse(&servers_path)?;
        let tasks_dir = dir.join("tasks");
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&tasks_dir)
            .map_err(|e| err(&tasks_dir, e.to_string()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json5"))
            .collect();
        paths.sort();
        let mut tasks: Vec<Task> = Vec::with_capacity(paths.len());
        for path in paths {
            let task: Task = parse(&path)?;
            if tasks.iter().any(|t| t.id == task.id) {
                return Err(err(&path, format!("task id `{}` is used twice", task.id)));
            }
            if task.id.is_empty() || !task.id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
                return Err(err(&path, "id: letters, digits, `-` and `_` only"));
            }
            for s in &task.servers {
                if !servers.contains_key(s) {
                    return Err(err(&path, format!("servers: no server `{s}` in servers.json5")));
                }
            }
            if task.verify.is_empty() {
                return Err(err(&path, "verify: a task needs at least one check"));
            }
            for c in &task.verify {
                if let Check::AnswerMatches(re) = c {
                    regex::Regex::new(re).map_err(|e| err(&path, format!("verify.answerMatches: {e}")))?;
                }
            }
            tasks.push(task);
        }
        tasks.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(Suite { dir: dir.to_path_buf(), servers, tasks })
    }

    /// Keeps only the tasks whose id is in `ids` (all when empty); an unknown id is an error.
    pub fn select(&mut self, ids: &[String]) -> Result<(), SuiteError> {
        if ids.is_empty() {
            return Ok(());
        }
        for id in ids {
            if !self.tasks.iter().any(|t| &t.id == id) {
                return Err(err(&self.dir, format!("no task `{id}`")));
            }
        }
        self.tasks.retain(|t| ids.contains(&t.id));
        Ok(())
    }
}

/// `${WORK}` and `${SUITE}` substituted in `s`.
pub fn substitute(s: &str, work: &Path, suite: &Path) -> String {
    s.replace("${WORK}", &work.display().to_string()).replace("${SUITE}", &suite.display().to_string())
}

/// [`substitute`] in every string of a JSON value.
pub fn substitute_value(v: &Value, work: &Path, suite: &Path) -> Value {
    match v {
        Value::String(s) => Value::String(substitute(s, work, suite)),
        Value::Array(a) => Value::Array(a.iter().map(|x| substitute_value(x, work, suite)).collect()),
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, x)| (k.clone(), substitute_value(x, work, suite))).collect())
        }
        other => other.clone(),
    }
}
