//! The checks of an episode's outcome: the final answer and the work directory's state, the same
//! for every arm.

use crate::setup::inside;
use crate::suite::Check;
use serde::Serialize;
use std::path::Path;

/// Longest a `command` check may run. Prevents: a task file's check hanging the evaluation.
pub const COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// One check's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct CheckOutcome {
    /// The check, in the task file's words.
    pub check: String,
    /// Whether it passed.
    pub passed: bool,
    /// Why not (empty when it passed).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub why: String,
}

fn describe(c: &Check) -> String {
    serde_json::to_string(c).unwrap_or_default()
}

/// Runs every check of a task against `answer` and `work`.
pub async fn verify(checks: &[Check], answer: &str, work: &Path) -> Vec<CheckOutcome> {
    let mut out = Vec::with_capacity(checks.len());
    for c in checks {
        let result = check(c, answer, work).await;
        out.push(CheckOutcome { check: describe(c), passed: result.is_ok(), why: result.err().unwrap_or_default() });
    }
    out
}

fn file(work: &Path, rel: &str) -> Result<String, String> {
    let path = inside(work, rel).map_err(|e| e.to_string())?;
    std::fs::read_to_string(&path).map_err(|e| format!("{rel}: {e}"))
}

fn shorten(s: &str) -> String {
    let mut t: String = s.chars().take(200).collect();
    if t.len() < s.len() {
        t.push('…');
    }
    t
}

async fn check(c: &Check, answer: &str, work: &Path) -> Result<(), String> {
    let answer_t = answer.trim();
    match c {
        Check::AnswerEquals(want) => {
            if answer_t == want.trim() {
                Ok(())
            } else {
                Err(format!("the answer `{}` is not `{want}`", shorten(answer_t)))
            }
        }
        Check::AnswerContains(want) => {
            if answer.contains(want.as_str()) {
                Ok(())
            } else {
                Err(format!("the answer `{}` does not contain `{want}`", shorten(answer_t)))
            }
        }
        Check::AnswerMatches(re) => {
            let re = regex::Regex::new(re).map_err(|e| e.to_string())?;
            if re.is_match(answer) { Ok(()) } else { Err(format!("the answer `{}` does not match", shorten(answer_t))) }
        }
        Check::FileContains { path, text } => {
            let content = file(work, path)?;
            if content.contains(text.as_str()) { Ok(()) } else { Err(format!("{path} does not contain `{text}`")) }
        }
        Check::FileExists(path) => file_exists(work, path),
        Check::FileAbsent(path) => match file_exists(work, path) {
            Ok(()) => Err(format!("{path} exists")),
            Err(_) => Ok(()),
        },
        Check::RowExists { db, sql } => {
            let path = inside(work, db).map_err(|e| e.to_string())?;
            let conn = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .map_err(|e| format!("{db}: {e}"))?;
            let mut stmt = conn.prepare(sql).map_err(|e| format!("{db}: {e}"))?;
            let mut rows = stmt.query([]).map_err(|e| format!("{db}: {e}"))?;
            match rows.next() {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err(format!("no row in {db} for `{sql}`")),
                Err(e) => Err(format!("{db}: {e}")),
            }
        }
        Check::Command(cmd) => {
            let child = tokio::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .current_dir(work)
                .env("ANSWER", answer)
                .env("WORK", work)
                .kill_on_drop(true)
                .output();
            match tokio::time::timeout(COMMAND_TIMEOUT, child).await {
                Err(_) => Err(format!("`{cmd}` ran longer than {COMMAND_TIMEOUT:?}")),
                Ok(Err(e)) => Err(format!("`{cmd}`: {e}")),
                Ok(Ok(out)) if out.status.success() => Ok(()),
                Ok(Ok(out)) => Err(format!(
                    "`{cmd}` exited with {}: {}",
                    out.status,
                    shorten(String::from_utf8_lossy(&out.stderr).trim())
                )),
            }
        }
    }
}

fn file_exists(work: &Path, rel: &str) -> Result<(), String> {
    let path = inside(work, rel).map_err(|e| e.to_string())?;
    if path.exists() { Ok(()) } else { Err(format!("{rel} does not exist")) }
}
