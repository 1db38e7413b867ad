//! The bundled suite with the oracle (book: "Measuring code mode"): a representative subset passes
//! in every arm against the real servers, with the same token counts run to run; a sabotaged check
//! or fixture fails; hostile task files (paths out of the work directory, generators reaching for
//! the host) fail their episode and touch nothing outside it; a broken suite is refused with the
//! file and field named. `make eval` runs the whole suite the same way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use codemode_eval::oracle::Oracle;
use codemode_eval::suite::{Arm, Check, Suite};
use codemode_eval::{EvalOptions, Report};
use std::path::PathBuf;

/// One task per server and per kind: a lookup, a many-record aggregate, a change checked on disk
/// and in a database, a slow tool that suspends the run, a git history and a cross-server task.
pub const SUBSET: &[&str] = &[
    "fs-readme-owner",
    "fs-orders-paid-total",
    "everything-slow-operation",
    "sqlite-insert-order",
    "git-commits-by-author",
    "memory-who-works-at",
    "time-convert-kolkata",
    "cross-sql-report-file",
];

fn suite_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../eval")
}

fn bundled(ids: &[&str]) -> Suite {
    let mut suite = Suite::load(&suite_dir()).expect("the bundled suite loads");
    suite.select(&ids.iter().map(|s| s.to_string()).collect::<Vec<_>>()).expect("the subset exists");
    suite
}

async fn run(suite: &Suite) -> Report {
    codemode_eval::run_suite(suite, &Oracle::new(), &EvalOptions::default()).await
}

