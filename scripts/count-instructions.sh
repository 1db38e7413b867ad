#!/usr/bin/env bash
# Instructions per nested call, counted by valgrind's callgrind (run by `make bench-instructions`).
#
# Timings on a shared 2-core machine move by up to 2x from one run to the next; instruction counts
# barely do (repeated runs of one binary agree within about 4%, mostly in the host share), so they
# show whether a change to the nested-call path helps even when its time gain is lost in the noise.
# They are not times: an instruction of QuickJS interpreting the prelude and one of a malloc cost
# differently. Numbers are printed, never asserted.
#
# Usage: scripts/count-instructions.sh [ENGINE...]   (default: quickjs-wasi quickjs)
#   BENCH_BIN  the criterion bench binary of `benches/runtime.rs` (default: built here, in the
#              bench profile, which is release)
#
# How: the criterion binary runs one scenario once under `--test`: a warm-up cell with one nested
# call (so the tool's input schema is compiled before, not during, the scenario), then the
# scenario's cell. Counted is everything `Inner::drive_loop` runs, inclusive (the guest, the bridge,
# the runtime's dispatch of each call and the tool itself), on every thread that drives it. The
# nested-call cell (1,000 sequential `await tools.demo_echo({ i })`) minus the trivial cell, divided
# by 1,000, is the cost of one nested call; "guest" is the share inside the engine's drive step
# (QuickJS, the prelude, the host primitive), "host" the rest (request dispatch, the tool's future,
# results).
#
# A second table counts what a run costs with and without two visible namespaces: criterion's
# `exec_trivial` and `exec_trivial_namespaces` each run for PROFILE_SECONDS (default 2) under
# callgrind, and scripts/callgrind-calls.py divides each function's inclusive instructions by its
# call count (the set-up's few warm-up runs are among the hundreds counted): the engine's drive step
# per run (the guest), opening the run's namespaces and writing its boot text (the host).
#
# With FUNCTIONS=N (N > 0), a third table per engine lists the N functions whose own instructions
# per run inside the drive step grow most from the plain run to the run with namespaces
# (scripts/callgrind-guest.py), the guest's functions named: both per-run scenarios run once more,
# collecting only inside the drive step (`--toggle-collect`) and with
# `CODEMODE_WASM_PROFILER=perfmap`, so wasmtime writes the names of quickjs-wasi's compiled guest
# code to /tmp/perf-<pid>.map (removed afterwards), which callgrind alone shows as bare addresses.
#
# A last table counts a nested call in the command users run, `codemode run` (its tracing
# subscriber, its own process), which criterion's bench does not: a span the subscriber records for
# nobody cost 2-3k instructions a call there and nothing in criterion. Per engine, everything
# `Inner::drive_loop` runs for a cell of CLI_CALLS sequential `await tools.demo_echo({ i })`
# (default 2000) minus a cell with one call (which also holds the process's one-time compile of the
# tool's input schema), divided by CLI_CALLS - 1. The binary is CODEMODE_BIN, else the release build
# in the target folder; without one the table is skipped (`cargo build --release -p codemode-cli`).
#
# Needs valgrind (Debian: `apt-get install valgrind`); it is not part of the set-up, as no test
# needs it. quickjs-wasi's JIT code runs under valgrind too (about 30 s per engine here).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null 2>&1 || {
  echo "count-instructions: valgrind is not installed (Debian: apt-get install valgrind)" >&2
  exit 1
}
engines=("$@")
[ ${#engines[@]} -gt 0 ] || engines=(quickjs-wasi quickjs)

bin=${BENCH_BIN:-}
if [ -z "$bin" ]; then
  echo "[count-instructions] building the criterion bench binary" >&2
  bin=$(cargo bench --locked -p codemode --features engine-wasi,engine-quickjs,engine-boa --bench runtime \
    --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "runtime":
        print(m["executable"])')
fi
[ -x "$bin" ] || { echo "count-instructions: no bench binary at '$bin'" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Inclusive count of every function matching $2, summed over the per-thread profiles $1.*: a run
# may be driven on more than one worker thread (it gives its worker up while it waits), and the
# bench binary's set-up warms every compiled engine on whichever worker is free, so no single
# thread (nor a thread's first match) holds a whole scenario. The set-up is the same in both
# scenarios' profiles, so it cancels out of their difference.
inclusive() {
  local sum=0 v f
  for f in "$1".*; do
    v=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null | grep -E "$2" | awk '{gsub(",", "", $1); s += $1} END {print s + 0}')
    sum=$((sum + v))
  done
  echo "$sum"
}

printf '%-14s %12s %12s %12s\n' engine "per call" guest host
for e in "${engines[@]}"; do
  # Natively first: compiling the wasm module into the module cache under valgrind would take minutes.
  "$bin" --test "^$e/exec_trivial\$" >/dev/null 2>&1 || true
  for scenario in nested_call exec_trivial; do
    echo "[count-instructions] $e/$scenario under callgrind" >&2
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/$e-$scenario.%p" \
      "$bin" --test "^$e/$scenario\$" >/dev/null 2>&1
  done
  loop_n=$(inclusive "$work/$e-nested_call" 'Inner::drive_loop \[')
  loop_t=$(inclusive "$work/$e-exec_trivial" 'Inner::drive_loop \[')
  guest_n=$(inclusive "$work/$e-nested_call" 'GuestInstance>::drive \[')
  guest_t=$(inclusive "$work/$e-exec_trivial" 'GuestInstance>::drive \[')
  # The set-up's warm-ups are in both profiles: without the scenarios (an engine not compiled in)
  # the difference is about zero.
  if [ "$loop_t" -eq 0 ] || [ "$((loop_n - loop_t))" -lt 1000000 ]; then
    echo "count-instructions: $e: the nested-call scenario did not run (engine not compiled in?)" >&2
    continue
  fi
  all=$(((loop_n - loop_t) / 1000))
  guest=$(((guest_n - guest_t) / 1000))
  printf '%-14s %12d %12d %12d\n' "$e" "$all" "$guest" "$((all - guest))"
done

# Per run: a trivial cell, and the same with two visible namespaces (`Shipping`, `Bench`).
seconds=${PROFILE_SECONDS:-2}
functions=${FUNCTIONS:-0}
case "$functions" in '' | *[!0-9]*) echo "count-instructions: FUNCTIONS must be a number" >&2; exit 2 ;; esac
maps=()
trap 'rm -rf "$work" "${maps[@]}"' EXIT
per_call() { python3 scripts/callgrind-calls.py "$1" "${@:2}" | cut -f3; }
printf '\n%-14s %14s %14s %14s %14s\n' engine "guest / run" "with ns" "ns opening" "ns boot text"
for e in "${engines[@]}"; do
  case "$e" in
    quickjs-wasi) instance=WasiInstance ;;
    quickjs) instance=NativeInstance ;;
    boa) instance=BoaInstance ;;
    *) echo "count-instructions: no instance type known for engine $e" >&2; continue ;;
  esac
  for scenario in exec_trivial exec_trivial_namespaces; do
    echo "[count-instructions] $e/$scenario under callgrind for ${seconds}s" >&2
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/run-$e-$scenario.%p" \
      "$bin" --bench "^$e/$scenario\$" --profile-time "$seconds" >/dev/null 2>&1
  done
  drive="$instance as codemode_core::engine::GuestInstance>::drive\$"
  guest_t=$(per_call "$drive" "$work/run-$e-exec_trivial".*)
  guest_n=$(per_call "$drive" "$work/run-$e-exec_trivial_namespaces".*)
  opening=$(per_call 'Inner::open_namespaces$' "$work/run-$e-exec_trivial_namespaces".*)
  boot=$(per_call 'BootText::with_namespace_texts' "$work/run-$e-exec_trivial_namespaces".*)
  if [ "$guest_t" -eq 0 ] || [ "$guest_n" -eq 0 ]; then
    echo "count-instructions: $e: the per-run scenarios did not run (engine not compiled in?)" >&2
    continue
  fi
  printf '%-14s %14d %14d %14d %14d\n' "$e" "$guest_t" "$guest_n" "$opening" "$boot"
  if [ "$functions" -gt 0 ]; then
    # Again, collecting only inside the drive step (the set-up's warm-ups, whose share of a
    # per-run average differs between two profiles of different run counts, stay out), with the
    # guest's code named.
    for scenario in exec_trivial exec_trivial_namespaces; do
      echo "[count-instructions] $e/$scenario under callgrind for ${seconds}s, the drive step only" >&2
      CODEMODE_WASM_PROFILER=perfmap valgrind --tool=callgrind --separate-threads=yes \
        --toggle-collect="*$instance as codemode_core::engine::GuestInstance>::drive" \
        --callgrind-out-file="$work/fn-$e-$scenario.%p" \
        "$bin" --bench "^$e/$scenario\$" --profile-time "$seconds" >/dev/null 2>&1
    done
    # The pid in a profile's name is the process's, and so is its map's (one profile per thread:
    # PREFIX.<pid>, PREFIX.<pid>-01, ...).
    pid_of() { local p=${1##*.}; echo "${p%%-*}"; }
    first=$(find "$work" -maxdepth 1 -name "fn-$e-exec_trivial_namespaces.*" | head -n 1)
    map="/tmp/perf-$(pid_of "$first").map"
    for f in "$work/fn-$e-exec_trivial".* "$work/fn-$e-exec_trivial_namespaces".*; do
      maps+=("/tmp/perf-$(pid_of "$f").map")
    done
    [ -f "$map" ] || map=/dev/null
    # Runs counted by the cell's start, which happens once per run inside the drive step: an
    # engine's own `start_and_poll` (quickjs-wasi's) or its `start_cell` (which the trait's default
    # `start_and_poll` calls; that default's name has no `GuestVm>::`, so it is not counted twice).
    started='GuestVm>::start_(cell|and_poll)$'
    runs_t=$(python3 scripts/callgrind-calls.py "$started" "$work/fn-$e-exec_trivial".* | cut -f1)
    runs_n=$(python3 scripts/callgrind-calls.py "$started" "$work/fn-$e-exec_trivial_namespaces".* | cut -f1)
    if [ "$runs_t" -gt 0 ] && [ "$runs_n" -gt 0 ]; then
      printf '\n%s, inside the drive step: own instructions per run, plain / with namespaces / difference\n' "$e"
      python3 scripts/callgrind-guest.py "$map" "$runs_t" "$runs_n" \
        "$work/fn-$e-exec_trivial" "$work/fn-$e-exec_trivial_namespaces" "$functions"
    else
      echo "count-instructions: $e: no runs counted inside the drive step" >&2
    fi
  fi
done

# A nested call in `codemode run` (see the top).
cli=${CODEMODE_BIN:-${CARGO_TARGET_DIR:-target}/release/codemode}
calls=${CLI_CALLS:-2000}
case "$calls" in '' | *[!0-9]* | 0 | 1) echo "count-instructions: CLI_CALLS must be a number above 1" >&2; exit 2 ;; esac
if [ ! -x "$cli" ]; then
  echo "count-instructions: no release codemode binary at '$cli' (set CODEMODE_BIN); the codemode run table is skipped" >&2
  exit 0
fi
printf 'for (let i = 0; i < %d; i++) await tools.demo_echo({ i });\nreturn 1;\n' "$calls" >"$work/many.js"
printf 'await tools.demo_echo({ i: 0 });\nreturn 1;\n' >"$work/one.js"
# Everything drive_loop ran, summed over the profile (one file: threads not separated).
looped() {
  valgrind --tool=callgrind --separate-threads=no --toggle-collect='*Inner::drive_loop' \
    --callgrind-out-file="$work/cli.out" "$cli" run --engine "$1" "$2" >/dev/null 2>&1 || return 1
  callgrind_annotate "$work/cli.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
printf '\n%-14s %12s   (codemode run, %d calls)\n' engine "per call" "$calls"
for e in "${engines[@]}"; do
  # Outside valgrind first, so the module cache holds what the profiled runs load.
  "$cli" run --engine "$e" "$work/one.js" >/dev/null 2>&1 || {
    echo "count-instructions: codemode run --engine $e failed (engine not compiled in?)" >&2
    continue
  }
  many=$(looped "$e" "$work/many.js") && one=$(looped "$e" "$work/one.js") || {
    echo "count-instructions: $e: codemode run under callgrind failed" >&2
    continue
  }
  printf '%-14s %12d\n' "$e" "$(((many - one) / (calls - 1)))"
done
