#!/usr/bin/env bash
# Builds the `codemode` wheel (maturin, the workspace's dev profile and target dir), installs it into
# a fresh venv with the test requirements, and runs the Python package's tests (pytest), including
# the PydanticAI end-to-end test. Called by scripts/test.sh; runnable alone after scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
wheels="$CARGO_TARGET_DIR/wheels"
rm -f "$wheels"/codemode-*.whl
.venv/bin/maturin build --quiet --locked --strip --profile dev -m crates/codemode-python/Cargo.toml --out "$wheels" >&2
venv="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$venv")"' EXIT
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheels"/codemode-*.whl \
  -r crates/codemode-python/requirements-test.txt
cd crates/codemode-python/tests
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
# `async def` tools start their tasks eagerly on CPython 3.12 and later (docs/src/packages.md, "Tool
# calls on the event loop"): the event loop's and the runtime's tests run again under the newest
# such interpreter this machine has (scripts/newer-python.sh), with only pytest beside the wheel.
newer=$("$root/scripts/newer-python.sh")
if [ -n "$newer" ]; then
  "$newer" -m venv "$(dirname "$venv")/newer"
  "$(dirname "$venv")/newer/bin/python" -m pip install --quiet --disable-pip-version-check "$wheels"/codemode-*.whl \
    "$(grep '^pytest==' ../requirements-test.txt)"
  "$(dirname "$venv")/newer/bin/python" -m pytest -q -p no:cacheprovider test_event_loop.py test_runtime.py
else
  echo "(no CPython 3.12 or later here: async tools' eager start is not tested in this run)" >&2
fi
# Typing, against the installed wheel: the package and a usage file under mypy --strict, and the
# native module's stub against the module itself (stubtest).
"$venv/bin/python" -m mypy --strict --no-incremental --cache-dir=/dev/null -p codemode
"$venv/bin/python" -m mypy --strict --no-incremental --cache-dir=/dev/null typing_usage.py
"$venv/bin/python" -m mypy.stubtest codemode._native
# The package page's example (crates/codemode-python/README.md), run as a user would after
# `pip install`: it must print what the page says it prints.
out=$("$venv/bin/python" -c "import re, pathlib; code = re.search(r'\`\`\`python\n(.*?)\`\`\`', pathlib.Path('../README.md').read_text(), re.S).group(1); exec(compile(code, 'README.md', 'exec'))")
[ "$out" = "completed 21" ] || { echo "the package page's example printed: $out" >&2; exit 1; }
