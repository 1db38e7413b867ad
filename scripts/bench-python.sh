#!/usr/bin/env bash
# Runs bench/python/bench.py in a scratch venv with the release wheel, the Rust API's numbers from
# the same release build (`codemode bench`), and the peers when the registry has them:
# smolagents' LocalPythonExecutor and Pydantic's Monty. Usage: bench-python.sh WHEEL_DIR CODEMODE_BIN
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=$1 bin=$2
venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "$wheels"/codemode-*.whl
"$venv/bin/pip" install --quiet --disable-pip-version-check smolagents || echo "(smolagents not installable here)" >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check pydantic-monty || echo "(pydantic-monty not installable here)" >&2
"$venv/bin/python" bench/python/bench.py --codemode-bin "$bin" "${@:3}"
