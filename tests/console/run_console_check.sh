#!/usr/bin/env bash
# run_console_check.sh KILN: the ops console in headless Chromium (Debian's chromium package),
# driven by playwright-core from the npm registry (installed into the build folder once; it
# drives the system's Chromium and downloads no browser). Starts KILN on the embedded default
# and runs console_check.mjs against it; screenshots land in build/console-artifacts/.
# Exits 77 (CTest: skipped) when no browser, node or package can be had on this machine.
set -uo pipefail
kiln="$1"
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "$(dirname "$kiln")/.." && pwd)"
work="$build/console-node"
browser="$(command -v chromium || command -v chromium-browser || true)"
[ -n "$browser" ] || { echo "skipped: no Chromium installed (Debian's chromium package)"; exit 77; }
command -v node >/dev/null && command -v npm >/dev/null || { echo "skipped: node/npm not installed"; exit 77; }
mkdir -p "$work" "$build/console-artifacts"
if [ ! -d "$work/node_modules/playwright-core" ]; then
  (cd "$work" && timeout 180 npm install --no-audit --no-fund --silent playwright-core@1 >/dev/null 2>&1) ||
    { echo "skipped: could not install playwright-core from the npm registry"; exit 77; }
fi
cp "$here/console_check.mjs" "$work/check.mjs"
. "$here/../support/start_kiln.sh"
start_kiln "$kiln"
cd "$work" && timeout 240 node check.mjs "$url" "$admin" "$key" "$browser" "$build/console-artifacts"
