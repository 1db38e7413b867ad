#!/usr/bin/env bash
# Release artifacts into dist/ (run by `make dist`, outside CI: release builds, where CI keeps one
# dev profile), then each installed the way a user would (scripts/check-dist.sh):
# - `codemode-<v>-x86_64-linux-gnu.tar.gz`: the `codemode` binary (stripped), the README and the
#   licence texts;
# - `codemode-<v>-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl`: the Python package, one wheel for every
#   CPython >= 3.10, linked by zig against glibc 2.17's symbols (maturin --zig; zig and auditwheel
#   come from PyPI into .venv-dist, scripts/requirements-dist.txt), and `codemode-<v>.tar.gz`, its
#   sdist (building it needs what scripts/setup.sh installs: Rust, and clang-16, lld-16, wasi-libc
#   and libclang-rt-16-dev-wasm32 for the WebAssembly guest);
# - `codemode-<v>.tgz` and `codemode-linux-x64-gnu-<v>.tgz`: the npm package in napi-rs's
#   platform-package layout (crates/codemode-node/scripts/pack.mjs), the addon a release build;
# - `GLIBC-FLOORS`: the oldest glibc each native artifact runs on, computed from its dynamic
#   symbols' versions (and DT_RELR, packed relocations, which need 2.36);
# - `SHA256SUMS` over all of them;
# - and `cargo package` of every crate a Rust user would depend on (left in
#   $CARGO_TARGET_DIR/package: crates are published with `cargo publish`, not downloaded).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
python3 scripts/check-versions.py
version=$(python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])')
out=dist
rm -rf "$out"
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
log() { echo "[dist] $*" >&2; }

# The Python build tools, in a venv of their own (idempotent: rebuilt when the pins change).
venv=.venv-dist
if ! { [ -x "$venv/bin/python" ] && cmp -s scripts/requirements-dist.txt "$venv/.stamp-requirements"; }; then
  log "creating $venv with scripts/requirements-dist.txt"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r scripts/requirements-dist.txt
  cp scripts/requirements-dist.txt "$venv/.stamp-requirements"
fi

# The oldest glibc a shared object or executable runs on: the newest GLIBC_x.y version among its
# dynamic symbols, or 2.36 if it has packed relative relocations (DT_RELR).
glibc_floor() {
  local floor relr
  floor=$(objdump -T "$1" | grep -oE 'GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?' | sort -uV | tail -1)
  relr=$(readelf -d "$1" | grep -c '(RELR)' || true)
  if [ "$relr" -gt 0 ]; then echo "GLIBC_2.36 (packed relocations; newest symbol version $floor)"; else echo "$floor"; fi
}

# 1. The binary.
log "building the codemode binary and the Node addon (release)"
cargo build --locked --release -p codemode-cli --bin codemode >&2
triple=x86_64-linux-gnu
name="codemode-$version-$triple"
mkdir -p "$stage/$name"
strip -o "$stage/$name/codemode" "$CARGO_TARGET_DIR/release/codemode"
cp README.md LICENSE-MIT LICENSE-APACHE "$stage/$name/"
tar -C "$stage" -czf "$out/$name.tar.gz" "$name"
echo "$name.tar.gz: $(glibc_floor "$stage/$name/codemode")" > "$out/GLIBC-FLOORS"

# 2. The npm packages: the addon in release (with its declarations), packed in the platform layout.
./scripts/build-node.sh --release
node crates/codemode-node/scripts/pack.mjs "$out" > "$stage/npm.json"
echo "codemode-linux-x64-gnu-$version.tgz: $(glibc_floor crates/codemode-node/codemode.linux-x64-gnu.node)" >> "$out/GLIBC-FLOORS"

# 3. The Python wheel (manylinux_2_17 through zig) and the sdist.
log "building the Python wheel (maturin --zig, manylinux_2_17) and sdist"
PATH="$PWD/$venv/bin:$PATH" maturin build --quiet --locked --release --strip --zig --compatibility manylinux_2_17 \
  -m crates/codemode-python/Cargo.toml --out "$out" >&2
PATH="$PWD/$venv/bin:$PATH" maturin sdist -m crates/codemode-python/Cargo.toml --out "$out" >&2
wheel=$(echo "$out"/codemode-"$version"-*.whl)
unzip -q -o "$wheel" 'codemode/_native*.so' -d "$stage/wheel"
echo "$(basename "$wheel"): $(glibc_floor "$stage"/wheel/codemode/_native*.so)" >> "$out/GLIBC-FLOORS"

# 4. The crates a Rust user depends on: `cargo package` (each verified by building it from its
#    packaged sources against the others'; unoptimized, ~20 minutes cold). CODEMODE_DIST_CRATES=0
#    skips it.
if [ "${CODEMODE_DIST_CRATES:-1}" != 0 ]; then
  log "cargo package: every crate but the test-only and language-package ones"
  cargo package --locked --workspace --exclude codemode-fuzzing --exclude codemode-node --exclude codemode-python \
    --exclude codemode-workspace-hack >&2
  ls "$CARGO_TARGET_DIR"/package/*-"$version".crate >&2
fi

(cd "$out" && sha256sum ./*.tar.gz ./*.whl ./*.tgz > SHA256SUMS)
ls -l "$out" >&2
cat "$out/GLIBC-FLOORS" >&2
./scripts/check-dist.sh "$out"
