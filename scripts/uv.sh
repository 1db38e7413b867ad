#!/usr/bin/env bash
# Runs uv (the Python package installer), installing the pinned version on first use into the cache
# folder's tools (beside mdbook): the project's venvs are made and filled with it. pip took about a
# minute per venv here (resolving, unpacking, compiling every module); uv, from its cache, a second
# or two. Usage: scripts/uv.sh <uv arguments>, e.g. `scripts/uv.sh pip install --python DIR -r FILE`.
set -euo pipefail
version=0.13.10
tools="${TOOLS_DIR:-$HOME/.cache/codemode-ci/tools}"
home="$tools/uv-$version"
if [ ! -x "$home/bin/uv" ]; then
  printf '[setup] installing uv %s into %s\n' "$version" "$home" >&2
  # Installed beside, then moved into place: an interrupted install leaves no half of one behind.
  part="$home.part-$$"
  rm -rf "$part"
  mkdir -p "$tools"
  python3 -m venv "$part"
  "$part/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$version"
  rm -rf "$home"
  mv "$part" "$home"
fi
# What pip is told on this machine, uv is told too: the certificate authority and the local wheels.
if [ -z "${SSL_CERT_FILE:-}" ] && [ -n "${PIP_CERT:-}" ]; then export SSL_CERT_FILE="$PIP_CERT"; fi
if [ -z "${UV_FIND_LINKS:-}" ] && [ -n "${PIP_FIND_LINKS:-}" ] && [ -d "$PIP_FIND_LINKS" ]; then
  export UV_FIND_LINKS="$PIP_FIND_LINKS"
fi
# The machine's own interpreters only: never a download of another.
export UV_PYTHON_DOWNLOADS=never
exec "$home/bin/uv" "$@"
