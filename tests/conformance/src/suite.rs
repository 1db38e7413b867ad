//! The suite as a test harness (libtest-mimic): every corpus case and every behaviour test is one
//! trial, named `corpus::<case>` or `behaviour::<test>`. A trial whose needs the engine's declared
//! capabilities rule out is listed as *ignored*, its kind naming what it needs
//! (`[needs interrupt] corpus::infinite_loop ... ignored`), so a runner's summary counts what did
//! not run instead of passing it silently; `--include-ignored` runs it anyway, to check a claim an
//! engine is about to make.

use crate::{CASES, behaviour, check_baseline, parse_case, run_case_with_baseline, tokio_runtime};
use codemode::GuestEngine;
use codemode_core::engine::EngineCapabilities;
use libtest_mimic::{Arguments, Trial};
use std::process::ExitCode;
use std::sync::Arc;

/// Makes the engine under test: called once per trial (twice where a run moves to a fresh instance).
pub type EngineFactory = Arc<dyn Fn() -> Arc<dyn GuestEngine> + Send + Sync>;

/// What a test needs from an engine before it can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing beyond the contract every engine keeps.
    Nothing,
    /// Every named capability (`serializedSnapshots`, `memoryLimit`, `interrupt`, `stackLimit`).
    All(&'static [&'static str]),
    /// At least one of the named capabilities.
    Any(&'static [&'static str]),
}

impl Needs {
    /// Why the test does not apply to an engine with `caps` (`None`: it applies). An unknown
    /// capability name never applies.
    pub fn unmet(&self, caps: &EngineCapabilities) -> Option<String> {
        let claimed = |c: &&str| caps.has(c) == Some(true);
        match self {
            Needs::Nothing => None,
            Needs::All(names) => {
                let missing: Vec<&str> = names.iter().copied().filter(|c| !claimed(c)).collect();
                (!missing.is_empty()).then(|| format!("needs {}", missing.join(", ")))
            }
            Needs::Any(names) => (!names.iter().any(claimed)).then(|| format!("needs {}", names.join(" or "))),
        }
    }
}

