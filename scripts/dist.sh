#!/usr/bin/env bash
# Release artifacts into dist/ (run by `make dist`, outside CI: a release build). So far: the
# `codemode` binary as a tarball (`codemode-<version>-x86_64-linux-gnu.tar.gz`: the binary, the
# README and the licence texts) and `SHA256SUMS`; the glibc version the binary needs is computed
# from its dynamic symbols and written beside it (`GLIBC-FLOORS`). Then each artifact is installed
# the way a user would (scripts/check-dist.sh). The wheel and the npm platform packages are not
# built here yet.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
python3 scripts/check-versions.py
version=$(python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])')
triple=x86_64-linux-gnu
out=dist
rm -rf "$out"
mkdir -p "$out"

cargo build --locked --release -p codemode-cli --bin codemode >&2
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
name="codemode-$version-$triple"
mkdir -p "$stage/$name"
strip -o "$stage/$name/codemode" "$CARGO_TARGET_DIR/release/codemode"
cp README.md LICENSE-MIT LICENSE-APACHE "$stage/$name/"
tar -C "$stage" -czf "$out/$name.tar.gz" "$name"

# The glibc floor: the newest GLIBC_x.y symbol version the binary needs, and whether it uses
# packed relative relocations (DT_RELR, which needs glibc 2.36).
floor=$(objdump -T "$stage/$name/codemode" | grep -oE 'GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?' | sort -uV | tail -1)
relr=$(readelf -d "$stage/$name/codemode" | grep -c 'RELR' || true)
if [ "$relr" -gt 0 ]; then floor="$floor (packed relocations: GLIBC_2.36)"; fi
echo "$name.tar.gz: $floor" > "$out/GLIBC-FLOORS"

(cd "$out" && sha256sum ./*.tar.gz > SHA256SUMS)
ls -l "$out" >&2
cat "$out/GLIBC-FLOORS" >&2
./scripts/check-dist.sh "$out"