/// What must not change between two runs: tokens, turns and calls. (Result bytes are raw: the
/// digits of a cell's `durationMs` vary them by a byte or two.)
fn counts(r: &Report) -> Vec<(String, Arm, u64, u64, u32, u32)> {
    r.episodes.iter().map(|e| (e.task.clone(), e.arm, e.input_tokens, e.output_tokens, e.turns, e.tool_calls)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subset_passes_in_every_arm_with_the_same_counts_every_run() {
    let suite = bundled(SUBSET);
    // Two runs at once (each episode has its own work directory and its own servers): the counts
    // must not depend on what else the machine runs, and the test takes the time of one run.
    let (first, second) = tokio::join!(run(&suite), run(&suite));
    assert!(first.all_passed(), "failures: {:#?}", first.failures());
    assert_eq!(first.episodes.len(), SUBSET.len() * 3);
    assert!(first.oracle && first.to_markdown().contains("floors"));
    // Waiting costs the model turns in `codemode` and none in `codemode-tasks`.
    let slow = |arm| first.episodes.iter().find(|e| e.task == "everything-slow-operation" && e.arm == arm).unwrap();
    assert!(slow(Arm::CodeMode).turns > slow(Arm::CodeModeTasks).turns, "{:?}", first.episodes);
    assert!(slow(Arm::CodeModeTasks).task_polls > 0);
    // Many records: the cell keeps them out of the context.
    let agg = |arm| first.episodes.iter().find(|e| e.task == "fs-orders-paid-total" && e.arm == arm).unwrap();
    assert!(agg(Arm::CodeMode).result_bytes * 2 < agg(Arm::Direct).result_bytes, "{:?}", first.episodes);
    assert!(agg(Arm::CodeMode).input_tokens < agg(Arm::Direct).input_tokens);
    assert!(second.all_passed(), "failures: {:#?}", second.failures());
    assert_eq!(counts(&first), counts(&second), "the oracle's counts differ between two runs");
    // The report's three forms.
    let json: serde_json::Value = serde_json::from_str(&first.to_json()).unwrap();
    assert_eq!(json["episodes"].as_array().unwrap().len(), SUBSET.len() * 3);
    assert!(first.to_svg().starts_with("<svg") && first.to_svg().contains("fs-orders-paid-total"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sabotaged_check_or_fixture_fails() {
    // The check wants another answer.
    let mut suite = bundled(&["fs-readme-owner"]);
    suite.tasks[0].verify = vec![Check::AnswerEquals("Somebody Else".into())];
    let r = run(&suite).await;
    assert_eq!(r.episodes.len(), 3);
    for e in &r.episodes {
        assert!(!e.passed, "{e:?}");
        assert!(e.checks[0].why.contains("Dana Whitfield"), "{:?}", e.checks);
    }
    // The fixture says something else: the oracle reads it and answers from it, so the check fails.
    let mut suite = bundled(&["fs-readme-owner"]);
    suite.tasks[0].setup.files.insert("docs/readme.txt".into(), "Owner: Mallory\n".into());
    let r = run(&suite).await;
    assert!(r.episodes.iter().all(|e| !e.passed && e.answer == "Mallory"), "{:?}", r.episodes);
    // A failing command check.
    let mut suite = bundled(&["fs-readme-owner"]);
    suite.tasks[0].verify.push(Check::Command("test \"$ANSWER\" = 'nobody'".into()));
    let r = run(&suite).await;
    assert!(r.episodes.iter().all(|e| !e.passed && e.checks[0].passed && !e.checks[1].passed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_task_files_stay_in_their_work_directory() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("pwned.txt");
    let mut suite = bundled(&["fs-readme-owner"]);
    let task = &mut suite.tasks[0];
    // A path out of the work directory.
    task.setup.files.insert(format!("../../../../..{}", target.display()), "x".into());
    let r = codemode_eval::episode::run(&suite, &suite.tasks[0], Arm::Direct, &Oracle::new(), false).await;
    assert!(r.error.as_deref().unwrap_or("").contains("without `..`"), "{r:?}");
    assert!(!target.exists());
    // A generator reaching for the host: the sandbox has no filesystem, process or network.
    let mut suite = bundled(&["fs-readme-owner"]);
    suite.tasks[0].setup.generate =
        Some(format!("const fs = require('fs'); fs.writeFileSync('{}', 'x'); return {{}};", target.display()));
    let r = codemode_eval::episode::run(&suite, &suite.tasks[0], Arm::Direct, &Oracle::new(), false).await;
    assert!(r.error.as_deref().unwrap_or("").contains("generate"), "{r:?}");
    assert!(!target.exists());
    // A check reading outside the work directory.
    let mut suite = bundled(&["fs-readme-owner"]);
    suite.tasks[0].verify = vec![Check::FileContains { path: "/etc/passwd".into(), text: "root".into() }];
    let r = codemode_eval::episode::run(&suite, &suite.tasks[0], Arm::CodeMode, &Oracle::new(), false).await;
    assert!(!r.passed && r.checks[0].why.contains("without `..`"), "{r:?}");
}

#[test]
fn a_broken_suite_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("servers.json5"), "{ a: { command: 'x' } }").unwrap();
    std::fs::create_dir(dir.path().join("tasks")).unwrap();
    let task = |id: &str, server: &str, re: &str| {
        format!(
            "{{ id: '{id}', kind: 'lookup', prompt: 'p', servers: ['{server}'], verify: [{{ answerMatches: '{re}' }}], \
             oracle: {{ direct: {{ turns: [], answer: '() => 1' }}, codemode: {{ cells: [], answer: '() => 1' }} }} }}"
        )
    };
    std::fs::write(dir.path().join("tasks/one.json5"), task("one", "nope", "x")).unwrap();
    let e = Suite::load(dir.path()).unwrap_err();
    assert!(e.path.ends_with("one.json5") && e.message.contains("no server `nope`"), "{e}");
    std::fs::write(dir.path().join("tasks/one.json5"), task("one", "a", "(")).unwrap();
    let e = Suite::load(dir.path()).unwrap_err();
    assert!(e.message.contains("answerMatches"), "{e}");
    std::fs::write(dir.path().join("tasks/one.json5"), task("one", "a", "x")).unwrap();
    std::fs::write(dir.path().join("tasks/two.json5"), task("one", "a", "x")).unwrap();
    let e = Suite::load(dir.path()).unwrap_err();
    assert!(e.message.contains("used twice"), "{e}");
    std::fs::write(dir.path().join("tasks/two.json5"), "{ id: 'two', kind: 'lookup', extra: 1 }").unwrap();
    let e = Suite::load(dir.path()).unwrap_err();
    assert!(e.path.ends_with("two.json5"), "{e}");
    let mut ok = Suite::load(&suite_dir()).unwrap();
    assert!(ok.tasks.len() >= 40, "the bundled suite has {} tasks", ok.tasks.len());
    assert!(ok.select(&["no-such-task".into()]).is_err());
}
