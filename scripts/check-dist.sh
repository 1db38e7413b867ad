#!/usr/bin/env bash
# Installs the artifacts of `make dist` (in DIR, default dist/) the way a user would, each into a
# fresh temporary directory, and checks them:
# - the checksums (SHA256SUMS);
# - the binary tarball: extracted, `codemode --version`, then `codemode demo` on the built-in demo
#   catalog, which must complete;
# - the wheel: auditwheel finds it manylinux_2_17 compliant (nothing linked beyond the policy's
#   libraries and symbol versions); `pip install <wheel>` into a fresh venv, then the package
#   page's example (crates/codemode-python/README.md), which must print `completed 21`;
# - the sdist: it carries the sources the build needs (the guest's C shim, the bridge's prelude,
#   the lock file);
# - the npm tarballs: `npm install --offline` of both into a fresh project, then the package
#   page's example (crates/codemode-node/README.md) as an ES module and a CommonJS cell.
# Prints how long each install took. Usage: scripts/check-dist.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(cd "${1:-dist}" && pwd)
log() { echo "[check-dist] $*" >&2; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
(cd "$dir" && sha256sum -c --quiet SHA256SUMS)
log "checksums ok"
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT

# The binary.
for tarball in "$dir"/codemode-*-linux-gnu.tar.gz; do
  start=$(date +%s%N)
  tar -C "$home" -xzf "$tarball"
  bin=$(echo "$home"/codemode-*-linux-gnu/codemode)
  "$bin" --version >&2
  took=$(ms_since "$start")
  out=$("$bin" demo 2>&1) || { echo "$out" >&2; log "codemode demo failed from $tarball"; exit 1; }
  log "$(basename "$tarball") ($(du -k "$tarball" | cut -f1) KiB): extracted and ran in ${took} ms; demo ok ($(echo "$out" | wc -l) lines)"
done

# The wheel.
wheel=$(echo "$dir"/codemode-*-abi3-*.whl)
unzip -l "$wheel" | grep -q 'dist-info/licenses/LICENSE-APACHE' || { log "$(basename "$wheel") carries no licence text"; exit 1; }
audit=$("$root/.venv-dist/bin/auditwheel" show "$wheel" 2>&1)
# (auditwheel wraps its lines: read them as one)
echo "$audit" | tr -s ' \n' '  ' | grep -q 'consistent with the following platform tag: "manylinux_2_17_x86_64"' \
  || { echo "$audit" >&2; log "$(basename "$wheel") is not manylinux_2_17 compliant"; exit 1; }
python3 -m venv "$home/venv"
start=$(date +%s%N)
"$home/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index "$wheel"
took=$(ms_since "$start")
example=$(python3 -c "import re, pathlib; print(re.search(r'\`\`\`python\n(.*?)\`\`\`', pathlib.Path('$root/crates/codemode-python/README.md').read_text(), re.S).group(1))")
out=$(cd "$home" && "$home/venv/bin/python" -c "$example")
[ "$out" = "completed 21" ] || { log "the wheel's README example printed: $out"; exit 1; }
log "$(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB): manylinux_2_17 per auditwheel; pip install took ${took} ms; README example: $out"

# The sdist.
# (the sdist is `codemode-<v>.tar.gz`; the binary tarball, also `codemode-<v>-….tar.gz`, is not it)
sdist=$(ls "$dir"/codemode-[0-9]*.tar.gz | grep -v -- '-linux-gnu\.tar\.gz$')
listing=$(tar -tzf "$sdist")
for need in Cargo.lock pyproject.toml crates/codemode-engine-wasi/guest/shim.c \
  crates/codemode-bridge/src/js/prelude/ LICENSE-MIT LICENSE-APACHE; do
  echo "$listing" | grep -q "^codemode-[^/]*/$need" || { log "$(basename "$sdist") lacks $need"; exit 1; }
done
log "$(basename "$sdist") ($(du -k "$sdist" | cut -f1) KiB): carries the lock file, the guest's sources, the prelude and the licence texts"

# The npm packages.
app="$home/app"
mkdir -p "$app"
echo '{ "name": "app", "private": true }' > "$app/package.json"
start=$(date +%s%N)
(cd "$app" && npm install --offline --no-audit --no-fund --loglevel=error "$dir"/codemode-[0-9]*.tgz "$dir"/codemode-linux-x64-gnu-*.tgz >&2)
took=$(ms_since "$start")
python3 -c "import re, pathlib; print(re.search(r'\`\`\`js\n(.*?)\`\`\`', pathlib.Path('$root/crates/codemode-node/README.md').read_text(), re.S).group(1))" > "$app/readme.mjs"
esm=$(cd "$app" && node readme.mjs)
cjs=$(cd "$app" && node -e "
  const { CodeMode, tool } = require('codemode')
  const twice = tool({ name: 'twice', inputSchema: { type: 'object' }, handler: ({ n }) => 2 * n })
  new CodeMode({ tools: [twice] }).exec('return await tools.twice({ n: 21 })').then((r) => console.log(r.status, r.value))")
[ "$esm" = "completed 21" ] || { log "the npm README example (ESM) printed: $esm"; exit 1; }
[ "$cjs" = "completed 42" ] || { log "the CommonJS cell printed: $cjs"; exit 1; }
log "npm: $(cd "$dir" && du -k codemode-*.tgz | tr '\t' ' ' | paste -sd, -) KiB; npm install --offline took ${took} ms; README example (ESM): $esm; CommonJS: $cjs"
log "all artifacts install and run"
