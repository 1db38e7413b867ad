#!/usr/bin/env bash
# Keeps the shared build cache from filling the disk. The cache folder outlives clones (CI points
# CARGO_TARGET_DIR outside the checkout), and every change of dependencies, features or compiler
# leaves the previous artifacts behind: left alone it grew past 70 GB and the linker died of a full
# disk (SIGBUS). Before a build, if the dev profile's folder is over its budget, or the disk it lives
# on is short of free space, its incremental state goes first, then, if that is not enough, the
# whole profile folder (the next build is a cold one: ~30 minutes on 2 cores).
#
#   CODEMODE_CACHE_BUDGET_GB    largest size the dev profile folder may keep (default 30)
#   CODEMODE_CACHE_MIN_FREE_GB  free space a build needs on the cache's disk (default 15)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
profile="$target/debug"
budget_gb="${CODEMODE_CACHE_BUDGET_GB:-30}"
min_free_gb="${CODEMODE_CACHE_MIN_FREE_GB:-15}"
mkdir -p "$target"

size_gb() { if [ -d "$1" ]; then du -sk "$1" | awk '{print int($1 / 1048576)}'; else echo 0; fi; }
free_gb() { df -Pk "$target" | awk 'NR == 2 {print int($4 / 1048576)}'; }
over() { [ "$(size_gb "$profile")" -gt "$budget_gb" ] || [ "$(free_gb)" -lt "$min_free_gb" ]; }

if ! over; then
  exit 0
fi
echo "[prune] $profile holds $(size_gb "$profile") GB, $(free_gb) GB free (budget ${budget_gb} GB, need ${min_free_gb} GB free): removing its incremental state" >&2
rm -rf "$profile/incremental"
if over && [ -d "$profile" ]; then
  echo "[prune] still over: removing $profile (this build starts cold)" >&2
  rm -rf "$profile"
fi
if [ "$(free_gb)" -lt "$min_free_gb" ]; then
  echo "[prune] warning: only $(free_gb) GB free on the cache's disk after pruning; the build may fail for space" >&2
fi
