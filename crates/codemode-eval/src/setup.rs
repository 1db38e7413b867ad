//! An episode's work directory, made fresh from the task's [`Setup`]: files (literal and
//! generated in the sandbox), SQLite databases, a git repository with fixed authors and dates (the
//! same hashes every run).

use crate::js::Sandbox;
use crate::suite::{GitSetup, Setup};
use std::path::{Component, Path, PathBuf};

/// Why a work directory could not be made.
#[derive(Debug, thiserror::Error)]
#[error("setup: {0}")]
pub struct SetupError(pub String);

/// `rel` under `work`, refusing absolute paths and `..` (a task file must not write elsewhere).
pub fn inside(work: &Path, rel: &str) -> Result<PathBuf, SetupError> {
    let p = Path::new(rel);
    if rel.is_empty() || p.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
        return Err(SetupError(format!("`{rel}`: paths are relative to the work directory, without `..`")));
    }
    Ok(work.join(p))
}

fn write(work: &Path, rel: &str, content: &str) -> Result<(), SetupError> {
    let path = inside(work, rel)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| SetupError(format!("{}: {e}", dir.display())))?;
    }
    std::fs::write(&path, content).map_err(|e| SetupError(format!("{}: {e}", path.display())))
}

/// Makes `work` (an empty directory) what `setup` says.
pub async fn materialize(setup: &Setup, work: &Path, sandbox: &Sandbox) -> Result<(), SetupError> {
    for (rel, content) in &setup.files {
        write(work, rel, content)?;
    }
    if let Some(generate) = &setup.generate {
        let files = sandbox
            .call(generate, &serde_json::Value::Null, true)
            .await
            .map_err(|e| SetupError(format!("generate: {e}")))?;
        let serde_json::Value::Object(files) = files else {
            return Err(SetupError("generate: must return an object { path: content }".into()));
        };
        for (rel, content) in files {
            let text = match content {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            write(work, &rel, &text)?;
        }
    }
    for db in &setup.sqlite {
        let path = inside(work, &db.path)?;
        let mut sql = db.sql.clone();
        if let Some(generate) = &db.generate {
            match sandbox.call(generate, &serde_json::Value::Null, true).await {
                Ok(serde_json::Value::String(more)) => {
                    sql.push_str(";\n");
                    sql.push_str(&more);
                }
                Ok(_) => return Err(SetupError(format!("sqlite {}: generate must return a string", db.path))),
                Err(e) => return Err(SetupError(format!("sqlite {}: generate: {e}", db.path))),
            }
        }
        let conn =
            rusqlite::Connection::open(&path).map_err(|e| SetupError(format!("sqlite {}: {e}", path.display())))?;
        // A fixture is written once and thrown away with its episode: no sync to disk after each
        // of its statements (a thousand rows in autocommit took seconds), and the rollback journal
        // in memory. Neither setting is kept in the file the server then opens.
        conn.execute_batch("PRAGMA synchronous = OFF; PRAGMA journal_mode = MEMORY;")
            .and_then(|()| conn.execute_batch(&sql))
            .map_err(|e| SetupError(format!("sqlite {}: {e}", db.path)))?;
    }
    if let Some(git) = &setup.git {
        make_repo(git, work).await?;
    }
    Ok(())
}

/// Runs `git args` in `dir` with fixed identities and dates.
async fn git(dir: &Path, args: &[&str], author: &str, date: &str) -> Result<(), SetupError> {
    let (name, email) = match author.split_once('<') {
        Some((n, e)) => (n.trim().to_string(), e.trim_end_matches('>').trim().to_string()),
        None => (author.trim().to_string(), "eval@example.com".to_string()),
    };
    let out = tokio::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", &name)
        .env("GIT_AUTHOR_EMAIL", &email)
        .env("GIT_COMMITTER_NAME", &name)
        .env("GIT_COMMITTER_EMAIL", &email)
        .env("GIT_AUTHOR_DATE", date)
        .env("GIT_COMMITTER_DATE", date)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .await
        .map_err(|e| SetupError(format!("git {}: {e} (is git installed?)", args.join(" "))))?;
    if !out.status.success() {
        return Err(SetupError(format!("git {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(())
}

async fn make_repo(setup: &GitSetup, work: &Path) -> Result<(), SetupError> {
    let dir = inside(work, &setup.path)?;
    std::fs::create_dir_all(&dir).map_err(|e| SetupError(format!("{}: {e}", dir.display())))?;
    let (first_author, first_date) = setup
        .commits
        .first()
        .map(|c| (c.author.as_str(), c.date.as_str()))
        .unwrap_or(("Eval <eval@example.com>", "2026-01-01T12:00:00Z"));
    git(&dir, &["init", "-q", "-b", "main"], first_author, first_date).await?;
    for commit in &setup.commits {
        for (rel, content) in &commit.files {
            write(&dir, rel, content)?;
        }
        for rel in &commit.remove {
            let path = inside(&dir, rel)?;
            std::fs::remove_file(&path).map_err(|e| SetupError(format!("{}: {e}", path.display())))?;
        }
        git(&dir, &["add", "-A"], &commit.author, &commit.date).await?;
        git(&dir, &["commit", "-q", "--allow-empty", "-m", &commit.message], &commit.author, &commit.date).await?;
    }
    for (rel, content) in &setup.uncommitted {
        write(&dir, rel, content)?;
    }
    Ok(())
}
