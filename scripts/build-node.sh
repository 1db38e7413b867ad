#!/usr/bin/env bash
# Builds the Node package's addon (crates/codemode-node) in the workspace's dev profile and target
# dir — the same build as the tests, no second profile or target triple — and writes next to the
# package: the addon (`codemode.linux-x64-gnu.node`) and its TypeScript declarations
# (`native.d.ts`, generated from the `#[napi]` items by napi-rs's own type generator).
# Usage: scripts/build-node.sh [--release]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
profile=debug; flags=()
if [ "${1:-}" = "--release" ]; then profile=release; flags=(--release); fi
pkg=crates/codemode-node
typedefs="$CARGO_TARGET_DIR/napi-rs/codemode-node"
stamp="$typedefs.stamp"
sum=$(cat "$pkg"/Cargo.toml "$pkg"/src/*.rs | sha256sum | cut -c1-16)
# napi-derive writes the type definitions while it expands the macros: re-expand (force the
# crate's rebuild) when its sources changed or the definitions are missing.
force=$(cut -d' ' -f2 "$stamp" 2>/dev/null || echo 0)
if [ "$(cut -d' ' -f1 "$stamp" 2>/dev/null)" != "$sum" ] || [ ! -s "$typedefs/codemode-node" ] || [ ! -f "$pkg/native.d.ts" ]; then
  rm -rf "$typedefs"; mkdir -p "$typedefs"
  force=$(date +%s%N)
fi
NAPI_TYPE_DEF_TMP_FOLDER="$typedefs" NAPI_FORCE_BUILD_CODEMODE_NODE="$force" \
  cargo build --locked "${flags[@]}" -p codemode-node
echo "$sum $force" > "$stamp"
# Without debug info: the package (and an `npm pack` tarball) carries the code only.
strip --strip-debug -o "$pkg/codemode.linux-x64-gnu.node" "$CARGO_TARGET_DIR/$profile/libcodemode_node.so"
node "$pkg/scripts/typedefs.mjs" "$typedefs" "$pkg/native.d.ts"
