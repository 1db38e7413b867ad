//! JSON-lines output of trajectory records: `codemode run --trace` (stderr or a file) and
//! `codemode serve --audit FILE`.
//!
//! Records are handed to a writer thread through a channel, so the guest worker that emits them
//! never waits on I/O. A file is opened in append mode for every line: a log rotated away (renamed
//! or truncated) is followed by the next line, and concurrent writers append whole lines. A write
//! failure is logged (once per failure streak) and the record dropped: it never fails a run.

use codemode_core::executor::{RunEvent, RunObserver};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::mpsc::{Sender, channel};
use std::thread::JoinHandle;

/// Where JSON lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditTarget {
    /// Standard error (never standard output, which may carry protocol messages).
    Stderr,
    /// A file, appended to.
    File(PathBuf),
}

/// A [`RunObserver`] writing every [`RunEvent::Trace`] record as one JSON line.
#[derive(Debug)]
pub struct JsonLinesAudit {
    tx: Mutex<Option<Sender<String>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl JsonLinesAudit {
    /// Starts the writer. A file target must be writable now (the error says why it is not).
    pub fn start(target: AuditTarget) -> std::io::Result<Self> {
        if let AuditTarget::File(path) = &target {
            std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        }
        let (tx, rx) = channel::<String>();
        let writer = std::thread::Builder::new().name("codemode-audit".into()).spawn(move || {
            let mut failing = false;
            for line in rx {
                let written = match &target {
                    AuditTarget::Stderr => writeln!(std::io::stderr().lock(), "{line}"),
                    AuditTarget::File(path) => std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes())),
                };
                match written {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!(error = %e, target = ?target, "cannot write the trajectory record; dropping records until writing works again");
                    }
                    Err(_) => {}
                }
            }
        })?;
        Ok(Self { tx: Mutex::new(Some(tx)), writer: Mutex::new(Some(writer)) })
    }

    /// Writes every record handed over so far and stops the writer (later records are dropped).
    pub fn close(&self) {
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        if let Some(w) = self.writer.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = w.join();
        }
    }
}

impl RunObserver for JsonLinesAudit {
    fn on_event(&self, event: RunEvent) {
        if let RunEvent::Trace(record) = event
            && let Some(tx) = self.tx.lock().unwrap_or_else(|p| p.into_inner()).as_ref()
        {
            let _ = tx.send(record.to_json_line());
        }
    }
}

impl Drop for JsonLinesAudit {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use codemode_core::trajectory::{ControlRecord, TraceRecord, Transcript};

    fn record(id: &str) -> RunEvent {
        RunEvent::Trace(Box::new(TraceRecord::Control(ControlRecord {
            tool_call_id: Some(id.into()),
            tool: "exec".into(),
            run_id: None,
            status: "started".into(),
            code: None,
            at_ms: 1,
            duration_ms: None,
        })))
    }

    #[test]
    fn appends_lines_and_follows_rotation() {
        let dir = std::env::temp_dir().join(format!("codemode-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let audit = JsonLinesAudit::start(AuditTarget::File(path.clone())).unwrap();
        audit.on_event(record("a"));
        // Rotated away between two records (once the first is written): the next one starts a new file.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_to_string(&path).map(|t| t.is_empty()).unwrap_or(true) && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::fs::rename(&path, dir.join("audit.jsonl.1")).unwrap();
        audit.on_event(record("b"));
        audit.close();
        audit.on_event(record("after close"));
        let old = Transcript::from_json_lines(&std::fs::read_to_string(dir.join("audit.jsonl.1")).unwrap()).unwrap();
        let new = Transcript::from_json_lines(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!((old.records.len(), new.records.len()), (1, 1));
        // An unwritable target is refused at start.
        assert!(JsonLinesAudit::start(AuditTarget::File(dir.join("no/such/dir/x.jsonl"))).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