/// One behaviour test: name, needs, and how to run it on the engine factory.
type Behaviour = (&'static str, Needs, fn(&EngineFactory));

fn run<F: std::future::Future<Output = ()>>(f: F) {
    tokio_runtime().block_on(f);
}

/// Every behaviour test of [`behaviour`], with what it needs.
pub const BEHAVIOURS: &[Behaviour] = &[
    ("wait_lookup_failures", Needs::Nothing, |m| run(behaviour::wait_lookup_failures(m()))),
    ("wait_is_exclusive", Needs::Nothing, |m| run(behaviour::wait_is_exclusive(m()))),
    ("sixty_fifth_suspension", Needs::Nothing, |m| run(behaviour::sixty_fifth_suspension(m()))),
    ("expiry_cleans_up", Needs::Nothing, |m| run(behaviour::expiry_cleans_up(m()))),
    ("abort_cleans_up", Needs::Nothing, |m| run(behaviour::abort_cleans_up(m()))),
    ("snapshot_limit", Needs::Any(&["serializedSnapshots", "memoryLimit"]), |m| run(behaviour::snapshot_limit(m()))),
    ("output_limit_across_suspension", Needs::Nothing, |m| run(behaviour::output_limit_across_suspension(m()))),
    ("nested_calls_continue_after_exec", Needs::Nothing, |m| run(behaviour::nested_calls_continue_after_exec(m()))),
    ("host_survives_hostile_cells", Needs::Nothing, |m| run(behaviour::host_survives_hostile_cells(m()))),
    ("hostile_loops_time_out", Needs::All(&["interrupt"]), |m| run(behaviour::hostile_loops_time_out(m()))),
    ("hostile_memory_bombs_are_stopped", Needs::All(&["memoryLimit"]), |m| {
        run(behaviour::hostile_memory_bombs_are_stopped(m()))
    }),
    ("hostile_recursion_is_caught", Needs::All(&["stackLimit"]), |m| run(behaviour::hostile_recursion_is_caught(m()))),
    ("timeout_cleans_up", Needs::All(&["interrupt"]), |m| run(behaviour::timeout_cleans_up(m()))),
    ("hooks_see_every_call", Needs::Nothing, |m| run(behaviour::hooks_see_every_call(m()))),
    ("concurrent_runs_are_isolated", Needs::Nothing, |m| run(behaviour::concurrent_runs_are_isolated(m()))),
    ("telemetry_counts", Needs::Nothing, |m| run(behaviour::telemetry_counts(m()))),
    ("waiting_always_names_what_it_waits_for", Needs::Nothing, |m| {
        run(behaviour::waiting_always_names_what_it_waits_for(m()))
    }),
    ("json_values_round_trip", Needs::Nothing, |m| run(behaviour::json_values_round_trip(m()))),
    // Two engines from the factory: the run moves to a fresh instance.
    ("resume_in_a_fresh_engine", Needs::All(&["serializedSnapshots"]), |m| {
        run(behaviour::resume_in_a_fresh_engine(m(), m()))
    }),
];

/// Why corpus case `name` does not apply to an engine with `caps` (`None`: it applies): a limit its
/// `@requires` names that the engine does not claim, or TypeScript without the suite's `typescript`
/// feature. `Err` for a case that does not exist or requires an unknown capability.
pub fn case_unmet(name: &str, caps: &EngineCapabilities) -> Result<Option<String>, crate::CaseMismatch> {
    let Some((_, source)) = CASES.iter().find(|(n, _)| *n == name) else {
        return Err(format!("no conformance case `{name}`").into());
    };
    let spec = parse_case(source);
    if let Some(unknown) = spec.requires.iter().find(|c| caps.has(c).is_none()) {
        return Err(format!("case `{name}` requires unknown capability `{unknown}`").into());
    }
    let missing: Vec<&str> = spec.requires.iter().map(String::as_str).filter(|c| caps.has(c) != Some(true)).collect();
    if !missing.is_empty() {
        return Ok(Some(format!("needs {}", missing.join(", "))));
    }
    let typescript = spec.exec.get("language").and_then(serde_json::Value::as_str) == Some("typescript");
    Ok((typescript && !cfg!(feature = "typescript")).then(|| "needs the typescript feature".to_string()))
}

/// Every trial of the suite for the engine `make` builds, with the engine's expected-failures
/// `baseline`.
pub fn trials(make: EngineFactory, baseline: &'static [&'static str]) -> Vec<Trial> {
    let caps = make().capabilities();
    let mut out = vec![Trial::test("corpus::baseline_entries_name_real_cases", move || {
        check_baseline(baseline);
        Ok(())
    })];
    for (name, _) in CASES {
        let (name, make) = (*name, make.clone());
        let trial = Trial::test(format!("corpus::{name}"), move || {
            run_case_with_baseline(name, make(), baseline);
            Ok(())
        });
        out.push(match case_unmet(name, &caps) {
            Ok(None) => trial,
            Ok(Some(why)) => trial.with_kind(why).with_ignored_flag(true),
            Err(e) => Trial::test(format!("corpus::{name}"), move || Err(e.0.into())),
        });
    }
    for &(name, needs, test) in BEHAVIOURS {
        let make = make.clone();
        let trial = Trial::test(format!("behaviour::{name}"), move || {
            test(&make);
            Ok(())
        });
        out.push(match needs.unmet(&caps) {
            None => trial,
            Some(why) => trial.with_kind(why).with_ignored_flag(true),
        });
    }
    out
}

/// The `main` of an engine's conformance test target (`harness = false`): parses the usual test
/// arguments (filters, `--include-ignored`, `--test-threads`, …) and runs [`trials`].
pub fn main(make: EngineFactory, baseline: &'static [&'static str]) -> ExitCode {
    libtest_mimic::run(&Arguments::from_args(), trials(make, baseline)).exit_code()
}
