#!/usr/bin/env bash
# Prints the newest CPython 3.12 or later this machine has (on PATH, or pyenv's), or nothing: where
# `async def` tools' tasks start eagerly (docs/src/packages.md, "Tool calls on the event loop").
# Used by scripts/test-python.sh and scripts/bench-python.sh.
set -uo pipefail
for py in python3.14 python3.13 python3.12 $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV); do
  # A pyenv shim of a version that is not selected exists but fails to run: skipped.
  if command -v "$py" >/dev/null && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
    command -v "$py"
    exit 0
  fi
done
