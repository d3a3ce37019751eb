#!/usr/bin/env bash
# run_node_sdk_check.sh KILN: installs the OpenAI SDK for Node (npm registry) into the build
# folder once, starts KILN on a free port and runs openai_node_sdk.mjs against it.
# Exits 77 (CTest: skipped) when node or the package cannot be had on this machine.
set -uo pipefail
kiln="$1"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(dirname "$kiln")/../sdk-node"
command -v node >/dev/null && command -v npm >/dev/null || { echo "skipped: node/npm not installed"; exit 77; }
mkdir -p "$work"
if [ ! -d "$work/node_modules/openai" ]; then
  (cd "$work" && timeout 180 npm install --no-audit --no-fund --silent openai@4 >/dev/null 2>&1) ||
    { echo "skipped: could not install the openai package from the npm registry"; exit 77; }
fi
cp "$here/openai_node_sdk.mjs" "$work/check.mjs"
. "$here/../support/start_kiln.sh"
start_kiln "$kiln"
timeout 60 node "$work/check.mjs" "$url/v1" "$key"
