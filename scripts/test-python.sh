#!/usr/bin/env bash
# Builds the `codemode` wheel (maturin, the workspace's dev profile and target dir), installs it into
# a fresh venv with the test requirements (uv), and runs the Python package's tests (pytest), including
# the PydanticAI end-to-end test. Called by scripts/test.sh; runnable alone after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
wheels="$CARGO_TARGET_DIR/wheels"
# One run at a time holds the wheel's folder and the venvs' (below).
work="${CODEMODE_PYTHON_TESTS_DIR:-$HOME/.cache/codemode-ci/python-tests}"
mkdir -p "$work"
exec 9>"$work/lock"
flock 9
rm -f "$wheels"/codemode-*.whl
.venv/bin/maturin build --quiet --locked --strip --profile dev -m crates/codemode-python/Cargo.toml --out "$wheels" >&2
# The venvs live at one path in the cache folder (made afresh each run, by uv from its cache: a
# second or two) so that mypy's cache beside them stays valid run to run: checking the package
# against the frameworks' own types took ~50 s from nothing, a few seconds from the cache.
# fresh_venv DIR PYTHON [REQUIREMENTS…]: DIR made afresh under PYTHON, holding the wheel just built
# (never a cached one of the same name) and the requirements given.
fresh_venv() {
  local dir=$1 python=$2
  shift 2
  rm -rf "$dir"
  "$root/scripts/uv.sh" venv --quiet --python "$python" "$dir"
  "$root/scripts/uv.sh" pip install --quiet --refresh-package codemode --python "$dir/bin/python" \
    "$wheels"/codemode-*.whl "$@"
}
venv="$work/venv"
fresh_venv "$venv" "$(command -v python3)" -r crates/codemode-python/requirements-test.txt
cd crates/codemode-python/tests
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
# `async def` tools start their tasks eagerly on CPython 3.12 and later (docs/src/packages.md, "Tool
# calls on the event loop"): the event loop's and the runtime's tests run again under the newest
# such interpreter this machine has (scripts/newer-python.sh), with only pytest beside the wheel.
newer=$("$root/scripts/newer-python.sh")
if [ -n "$newer" ]; then
  fresh_venv "$work/newer" "$newer" "$(grep '^pytest==' ../requirements-test.txt)"
  "$work/newer/bin/python" -m pytest -q -p no:cacheprovider test_event_loop.py test_runtime.py
else
  echo "(no CPython 3.12 or later here: async tools' eager start is not tested in this run)" >&2
fi
# Typing, against the installed wheel: the package and a usage file under mypy --strict (one run,
# its cache in the folder above), and the native module's stub against the module itself (stubtest).
"$venv/bin/python" -m mypy --strict --cache-dir="$work/mypy" -p codemode -m typing_usage
"$venv/bin/python" -m mypy.stubtest codemode._native
# The package page's example (crates/codemode-python/README.md), run as a user would after
# `pip install`: it must print what the page says it prints.
out=$("$venv/bin/python" -c "import re, pathlib; code = re.search(r'\`\`\`python\n(.*?)\`\`\`', pathlib.Path('../README.md').read_text(), re.S).group(1); exec(compile(code, 'README.md', 'exec'))")
[ "$out" = "completed 21" ] || { echo "the package page's example printed: $out" >&2; exit 1; }
