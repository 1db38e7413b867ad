#!/usr/bin/env bash
# Runs bench/python/bench.py in a scratch venv with the release wheel, the Rust API's numbers from
# the same release build (`codemode bench`), and the peers when the registry has them:
# smolagents' LocalPythonExecutor and Pydantic's Monty. Under the machine's `python3`, and again
# under the newest CPython 3.12 or later it has (scripts/newer-python.sh), where `async def` tools'
# tasks start eagerly (docs/src/packages.md, "Tool calls on the event loop").
# Usage: bench-python.sh WHEEL_DIR CODEMODE_BIN [bench.py options]
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=$1 bin=$2
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
newer=$(scripts/newer-python.sh)
n=0
for py in python3 $newer; do
  n=$((n + 1))
  venv="$scratch/venv$n"
  "$py" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$wheels"/codemode-*.whl
  "$venv/bin/pip" install --quiet --disable-pip-version-check smolagents || echo "(smolagents not installable here)" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check pydantic-monty || echo "(pydantic-monty not installable here)" >&2
  echo "CPython $("$venv/bin/python" -c 'import platform; print(platform.python_version())')"
  "$venv/bin/python" bench/python/bench.py --codemode-bin "$bin" "${@:3}"
done
