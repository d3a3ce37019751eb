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
log="$(mktemp)"
store="$log.db"  # a store of its own, not ~/.kiln's
"$kiln" serve --port 0 --store "$store" >"$log" 2>/dev/null &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -f "$log" "$store" "$store-wal" "$store-shm" "$store".usage.*' EXIT
for _ in $(seq 100); do grep -q "serving on" "$log" && break; sleep 0.05; done
url="$(sed -n 's/^kiln serving on \(http:\/\/[0-9.:]*\) .*/\1/p' "$log")"
key="$(sed -n 's/^  team [^ ]* key \(.*\)$/\1/p' "$log" | head -1)"
[ -n "$url" ] && [ -n "$key" ] || { echo "kiln did not start"; exit 1; }
timeout 60 node "$work/check.mjs" "$url/v1" "$key"
