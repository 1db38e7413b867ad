#!/usr/bin/env bash
# Installs the artifacts of `make dist` (in DIR, default dist/) the way a user would, each into a
# fresh temporary directory, and checks them: the checksums; the binary tarball extracted and its
# `codemode` run (`--version`, then `demo` on the built-in demo catalog, which must complete).
# Prints how long each install took. Usage: scripts/check-dist.sh [DIR]
set -euo pipefail
dir=$(cd "${1:-dist}" && pwd)
(cd "$dir" && sha256sum -c --quiet SHA256SUMS)
echo "[check-dist] checksums ok" >&2
for tarball in "$dir"/codemode-*-linux-gnu.tar.gz; do
  home=$(mktemp -d)
  start=$(date +%s%N)
  tar -C "$home" -xzf "$tarball"
  bin=$(echo "$home"/codemode-*/codemode)
  "$bin" --version >&2
  took=$(( ($(date +%s%N) - start) / 1000000 ))
  out=$("$bin" demo 2>&1) || { echo "$out" >&2; echo "[check-dist] codemode demo failed from $tarball" >&2; exit 1; }
  echo "[check-dist] $(basename "$tarball"): extracted and ran in ${took} ms; demo ok ($(echo "$out" | wc -l) lines)" >&2
  rm -rf "$home"
done
